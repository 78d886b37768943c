"""`python -m bench.iobench.compare`: the old module path of `python -m bench.tools.iobench_compare`, kept so existing command lines work."""

from bench.tools.iobench_compare import main

if __name__ == "__main__":
    raise SystemExit(main())
