"""The object-store interface every storage backend provides, the backend interface, and the
backends by `storage.name`, from the one table (bench.registries.BACKENDS) or a user's own
module:Class:

    backend(cfg).location(run_dir, "dataset")   # where the option keeps things
    open_store("s3://bucket/prefix", cfg)       # a store for any location, by its URL scheme

Adding a backend: a module with a Backend class (below), one line in bench.registries.BACKENDS
(and conf/storage/<name>.yaml to give it defaults of its own).

Shards (bench.data), `python -m bench.data prepare`, training checkpoints and the storage
benchmark (bench.iobench) read and write through an ObjectStore, so each works on every
backend. Keys are '/'-separated paths relative to the store's root (a directory, or
s3://bucket/prefix). Torch-free.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any, Dict, List, Optional, Protocol, Tuple

from bench.config.storage import StorageLocation
from bench.registries import BACKENDS, load_named

# URL schemes of locations that are not local paths (s3://bucket/prefix as data.root, prepare --dst)
SCHEMES: Dict[str, str] = {"s3": "s3"}


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


def backend(cfg: StorageLocation, name: Optional[str] = None) -> Backend:
    return load_named("storage.name", name or cfg.name, BACKENDS)(cfg)


def open_store(location: str, cfg: StorageLocation) -> ObjectStore:
    """A store for `location`: a local directory, or <scheme>://... of a remote backend (whose
    endpoint, client and retries come from `cfg`, whatever storage option the run uses)."""
    return backend(cfg, SCHEMES.get(location.split("://", 1)[0] if "://" in location else "", "local")).open(location)


def join_key(*parts: str) -> str:
    return "/".join(p.strip("/") for p in parts if p and p.strip("/"))


def serialize(state: Dict[str, Any]) -> bytes:
    """A checkpoint as the bytes torch.save writes (training's checkpoints and the storage
    benchmark's alike: one way, so the two measure the same thing)."""
    import torch

    buffer = io.BytesIO()
    torch.save(state, buffer)
    return buffer.getvalue()
