"""`python -m bench.overhead`: the command's one documented name (docs/architecture.md, "Commands");
its code is bench.tools.overhead, which runs the same as `python -m bench.tools.overhead` (not documented)."""

from bench.machine.children import exit_without_teardown
from bench.tools.overhead import main

if __name__ == "__main__":
    exit_without_teardown(main)
