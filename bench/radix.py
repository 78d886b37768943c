"""`python -m bench.radix`: the command's one documented name (docs/architecture.md, "Commands");
its code is bench.tools.radix, which runs the same as `python -m bench.tools.radix` (not documented)."""

from bench.tools.radix import main

if __name__ == "__main__":
    main()  # it ends the process itself (exit 0 when it returns)
