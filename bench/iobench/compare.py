"""`python -m bench.iobench.compare`: the command's one documented name (docs/architecture.md, "Commands");
its code is bench.tools.iobench_compare (which `python -m bench.tools.iobench_compare` also runs, not documented)."""

from bench.machine.children import exit_without_teardown
from bench.tools.iobench_compare import main

if __name__ == "__main__":
    exit_without_teardown(main)
