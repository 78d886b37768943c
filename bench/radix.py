"""`python -m bench.radix`: the old module path of `python -m bench.tools.radix`, kept so existing
command lines work."""

from bench.tools.radix import main

if __name__ == "__main__":
    main()  # it ends the process itself (exit 0 when it returns)
