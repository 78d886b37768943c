"""The storage group: where a run's outputs and checkpoints go (a local directory or S3)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Dict, Mapping, Union

from bench.storage.local import LocalStorage
from bench.storage.objects import LocalStore, ObjectStore, open_store


def storage_location(cfg: Mapping[str, Any], run_dir: Path, subdir: str = "") -> str:
    """A local directory (storage.root, or the run's directory) or s3://bucket/prefix, plus `subdir`."""
    if cfg["name"] == "s3":
        from bench.storage.s3 import join_key

        return "s3://" + join_key(cfg["bucket"], cfg["prefix"], subdir)
    root = Path(cfg["root"]) if cfg["root"] else run_dir
    return str(root / subdir) if subdir else str(root)


def checkpoint_store(cfg: Mapping[str, Any], run_dir: Path, subdir: str = "") -> ObjectStore:
    """An object store for checkpoints: local ones are fsync'd (storage.fsync)."""
    location = storage_location(cfg, run_dir, subdir)
    if cfg["name"] == "s3":
        return open_store(location, cfg)
    if cfg.get("direct_io"):
        from bench.storage.direct import DirectReadStore

        return DirectReadStore(Path(location), fsync=cfg["fsync"])
    return LocalStore(Path(location), fsync=cfg["fsync"])


class ObjectCheckpointStorage:
    """Training checkpoints on an object store (storage=s3): serialized in memory, then one PUT."""

    def __init__(self, store: ObjectStore):
        self.store = store

    def save_checkpoint(self, state: Dict[str, Any], name: str) -> Dict[str, Any]:
        from bench.iobench.checkpoint import serialize

        start = time.perf_counter()
        data = serialize(state)
        self.store.put(name, data)
        seconds = time.perf_counter() - start
        return {"checkpoint_path": f"{self.store.url}/{name}", "checkpoint_bytes": len(data),
                "checkpoint_write_seconds": seconds,
                "checkpoint_write_gbps": len(data) / seconds / 1e9 if seconds > 0 else 0.0}


def build_storage(cfg: Mapping[str, Any], run_dir: Path) -> Union[LocalStorage, ObjectCheckpointStorage]:
    if cfg["name"] == "local":
        return LocalStorage(Path(cfg["root"]) if cfg["root"] else run_dir, fsync=cfg["fsync"])
    if cfg["name"] == "s3":
        return ObjectCheckpointStorage(checkpoint_store(cfg, run_dir))
    raise ValueError(f"unknown storage option {cfg['name']!r}")  # bench.validate rejects this first
