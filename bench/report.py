"""`python -m bench.report`: the command's one documented name (docs/architecture.md, "Commands");
its code is bench.tools.report, which runs the same as `python -m bench.tools.report` (not documented)."""

from bench.machine.children import exit_without_teardown
from bench.tools.report import main

if __name__ == "__main__":
    exit_without_teardown(main)
