"""data=cifar100: the official python-pickle files (train, test, meta), held in memory as uint8.

Train: 4-pixel padded random crop + flip at the native 32x32 (the standard CIFAR recipe);
val reads the test file unaugmented. Both then resize to data.image_size (224 makes the
inputs ResNet-50-sized; 32 keeps them native).
"""

from __future__ import annotations

import os
import pickle
from typing import List, Tuple

import numpy as np
import torch

from bench.config.data import DataConfig
from bench.data.device_batches import MapStyleSplit, map_style_builders
from bench.data.layout import check_class_count, cifar_file
from bench.data.loader import BatchDataset, HostBatch, empty_batch
from bench.data.transforms import resize_batch_into
from bench.errors import DataError

NATIVE = 32
PAD = 4


# What a CIFAR-100 python pickle holds: dicts, lists, bytes, numbers and numpy arrays. Any other
# global a pickle asks for (os.system, subprocess.Popen, ...) is code, and is refused unloaded.
ARRAY_GLOBALS = {("numpy", "ndarray"), ("numpy", "dtype")} | {
    (f"numpy.{core}.multiarray", name) for core in ("core", "_core") for name in ("_reconstruct", "scalar")
}


class UnsafePickle(Exception):
    pass


class _DataOnly(pickle.Unpickler):
    def find_class(self, module: str, name: str):  # pickle's signature
        if (module, name) in ARRAY_GLOBALS:
            return super().find_class(module, name)
        raise UnsafePickle(f"{module}.{name}")


def _unpickle(path: str) -> dict:
    try:
        with open(path, "rb") as fh:
            return _DataOnly(fh, encoding="bytes").load()
    except OSError as exc:
        raise DataError(f"cannot read {path}: {exc.strerror or exc}") from None
    except UnsafePickle as exc:
        raise DataError(
            f"{path} is refused: it asks for {exc}, which a CIFAR-100 file never holds "
            "(only arrays, lists and numbers are read from it)"
        ) from None
    except Exception as exc:  # any unpickling failure means: not a CIFAR file
        raise DataError(f"{path} is not a CIFAR-100 python pickle ({type(exc).__name__}: {exc})") from None


def load_cifar100(root: str, split: str) -> Tuple[np.ndarray, np.ndarray, List[str]]:
    """(images N x 32 x 32 x 3 uint8, fine labels int64, fine label names)."""
    path = cifar_file(root, split)
    batch = _unpickle(path)
    if not isinstance(batch, dict) or b"data" not in batch or b"fine_labels" not in batch:
        raise DataError(f"{path} is not a CIFAR-100 python pickle (no b'data' / b'fine_labels')")
    data = np.asarray(batch[b"data"], dtype=np.uint8)
    labels = np.asarray(batch[b"fine_labels"], dtype=np.int64)
    if data.ndim != 2 or data.shape[1] != 3 * NATIVE * NATIVE or len(labels) != len(data):
        raise DataError(
            f"{path} holds data of shape {data.shape} with {len(labels)} labels: "
            f"expected N x {3 * NATIVE * NATIVE} uint8 and N labels"
        )
    if not len(data):
        raise DataError(f"{path} holds no images")
    meta_path = os.path.join(root, "meta")
    names = (
        [n.decode() for n in _unpickle(meta_path)[b"fine_label_names"]]
        if os.path.isfile(meta_path)
        else [str(i) for i in range(int(labels.max()) + 1)]
    )
    # stored as rows of R plane, G plane, B plane: make it NHWC once
    return np.ascontiguousarray(data.reshape(-1, 3, NATIVE, NATIVE).transpose(0, 2, 3, 1)), labels, names


class Cifar100Batches(BatchDataset):
    def __init__(self, images: np.ndarray, labels: np.ndarray, size: int, train: bool, seed: int, rank: int):
        super().__init__(size, train, seed, rank)
        self.images, self.labels = images, labels

    def __len__(self) -> int:
        return len(self.images)

    def __getitems__(self, indices: List[int]) -> HostBatch:
        picked = self.images[indices]
        self.crop_and_flip(picked)
        images, labels, release = empty_batch(len(indices), self.size)
        resize_batch_into(images, torch.from_numpy(picked))
        labels.copy_(torch.from_numpy(self.labels[indices]))
        return images, labels, [], release

    def crop_and_flip(self, picked: np.ndarray) -> None:
        """Train: each image of `picked` (N x 32 x 32 x 3, a copy) becomes a random crop of it padded
        by 4, flipped left-right half the time; val: left as it is."""
        if not self.train:
            return
        padded = np.pad(picked, ((0, 0), (PAD, PAD), (PAD, PAD), (0, 0)))
        for slot in range(len(picked)):
            top, left = self.rng.randint(0, 2 * PAD), self.rng.randint(0, 2 * PAD)
            crop = padded[slot, top : top + NATIVE, left : left + NATIVE]
            picked[slot] = crop[:, ::-1] if self.rng.random() < 0.5 else crop


def cifar100_split(cfg: DataConfig, val: bool, seed: int, rank: int) -> MapStyleSplit:
    """Train: data.split, its class count checked; val: the test split, unaugmented."""
    images, labels, names = load_cifar100(cfg.dataset_root, "val" if val else cfg.split)
    classes = max(len(names), int(labels.max()) + 1)
    if not val:
        check_class_count(classes, cfg.dataset_root, cfg.num_classes)
    train = not val and cfg.split == "train" and cfg.augment
    return Cifar100Batches(images, labels, cfg.image_size, train, seed, rank), cfg.dataset_root, classes


cifar100_batches, cifar100_val_batches = map_style_builders(cifar100_split)
