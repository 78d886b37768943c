"""Synthetic ImageNet-like data: one batch made once on the device and served forever.

It measures what the model and device can do with no input pipeline at all; real data
options report how far short of that a pipeline falls.
"""

from __future__ import annotations

from typing import Iterator

import torch

from bench.config.data import DataConfig
from bench.config.storage import StorageLocation
from bench.data.registry import Batch


def synthetic_batches(
    cfg: DataConfig,
    device: torch.device,
    memory_format: torch.memory_format,
    seed: int,
    rank: int = 0,
    world_size: int = 1,
    storage: StorageLocation | None = None,
) -> Iterator[Batch]:
    gen = torch.Generator(device="cpu").manual_seed(seed)
    shape = (cfg.batch_size, 3, cfg.image_size, cfg.image_size)
    images = torch.randn(shape, generator=gen).to(device).contiguous(memory_format=memory_format)
    labels = torch.randint(0, cfg.num_classes, (cfg.batch_size,), generator=gen).to(device)
    while True:
        yield images, labels
