"""The data group: each option builds an endless iterator of (images, labels) batches on the device.

Real options (imagefolder, cifar100, shards) decode and augment in DataLoader workers into
uint8 NHWC batches; the iterator copies them to the device and normalises there
(bench.data.loader.DeviceBatches), so the trainer's data wait covers the whole pipeline.
This module imports torch lazily: bench.validate uses bench.data.layout without it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterator, Mapping, Optional, Tuple

if TYPE_CHECKING:
    import torch

Batch = Tuple["torch.Tensor", "torch.Tensor"]  # forward references: importing bench.data needs no torch


def build_batches(cfg: Mapping[str, Any], device: torch.device, memory_format: torch.memory_format,
                  seed: int, rank: int = 0, world_size: int = 1,
                  storage: Optional[Mapping[str, Any]] = None) -> Iterator[Batch]:
    """`cfg` is the data group; `rank`/`world_size` shard real datasets (DistributedSampler);
    `storage` is the storage group, for datasets read through it (s3:// roots)."""
    name = cfg["name"]
    if name == "synthetic":
        from bench.data.synthetic import synthetic_batches

        return synthetic_batches(cfg, device, memory_format, seed)
    if name == "imagefolder":
        from bench.data.imagefolder import imagefolder_batches

        return imagefolder_batches(cfg, device, memory_format, seed, rank, world_size)
    if name == "cifar100":
        from bench.data.cifar100 import cifar100_batches

        return cifar100_batches(cfg, device, memory_format, seed, rank, world_size)
    if name == "shards":
        from bench.data.shards import shard_batches

        return shard_batches(cfg, device, memory_format, seed, rank, world_size, storage)
    raise ValueError(f"unknown data option {name!r}")  # bench.validate rejects this first
