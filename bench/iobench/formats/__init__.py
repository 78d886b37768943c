"""The record formats of the storage benchmark's dataset, one module each; bench.iobench.formats.registry
maps `storage.workload.format` to its class (the one place that does)."""
