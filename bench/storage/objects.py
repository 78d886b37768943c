"""One small object-store interface over a local directory or an S3 bucket.

Shards (bench.data), `python -m bench.data prepare` and the storage benchmark (bench.iobench)
read and write through it, so every reader works on both backends. Keys are '/'-separated
paths relative to the store's root (a directory, or s3://bucket/prefix).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, List, Mapping, Optional, Protocol, Tuple


class ObjectStore(Protocol):
    url: str  # where it points, safe to log (never carries credentials)

    def get(self, key: str) -> bytes: ...

    def get_range(self, key: str, start: int, length: int) -> bytes: ...

    def put(self, key: str, data: bytes) -> None: ...

    def list(self, prefix: str = "") -> List[Tuple[str, int]]: ...  # (key, size in bytes), sorted

    def exists(self, key: str) -> bool: ...


class LocalStore:
    """A directory. put() writes to a temp name and renames, so a reader never sees half a file."""

    def __init__(self, root: Path, fsync: bool = False):
        self.root = Path(root)
        self.url = str(self.root)
        self.fsync = fsync

    def _path(self, key: str) -> Path:
        return self.root / key

    def get(self, key: str) -> bytes:
        with open(self._path(key), "rb") as fh:
            return fh.read()

    def get_range(self, key: str, start: int, length: int) -> bytes:
        with open(self._path(key), "rb") as fh:
            fh.seek(start)
            return fh.read(length)

    def put(self, key: str, data: bytes) -> None:
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + f".tmp{os.getpid()}")
        with open(tmp, "wb") as fh:
            fh.write(data)
            if self.fsync:
                fh.flush()
                os.fsync(fh.fileno())
        os.replace(tmp, path)

    def list(self, prefix: str = "") -> List[Tuple[str, int]]:
        base = self.root / prefix if prefix else self.root
        if not base.exists():
            return []
        found = [(p.relative_to(self.root).as_posix(), p.stat().st_size)
                 for p in base.rglob("*") if p.is_file() and ".tmp" not in p.name]
        return sorted(found)

    def exists(self, key: str) -> bool:
        return self._path(key).is_file()


def open_store(location: str, storage: Optional[Mapping[str, Any]] = None) -> ObjectStore:
    """`location` is a local directory or s3://bucket/prefix; `storage` is the storage group
    (endpoint, region, client, retries) used for S3."""
    if location.startswith("s3://"):
        from bench.storage.s3 import open_s3_store

        return open_s3_store(location, storage or {})
    if storage and storage.get("direct_io"):
        from bench.storage.direct import DirectReadStore

        return DirectReadStore(Path(location))
    return LocalStore(Path(location))
