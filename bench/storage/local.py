"""Local-filesystem storage: a directory for checkpoints, written with fsync so the
reported write time is the time to reach the disk, not the page cache."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, Dict


class LocalStorage:
    def __init__(self, root: Path, fsync: bool = True):
        self.root = root
        self.fsync = fsync

    def save_checkpoint(self, state: Dict[str, Any], name: str) -> Dict[str, float]:
        import torch

        self.root.mkdir(parents=True, exist_ok=True)
        path = self.root / name
        start = time.perf_counter()
        with open(path, "wb") as fh:
            torch.save(state, fh)
            fh.flush()
            if self.fsync:
                os.fsync(fh.fileno())
        seconds = time.perf_counter() - start
        size = path.stat().st_size
        return {"checkpoint_path": str(path), "checkpoint_bytes": size, "checkpoint_write_seconds": seconds,
                "checkpoint_write_gbps": size / seconds / 1e9 if seconds > 0 else 0.0}
