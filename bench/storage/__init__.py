"""The storage group: where a run's outputs and checkpoints go."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from bench.storage.local import LocalStorage


def build_storage(cfg: Mapping[str, Any], run_dir: Path) -> LocalStorage:
    if cfg["name"] == "local":
        return LocalStorage(Path(cfg["root"]) if cfg["root"] else run_dir, fsync=cfg["fsync"])
    raise ValueError(f"unknown storage option {cfg['name']!r}")  # bench.validate rejects this first
