"""Checkpoint phase: torch.save real tensors of a given size to the store, read them back.

Write time = serialize + store (fsync'd on local storage, so it is the time to reach the disk);
read time = fetch + torch.load. On local storage the read-back comes from the page cache
unless storage.direct_io=true (the checkpoint was just written).
"""

from __future__ import annotations

import io
import time
from typing import Any, Dict

from bench.storage.base import ObjectStore

TENSORS = 8  # a checkpoint is a handful of large tensors plus small ones, like a model's


def make_state(size_mb: float, seed: int = 0) -> Dict[str, Any]:
    import torch

    generator = torch.Generator().manual_seed(seed)
    per_tensor = max(1, int(size_mb * 2**20 / 4 / TENSORS))  # float32
    model = {f"layer{i}.weight": torch.randn(per_tensor, generator=generator) for i in range(TENSORS)}
    return {"model": model, "step": 0}


def serialize(state: Dict[str, Any]) -> bytes:
    import torch

    buffer = io.BytesIO()
    torch.save(state, buffer)
    return buffer.getvalue()


def run_checkpoint(store: ObjectStore, key: str, size_mb: float) -> Dict[str, Any]:
    import torch

    state = make_state(size_mb)
    start = time.perf_counter()
    data = serialize(state)
    store.put(key, data)
    write_s = time.perf_counter() - start

    start = time.perf_counter()
    loaded = torch.load(io.BytesIO(store.get(key)), weights_only=True)
    read_s = time.perf_counter() - start
    if not torch.equal(loaded["model"]["layer0.weight"], state["model"]["layer0.weight"]):
        raise RuntimeError(f"checkpoint {store.url}/{key} read back different tensors")
    size = len(data)
    return {"checkpoint_bytes": size, "checkpoint_write_seconds": write_s, "checkpoint_read_seconds": read_s,
            "checkpoint_write_gbps": size / write_s / 1e9 if write_s > 0 else 0.0,
            "checkpoint_read_gbps": size / read_s / 1e9 if read_s > 0 else 0.0}
