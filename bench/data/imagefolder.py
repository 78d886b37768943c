"""data=imagefolder: JPEG/PNG files in one folder per class (torchvision ImageFolder's layout and
label order), decoded and augmented in DataLoader workers straight into uint8 batches."""

from __future__ import annotations

import os
from typing import List

import numpy as np

from bench.config.data import DataConfig
from bench.data.device_batches import MapStyleSplit, map_style_builders
from bench.data.layout import check_class_count, imagefolder_base, scan_image_folder, val_classes
from bench.data.loader import BatchDataset, HostBatch, empty_batch
from bench.data.transforms import CorruptImage, decode_crop, resize_into

MAX_REPLACEMENTS = 16  # consecutive undecodable images tolerated before giving up on a batch slot


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
        """The batch slot by slot: an image that does not decode is replaced by the next one (reported as a
        skipped failure), an OSError is reported as fatal."""
        images, labels, release = empty_batch(len(indices), self.size)
        slots, failures = images.numpy(), []
        for slot, index in enumerate(indices):
            for attempt in range(MAX_REPLACEMENTS):
                candidate = (index + attempt) % len(self.paths)
                try:
                    labels[slot] = self.load(slots[slot], candidate)
                    break
                except CorruptImage as exc:
                    failures.append((self.paths[candidate], str(exc), False))
                except OSError as exc:
                    failures.append((self.paths[candidate], exc.strerror or str(exc), True))
                    return images, labels, failures, release
            else:
                failures.append((self.paths[index], f"{MAX_REPLACEMENTS} undecodable images in a row from here", True))
                return images, labels, failures, release
        return images, labels, failures, release


def imagefolder_split(cfg: DataConfig, val: bool, seed: int, rank: int) -> MapStyleSplit:
    """Train: data.split's folder; val: val/ with the val transform (resize + center crop), labelled with
    train/'s class-to-index map."""
    base = os.path.join(cfg.dataset_root, "val") if val else imagefolder_base(cfg.dataset_root, cfg.split)
    classes, paths, labels = scan_image_folder(base, val_classes(cfg.dataset_root)[0] if val else None)
    check_class_count(len(classes), base, cfg.num_classes)
    train = not val and cfg.split == "train" and cfg.augment
    return ImageFolderBatches(paths, labels, cfg.image_size, train, cfg.decoder, seed, rank), base, len(classes)


imagefolder_batches, imagefolder_val_batches = map_style_builders(imagefolder_split)
