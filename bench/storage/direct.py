"""Local reads that keep the page cache out of a storage measurement (storage.direct_io=true).

O_DIRECT needs the buffer, offset and length aligned to the device's block size: reads go
into a page-aligned anonymous mmap, rounded up to 4 KiB (a short read at end of file is
fine). Filesystems that refuse O_DIRECT (tmpfs, some overlays; macOS has no flag) fall back
to posix_fadvise(DONTNEED) before each read, which drops the file's clean cached pages, with
one logged warning; where neither exists reads are plain and the warning says so.
"""

from __future__ import annotations

import logging
import mmap
import os
from pathlib import Path

from bench.storage.objects import LocalStore

log = logging.getLogger(__name__)

ALIGN = 4096


def _round_up(n: int) -> int:
    return max(ALIGN, (n + ALIGN - 1) // ALIGN * ALIGN)


class DirectReadStore(LocalStore):
    """A LocalStore whose get/get_range bypass (or evict) the page cache."""

    def __init__(self, root: Path, fsync: bool = False):
        super().__init__(root, fsync=fsync)
        self.mode = "o_direct" if hasattr(os, "O_DIRECT") else self._fallback_mode()
        if self.mode != "o_direct":
            self._warn_fallback("this OS has no O_DIRECT")

    @staticmethod
    def _fallback_mode() -> str:
        return "fadvise_dontneed" if hasattr(os, "posix_fadvise") else "cached"

    def _warn_fallback(self, why: str) -> None:
        log.warning("storage.direct_io: %s for %s; using %s reads (results may include page-cache hits)",
                    why, self.root, self.mode)

    def get(self, key: str) -> bytes:
        return self._read(key, 0, None)

    def get_range(self, key: str, start: int, length: int) -> bytes:
        return self._read(key, start, length)

    def _read(self, key: str, start: int, length: int | None) -> bytes:
        path = self._path(key)
        if self.mode == "o_direct":
            try:
                return _read_o_direct(path, start, length)
            except OSError as exc:
                if exc.errno != 22:  # EINVAL: this filesystem refuses O_DIRECT
                    raise
                self.mode = self._fallback_mode()
                self._warn_fallback(f"O_DIRECT refused ({exc.strerror})")
        with open(path, "rb", buffering=0) as fh:
            if self.mode == "fadvise_dontneed":
                os.posix_fadvise(fh.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
            fh.seek(start)
            return fh.read() if length is None else fh.read(length)


def _read_o_direct(path: Path, start: int, length: int | None) -> bytes:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    try:
        if length is None:
            length = os.fstat(fd).st_size - start
        aligned_start = start - start % ALIGN
        skip = start - aligned_start
        buffer = mmap.mmap(-1, _round_up(skip + length))  # page-aligned, as O_DIRECT requires
        try:
            view, got = memoryview(buffer), 0
            while got < skip + length:  # one call reads at most ~2 GiB; short reads stay aligned
                n = os.preadv(fd, [view[got:]], aligned_start + got)
                if n == 0:  # end of file
                    break
                got += n
            view.release()
            return bytes(buffer[skip:min(got, skip + length)])
        finally:
            buffer.close()
    finally:
        os.close(fd)
