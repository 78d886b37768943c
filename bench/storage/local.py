"""storage=local: a directory. Writes go to a temporary name and are renamed, so a reader
never sees half a file; `fsync` makes a write's time the time to reach the disk.

`storage.direct_io=true` keeps the page cache out of reads: O_DIRECT needs the buffer, offset
and length aligned to the device's block size, so reads go into a page-aligned anonymous mmap
rounded up to 4 KiB (a short read at end of file is fine). Filesystems that refuse O_DIRECT
(tmpfs, some overlays; macOS has no flag) fall back to posix_fadvise(DONTNEED) before each
read, which drops the file's clean cached pages, with one logged warning.
"""

from __future__ import annotations

import logging
import mmap
import os
import re
from pathlib import Path
from typing import Any, BinaryIO, Callable, Iterable, List, Mapping, Optional, Tuple

import psutil

from bench.config.storage import StorageLocation
from bench.machine.writable import check_writable_dir, write_whole
from bench.storage.base import Backend, ObjectStore

log = logging.getLogger(__name__)

ALIGN = 4096
STALE_TMP = re.compile(r"^.+\.tmp(\d+)$")  # put_with's temporary: <name>.tmp<pid of the writer>


def remove_stale_temporaries(root: Path, recursive: bool = True) -> List[Path]:
    """Delete the `<name>.tmp<pid>` files (put_with's temporaries) under `root` whose writer, a pid on
    this host, is gone: a write killed midway. Returns them. A live pid's file is left alone: that
    write may be in progress. Both the training checkpoints and the storage benchmark use this."""
    root, removed = Path(root), []
    for path in (root.rglob if recursive else root.glob)("*.tmp*"):  # none where `root` is no folder
        match = STALE_TMP.match(path.name)
        if match and (pid := int(match.group(1))) != os.getpid() and path.is_file() and not psutil.pid_exists(pid):
            path.unlink(missing_ok=True)
            removed.append(path)
    return removed


class LocalStore:
    """A directory as an ObjectStore."""

    mode = "posix"

    def __init__(self, root: Path, fsync: bool = False):
        self.root, self.fsync = Path(root), fsync
        self.url = str(self.root)

    def local_path(self, key: str) -> Optional[str]:
        """A path the storage benchmark may read itself (os.preadv into its own buffers); None
        where reads must go through get(): a store that reads its own way (direct I/O, a test's
        slow store) overrides get()."""
        return str(self.root / key) if type(self).get is LocalStore.get else None

    def get(self, key: str) -> bytes:
        return (self.root / key).read_bytes()

    def get_range(self, key: str, start: int, length: int) -> bytes:
        with open(self.root / key, "rb") as fh:
            fh.seek(start)
            return fh.read(length)

    def put(self, key: str, data: bytes) -> None:
        self.put_with(key, lambda fh: fh.write(data))

    def put_with(self, key: str, write: Callable[[BinaryIO], Any]) -> int:
        """put() for a writer that streams into the file (torch.save: no copy of the whole
        object in memory first); all or nothing all the same. Returns the bytes written."""
        path = self.root / key
        path.parent.mkdir(parents=True, exist_ok=True)

        def fill(tmp: Path) -> int:
            with open(tmp, "wb") as fh:
                write(fh)
                if self.fsync:
                    fh.flush()
                    os.fsync(fh.fileno())
                return fh.tell()

        return write_whole(path, fill)

    def remove_stale_temporaries(self) -> List[str]:
        """The `<name>.tmp<pid>` files here whose writer is dead (a save killed mid-write): removed,
        their names returned. A live process's is a write in progress and stays. (The pid is
        looked up on this host: on a directory shared between hosts, keep runs of one config apart.)"""
        return sorted(path.name for path in remove_stale_temporaries(self.root, recursive=False))

    def list(self, prefix: str = "") -> List[Tuple[str, int]]:
        return sorted(  # nothing under a prefix that is not there (rglob of a missing folder: none)
            (p.relative_to(self.root).as_posix(), p.stat().st_size)
            for p in (self.root / prefix).rglob("*")
            if p.is_file() and ".tmp" not in p.name
        )

    def exists(self, key: str) -> bool:
        return (self.root / key).is_file()

    def drop_cache(self, keys: Iterable[str]) -> str:
        """Evict these files from the page cache (flushed first: dirty pages cannot be dropped), so
        the next read comes from the device. Returns how, for reports."""
        if not hasattr(os, "posix_fadvise"):
            return "none (this OS has no posix_fadvise)"
        for key in keys:
            fd = os.open(self.root / key, os.O_RDONLY)
            try:
                os.fdatasync(fd)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)
        return "posix_fadvise_dontneed"

    def delete(self, key: str) -> None:
        (self.root / key).unlink(missing_ok=True)


