"""`python -m bench.sweep_overhead`: the old module path of `python -m bench.tools.sweep_overhead`, kept so existing
command lines work."""

from bench.tools.sweep_overhead import main

if __name__ == "__main__":
    main()  # it ends the process itself (exit 0 when it returns)
