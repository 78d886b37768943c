"""storage.workload.format -> its Format: the one place that maps a format name to its code.

Adding a format: a module with a Format subclass (bench.iobench.formats.base), one line here,
a RecordFormat member (bench.config.storage)."""

from __future__ import annotations

import importlib
from functools import lru_cache
from typing import Dict

from bench.config.storage import RecordFormat
from bench.iobench.formats.base import Format

FORMATS: Dict[RecordFormat, str] = {
    RecordFormat.raw: "bench.iobench.formats.raw:RawFormat",
    RecordFormat.npz: "bench.iobench.formats.npz:NpzFormat",
    RecordFormat.tfrecord: "bench.iobench.formats.tfrecord:TFRecordFormat",
    RecordFormat.hdf5: "bench.iobench.formats.hdf5:HDF5Format",
    RecordFormat.jpeg: "bench.iobench.formats.jpeg:JPEGFormat",
}


@lru_cache(maxsize=None)
def format_for(name: str) -> Format:
    module, _, cls = FORMATS[RecordFormat(str(name))].partition(":")
    return getattr(importlib.import_module(module), cls)()