class DirectReadStore(LocalStore):
    """A LocalStore whose get/get_range bypass (or evict) the page cache."""

    def __init__(self, root: Path, fsync: bool = False):
        super().__init__(root, fsync=fsync)
        self.mode = "o_direct"
        if not hasattr(os, "O_DIRECT"):
            self._fall_back("this OS has no O_DIRECT")

    def _fall_back(self, why: str) -> None:
        self.mode = "fadvise_dontneed" if hasattr(os, "posix_fadvise") else "cached"
        log.warning(
            "storage.direct_io: %s for %s; using %s reads (results may include page-cache hits)",
            why,
            self.root,
            self.mode,
        )

    def get(self, key: str) -> bytes:
        return self.get_range(key, 0, None)

    def get_range(self, key: str, start: int, length: Optional[int]) -> bytes:  # None: to the end
        path = self.root / key
        if self.mode == "o_direct":
            try:
                return _read_o_direct(path, start, length)
            except OSError as exc:
                if exc.errno != 22:  # EINVAL: this filesystem refuses O_DIRECT
                    raise
                self._fall_back(f"O_DIRECT refused ({exc.strerror})")
        with open(path, "rb", buffering=0) as fh:
            if self.mode == "fadvise_dontneed":
                os.posix_fadvise(fh.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
            fh.seek(start)
            return fh.read() if length is None else fh.read(length)


def _read_o_direct(path: Path, start: int, length: Optional[int]) -> bytes:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    try:
        length = os.fstat(fd).st_size - start if length is None else length  # None: to the end
        aligned_start = start - start % ALIGN
        skip = start - aligned_start
        with mmap.mmap(-1, max(ALIGN, (skip + length + ALIGN - 1) // ALIGN * ALIGN)) as buffer:  # page-aligned
            view, got = memoryview(buffer), 0
            while got < skip + length:  # one call reads at most ~2 GiB; short reads stay aligned
                n = os.preadv(fd, [view[got:]], aligned_start + got)
                if n == 0:  # end of file
                    break
                got += n
            view.release()
            return bytes(buffer[skip : min(got, skip + length)])
    finally:
        os.close(fd)


class LocalBackend(Backend):
    """storage=local: storage.root (default: the run's output directory)."""

    def location(self, run_dir: Path, subdir: str = "") -> str:
        return str(Path(self.cfg.root or run_dir) / subdir)

    def open(self, location: str, fsync: bool = False) -> ObjectStore:
        return (DirectReadStore if self.cfg.direct_io else LocalStore)(Path(location), fsync=fsync)

    def checkpoint_store(self, run_dir: Path, subdir: str = "") -> ObjectStore:
        return self.open(self.location(run_dir, subdir), fsync=self.cfg.fsync)

    def describe(self, store: ObjectStore) -> str:
        return getattr(store, "mode", "posix")


def check_local_dirs(cfg: StorageLocation, base: Path, folders: Mapping[str, str]) -> None:
    """storage=local, before any work: storage.root (else `base`: the launch or run directory) and
    each folder under it that the run writes into ({key naming it: folder}) can be directories this
    process writes; else one ConfigError naming the key (a file where a directory goes, a read-only
    mount). Nothing is made."""
    if cfg.name != "local":
        return
    if cfg.root:
        check_writable_dir("storage.root", cfg.root)
    for key, folder in folders.items():
        check_writable_dir(key, folder, LocalBackend(cfg).location(base, folder))
