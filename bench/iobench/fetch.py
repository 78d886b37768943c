"""How one reader thread reads: into a buffer of its own, allocated once and reused.

Local files (a store that offers `local_path`) are read with os.preadv straight into the
buffer, `transfer_size` bytes per call (one record when unset), as fio and TensorFlow's record
reader do; the GIL is released in every call. Other stores (S3, direct I/O) hand back bytes,
which are used in place. Either way the format checks the bytes before the buffer is reused,
so a reader thread holds one file (or one sample) at a time, never a copy.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from typing import Optional, Tuple

from bench.iobench.formats.base import FileSpec, Format
from bench.storage.base import ObjectStore

OPEN_FILES = 64  # per reader thread, sample-level reads: descriptors kept open, least recently used closed


class Fetcher:
    def __init__(self, store: ObjectStore, fmt: Format, transfer_size: Optional[int] = None, decode: bool = False):
        self.store, self.fmt, self.transfer_size, self.decode = store, fmt, transfer_size, decode
        self._local = getattr(store, "local_path", None)
        self._buffer = bytearray(0)
        self._view = memoryview(self._buffer)
        self._open: "OrderedDict[str, int]" = OrderedDict()

    def whole_file(self, spec: FileSpec) -> Tuple[int, int]:
        """(samples, bytes) of one file read whole and checked."""
        path = self._local(spec.key) if self._local else None
        if path is None:
            data = memoryview(self.store.get(spec.key))
        else:
            fd = os.open(path, os.O_RDONLY)
            try:
                size = spec.size or os.fstat(fd).st_size
                data = self._read(fd, 0, size, chunk=self.transfer_size or spec.record_size)
            finally:
                os.close(fd)
        return self.fmt.check_file(data, spec, self.decode), len(data)

    def sample(self, spec: FileSpec, index: int) -> int:
        """Bytes of one sample read on its own (a seek and a read) and checked."""
        offset, length = self.fmt.sample_span(spec, index)
        path = self._local(spec.key) if self._local else None
        if path is None:
            data = memoryview(self.store.get_range(spec.key, offset, length))
        else:
            data = self._read(self._descriptor(path), offset, length, chunk=self.transfer_size or length)
        self.fmt.check_sample(data, spec, self.decode)
        return len(data)

    def _read(self, fd: int, offset: int, length: int, chunk: int) -> memoryview:
        if len(self._buffer) < length:  # grown once to the largest read, then reused
            self._buffer = bytearray(length)
            self._view = memoryview(self._buffer)
        view, got = self._view, 0
        while got < length:
            n = os.preadv(fd, [view[got:min(length, got + chunk)]], offset + got)
            if n == 0:  # end of file: the format calls a short file what it is
                break
            got += n
        return view[:got]

    def _descriptor(self, path: str) -> int:
        fd = self._open.pop(path, None)
        if fd is None:
            fd = os.open(path, os.O_RDONLY)
            if len(self._open) >= OPEN_FILES:
                os.close(self._open.popitem(last=False)[1])
        self._open[path] = fd
        return fd

    def close(self) -> None:
        while self._open:
            os.close(self._open.popitem()[1])
