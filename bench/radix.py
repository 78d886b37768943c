"""`python -m bench.radix`: the command's one documented name (docs/architecture.md, "Commands");
its code is bench.tools.radix, which runs the same when called as `python -m bench.tools.radix` (not documented)."""

from bench.tools.radix import main

if __name__ == "__main__":
    raise SystemExit(main())
