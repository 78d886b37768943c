"""How one reader (a thread, or a reader process: bench.iobench.reader_processes) reads: into a
buffer of its own, allocated once and reused.

Local files (a store that offers `local_path`) are read with os.preadv straight into the
buffer, `transfer_size` bytes per call (one record when unset), as fio and TensorFlow's record
reader do; the GIL is released in every call. A format that checks a file as it streams by
(raw, tfrecord) is read through one piece-sized buffer, which stays in the CPU cache (a
file-sized one did not: ~40% slower warm here); the others need the file whole. Buffers are
anonymous mmaps, so they start on a page boundary: the kernel's copy out of the page cache into
a buffer that is not 64-byte aligned (a bytearray's data starts 16 or 48 bytes into a cache
line) ran ~4x slower here. No read-ahead hint is given: POSIX_FADV_SEQUENTIAL (fio's default)
made cold reads ~10% slower here than the kernel's own read-ahead. Other stores (S3, direct I/O) hand back bytes,
which are used in place. Either way the format checks the bytes before the buffer is reused,
so a reader holds one file (or one sample) at a time, never a copy.
"""

from __future__ import annotations

import mmap
import os
from collections import OrderedDict
from typing import Optional, Tuple

from bench.iobench.formats.base import FileSpec, Format, LengthCheck, StreamCheck
from bench.storage.base import ObjectStore

OPEN_FILES = 64  # per reader, sample-level reads: descriptors kept open, least recently used closed


class Fetcher:
    def __init__(self, store: ObjectStore, fmt: Format, transfer_size: Optional[int] = None, decode: bool = False):
        self.store, self.fmt, self.transfer_size, self.decode = store, fmt, transfer_size, decode
        self._local = getattr(store, "local_path", None)
        self._view = memoryview(b"")
        self._piece = memoryview(b"")
        self._open: "OrderedDict[str, int]" = OrderedDict()

    def read(self, spec: FileSpec, sample: Optional[int]) -> Tuple[int, int]:
        """(samples, bytes) of one work item read and checked: the whole file (sample None) or one sample."""
        return self.whole_file(spec) if sample is None else (1, self.sample(spec, sample))

    def whole_file(self, spec: FileSpec) -> Tuple[int, int]:
        """(samples, bytes) of one file read whole and checked."""
        path = self._local(spec.key) if self._local else None
        if path is None:
            data = memoryview(self.store.get(spec.key))
        else:
            fd = os.open(path, os.O_RDONLY)
            try:
                size, chunk = os.fstat(fd).st_size, self.transfer_size or spec.record_size
                if (stream := self.fmt.stream(spec, self.decode)) is not None:
                    got = self._stream(fd, size, chunk, stream)
                    return stream.finish(), got
                data = self._read(fd, 0, size, chunk)
            finally:
                os.close(fd)
        return self.fmt.check_file(data, spec, self.decode), len(data)

    def _stream(self, fd: int, size: int, chunk: int, stream: StreamCheck) -> int:
        """Feed the file to `stream` through one reused piece-sized buffer; returns the bytes read.
        A LengthCheck needs the count only: it is told it once, at the end, not fed every piece."""
        if len(self._piece) < chunk:
            self._piece = memoryview(mmap.mmap(-1, chunk))
        piece = self._piece[:chunk]
        pieces, got, preadv = [piece], 0, os.preadv
        feed = None if isinstance(stream, LengthCheck) else stream.feed
        while got < size:
            n = preadv(fd, pieces, got)
            if n == 0:
                break
            if feed is not None:
                feed(piece if n == chunk else piece[:n])
            got += n
        if isinstance(stream, LengthCheck):
            stream.got += got
        return got

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
        if len(self._view) < length:  # grown once to the largest read, then reused
            self._view = memoryview(mmap.mmap(-1, length))
        view, got = self._view, 0
        while got < length:
            n = os.preadv(fd, [view[got : min(length, got + chunk)]], offset + got)
            if n == 0:  # end of file: the format calls a short file what it is
                break
            got += n
        return view[:got]

    def _descriptor(self, path: str) -> int:
        if (fd := self._open.pop(path, None)) is None:
            fd = os.open(path, os.O_RDONLY)
            if len(self._open) >= OPEN_FILES:
                os.close(self._open.popitem(last=False)[1])
        self._open[path] = fd
        return fd

    def close(self) -> None:
        while self._open:
            os.close(self._open.popitem()[1])
