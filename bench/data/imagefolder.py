"""data=imagefolder: JPEG/PNG files in one folder per class (torchvision ImageFolder's layout and
label order), decoded and augmented in DataLoader workers straight into uint8 batches."""

from __future__ import annotations

import os
from typing import Iterator, List

import numpy as np
import torch

from bench.config.data import DataConfig
from bench.config.storage import StorageLocation
from bench.data.device_batches import DeviceBatches, map_style_batches
from bench.data.layout import check_class_count, check_separate_val, imagefolder_base, scan_image_folder
from bench.data.loader import BatchDataset, HostBatch, fill_batch
from bench.data.registry import Batch
from bench.data.transforms import decode_crop, resize_into


class ImageFolderBatches(BatchDataset):
    def __init__(self, paths: List[str], labels: List[int], size: int, train: bool, decoder: str, seed: int, rank: int):
        super().__init__(size, train, seed, rank)
        self.paths, self.labels, self.decoder = paths, np.asarray(labels, dtype=np.int64), decoder

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
    train = cfg.split == "train" and cfg.augment
    dataset = ImageFolderBatches(paths, labels, cfg.image_size, train, cfg.decoder, seed, rank)
    return map_style_batches(dataset, cfg, device, memory_format, rank, world_size, base, len(classes))


def imagefolder_val_batches(
    cfg: DataConfig, device: torch.device, memory_format: torch.memory_format, rank: int = 0, world_size: int = 1
) -> DeviceBatches:
    """The val/ split with the val transform (resize + center crop), this rank's share of it."""
    check_separate_val(cfg.dataset_root)
    base = os.path.join(cfg.dataset_root, "val")
    classes, paths, labels = scan_image_folder(base)
    check_class_count(len(classes), base, cfg.num_classes)
    dataset = ImageFolderBatches(paths, labels, cfg.image_size, False, cfg.decoder, 0, rank)
    return map_style_batches(dataset, cfg, device, memory_format, rank, world_size)
