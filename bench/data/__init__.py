"""The data group: each option builds an endless iterator of (images, labels) batches on the device."""

from __future__ import annotations

from typing import Any, Iterator, Mapping, Optional, Tuple

import torch

Batch = Tuple[torch.Tensor, torch.Tensor]


def build_batches(cfg: Mapping[str, Any], device: torch.device, memory_format: torch.memory_format,
                  seed: int, rank: int = 0, world_size: int = 1,
                  storage: Optional[Mapping[str, Any]] = None) -> Iterator[Batch]:
    """`cfg` is the data group; `rank`/`world_size` shard real datasets (DistributedSampler);
    `storage` is the storage group, for datasets read through it (s3:// roots)."""
    if cfg["name"] == "synthetic":
        from bench.data.synthetic import synthetic_batches

        return synthetic_batches(cfg, device, memory_format, seed)
    raise ValueError(f"unknown data option {cfg['name']!r}")  # bench.validate rejects this first
