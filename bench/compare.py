"""`python -m bench.compare`: the command's one documented name (docs/architecture.md, "Commands");
its code is bench.tools.compare, which runs the same when called as `python -m bench.tools.compare` (not documented)."""

from bench.machine.children import exit_without_teardown
from bench.tools.compare import main

if __name__ == "__main__":
    exit_without_teardown(main)
