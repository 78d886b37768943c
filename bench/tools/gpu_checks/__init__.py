"""`python -m bench.tools.gpu_check`'s checks and their judges (checks). The command itself, and
how each check runs, is bench.tools.gpu_check."""
