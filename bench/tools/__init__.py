"""Every command besides `python -m bench`: the sweep report, the Radix CLI, the overhead and
loader/storage benchmarks against their baselines, data preparation. Each is `python -m
bench.tools.<name>`; the older module paths (`python -m bench.report`, `bench.radix`, ...) are
kept as thin aliases so existing command lines keep working."""
