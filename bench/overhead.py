"""`python -m bench.overhead`: the old module path of `python -m bench.tools.overhead`, kept so existing
command lines work."""

from bench.tools.overhead import main

if __name__ == "__main__":
    raise SystemExit(main())
