"""storage.save_checkpoint=true: rank 0 writes the model and optimizer state after the measured
window (every rank holds the same weights) to the storage backend, and reports its write speed.
One run writes a folder at a time (bench.storage.writer_lock): another run's write is refused."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable, Optional

from bench.config import BenchConfig
from bench.rank_context import RankContext
from bench.storage.base import serialize
from bench.storage.registry import backend
from bench.storage.writer_lock import FolderBusy, hold
from bench.train.result import CheckpointWrite

Writer = Callable[[Any, Any], CheckpointWrite]


def checkpoint_writer(config: BenchConfig, out_dir: Path, ctx: RankContext) -> Optional[Writer]:
    if not config.storage.save_checkpoint or not ctx.is_reporter:
        return None
    store = backend(config.storage).checkpoint_store(out_dir)
    name = config.storage.checkpoint_name

    def write(model: Any, optimizer: Any) -> CheckpointWrite:
        """Its figures; a failure (a full disk, another run writing the folder) is reported, not
        raised: the measurement is done. The folder's writer lock is taken outside the timing."""
        lock = None
        try:
            lock = hold(store, out_dir, "give this run another storage.root or storage.checkpoint_name")
            start = time.perf_counter()
            data = serialize({"model": model.state_dict(), "optimizer": optimizer.state_dict()})
            store.put(name, data)  # all or nothing, fsync'd on a local disk (storage.fsync)
            seconds = time.perf_counter() - start
        except FolderBusy as exc:  # another run holds the folder
            return CheckpointWrite(checkpoint_error=str(exc))
        except Exception as exc:  # any backend's write error
            reason = getattr(exc, "strerror", None) or exc
            return CheckpointWrite(checkpoint_error=f"{type(exc).__name__}: {reason} ({store.url}/{name})")
        finally:
            if lock is not None:
                lock.release()
        return CheckpointWrite(
            checkpoint_path=f"{store.url}/{name}",
            checkpoint_bytes=len(data),
            checkpoint_write_seconds=seconds,
            checkpoint_write_gbps=len(data) / seconds / 1e9,
        )

    return write
