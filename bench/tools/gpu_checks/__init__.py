"""`python -m bench.tools.gpu_check`'s parts: the checks and their judges (checks), and how each
runs (runners). The command itself is bench.tools.gpu_check."""
