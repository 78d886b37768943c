"""The record formats of the storage benchmark's dataset, one module each; their names are in
bench.registries.FORMATS, and bench.iobench.formats.base.format_for hands out their instances."""
