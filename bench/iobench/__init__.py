"""The storage benchmark scenario (bench.iobench.scenario): prepare, read with simulated
accelerators, checkpoint, report."""
