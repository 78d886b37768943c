"""data=imagefolder: JPEG/PNG files in one folder per class (torchvision ImageFolder's layout and
label order), decoded and augmented in DataLoader workers straight into uint8 batches."""

from __future__ import annotations

import os
from typing import Iterator, List

import numpy as np
import torch

from bench.config.data import DataConfig
from bench.config.storage import StorageLocation
from bench.data.device_batches import DeviceBatches
from bench.data.layout import check_class_count, imagefolder_base, scan_image_folder
from bench.data.loader import (
    BatchDataset,
    HostBatch,
    epoch_batch_sampler,
    eval_batch_sampler,
    fill_batch,
    make_loader,
    map_style_passes,
    resolve_workers,
)
from bench.data.registry import Batch
from bench.data.transforms import decode_crop, resize_into
from bench.errors import DataError


class ImageFolderBatches(BatchDataset):
    def __init__(
        self, paths: List[str], labels: np.ndarray, size: int, train: bool, decoder: str, seed: int, rank: int
    ):
        super().__init__(size, train, seed, rank)
        self.paths, self.labels, self.decoder = paths, labels, decoder

    def __len__(self) -> int:
        return len(self.paths)

    def load(self, slot: np.ndarray, index: int) -> int:
        with open(self.paths[index], "rb") as fh:
            data = fh.read()
        crop = decode_crop(data, self.train, self.size, self.rng, self.decoder)
        resize_into(slot, crop, flip=self.train and self.rng.random() < 0.5)
        return int(self.labels[index])

    def __getitems__(self, indices: List[int]) -> HostBatch:
        return fill_batch(len(indices), self.size, self.load, indices, len(self.paths), self.paths.__getitem__)


def imagefolder_batches(
    cfg: DataConfig,
    device: torch.device,
    memory_format: torch.memory_format,
    seed: int,
    rank: int = 0,
    world_size: int = 1,
    storage: StorageLocation | None = None,
) -> Iterator[Batch]:
    base = imagefolder_base(cfg.dataset_root, cfg.split)
    classes, paths, labels = scan_image_folder(base)
    check_class_count(len(classes), base, cfg.num_classes)
    train = cfg.split == "train"
    dataset = ImageFolderBatches(
        paths, np.asarray(labels, dtype=np.int64), cfg.image_size, train and cfg.augment, cfg.decoder, seed, rank
    )
    batch_sampler = epoch_batch_sampler(len(dataset), cfg, train, rank, world_size, base)
    loader = make_loader(dataset, cfg, device, batch_sampler)
    facts = {"dataset_size": len(paths), "dataset_classes": len(classes), "data_workers": resolve_workers(cfg)}
    return DeviceBatches(map_style_passes(loader, batch_sampler), facts, cfg, device, memory_format)


def imagefolder_val_batches(
    cfg: DataConfig, device: torch.device, memory_format: torch.memory_format, rank: int = 0, world_size: int = 1
) -> DeviceBatches:
    """The val/ split with the val transform (resize + center crop), this rank's share of it."""
    base = imagefolder_base(cfg.dataset_root, "val")
    if os.path.normpath(base) == os.path.normpath(cfg.dataset_root):
        raise DataError(
            f"data.root={cfg.root!r} has no val/ folder: validation (train.eval_every, "
            "train.target_accuracy) needs train/ and val/ class folders"
        )
    classes, paths, labels = scan_image_folder(base)
    check_class_count(len(classes), base, cfg.num_classes)
    dataset = ImageFolderBatches(paths, np.asarray(labels, dtype=np.int64), cfg.image_size, False, cfg.decoder, 0, rank)
    batch_sampler = eval_batch_sampler(len(dataset), cfg.batch_size, rank, world_size)
    loader = make_loader(dataset, cfg, device, batch_sampler)
    facts = {"val_dataset_size": len(paths)}
    return DeviceBatches(lambda _epoch: loader, facts, cfg, device, memory_format)
