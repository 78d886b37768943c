"""`python -m bench.data`: the old module path of `python -m bench.tools.data`, kept so existing command lines work."""

from bench.tools.data import main

if __name__ == "__main__":
    raise SystemExit(main())
