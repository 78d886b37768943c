"""`python -m bench.sweep_overhead`: the command's one documented name (docs/architecture.md, "Commands");
its code is bench.tools.sweep_overhead (which `python -m bench.tools.sweep_overhead` also runs, not documented)."""

from bench.machine.children import exit_without_teardown
from bench.tools.sweep_overhead import main

if __name__ == "__main__":
    exit_without_teardown(main)
