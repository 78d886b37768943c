"""The object-store interface every storage backend provides, and the backend interface the
registry (bench.storage.registry) hands out.

Shards (bench.data), `python -m bench.data prepare`, training checkpoints and the storage
benchmark (bench.iobench) read and write through an ObjectStore, so each works on every
backend. Keys are '/'-separated paths relative to the store's root (a directory, or
s3://bucket/prefix). Torch-free.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any, Dict, List, Protocol, Tuple

from bench.config.storage import StorageLocation


class ObjectStore(Protocol):
    url: str  # where it points, safe to log (never carries credentials)

    def get(self, key: str) -> bytes: ...

    def get_range(self, key: str, start: int, length: int) -> bytes: ...

    def put(self, key: str, data: bytes) -> None: ...  # all or nothing: a reader never sees half an object

    def list(self, prefix: str = "") -> List[Tuple[str, int]]: ...  # (key, size in bytes), sorted

    def exists(self, key: str) -> bool: ...

    def delete(self, key: str) -> None: ...  # gone if it was there; no error if it was not


class Backend:
    """One `storage=` option, built from the storage config: where its data lives and how it is opened."""

    def __init__(self, cfg: StorageLocation):
        self.cfg = cfg

    def location(self, run_dir: Path, subdir: str = "") -> str:
        """A local directory or s3://bucket/prefix (the run's own directory when none is configured)."""
        raise NotImplementedError

    def open(self, location: str) -> ObjectStore:
        """A store for reading and writing datasets at `location`."""
        raise NotImplementedError

    def checkpoint_store(self, run_dir: Path, subdir: str = "") -> ObjectStore:
        """A store for checkpoints: durable writes (fsync'd on local disks)."""
        return self.open(self.location(run_dir, subdir))

    def describe(self, store: ObjectStore) -> str:
        """How the store reads, for reports (posix, o_direct, the S3 client's name, ...)."""
        raise NotImplementedError


def join_key(*parts: str) -> str:
    return "/".join(p.strip("/") for p in parts if p and p.strip("/"))


def serialize(state: Dict[str, Any]) -> bytes:
    """A checkpoint as the bytes torch.save writes (training's checkpoints and the storage
    benchmark's alike: one way, so the two measure the same thing)."""
    import torch

    buffer = io.BytesIO()
    torch.save(state, buffer)
    return buffer.getvalue()
