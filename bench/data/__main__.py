"""`python -m bench.data`: the command's one documented name (docs/architecture.md, "Commands");
its code is bench.tools.data, which runs the same when called as `python -m bench.tools.data` (not documented)."""

from bench.machine.children import exit_without_teardown
from bench.tools.data import main

if __name__ == "__main__":
    exit_without_teardown(main)
