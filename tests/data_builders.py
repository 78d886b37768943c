"""Tiny real datasets for the data tests: an image folder of JPEGs and the CIFAR-100 python format."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Dict, List

import numpy as np

from bench.data.sample_images import write_image_folder

WIDTH, HEIGHT = 64, 48
CLASSES = 4


def image_folder(root: Path, images: int = 40, classes: int = CLASSES, seed: int = 0) -> List[str]:
    """root/classNNN/imgNNNNN.jpg, 64x48 JPEGs."""
    return write_image_folder(str(root), images, classes, WIDTH, HEIGHT, seed=seed)


def imagenet_layout(root: Path, train: int = 40, val: int = 8) -> Dict[str, List[str]]:
    return {"train": image_folder(root / "train", train, seed=1), "val": image_folder(root / "val", val, seed=2)}


def cifar100(root: Path, train: int = 40, test: int = 12, seed: int = 0) -> Dict[str, dict]:
    """The official layout: pickled dicts with bytes keys; data rows are R, G, B planes of 32x32."""
    rng = np.random.default_rng(seed)
    root.mkdir(parents=True, exist_ok=True)
    written = {}
    for name, count in (("train", train), ("test", test)):
        batch = {b"data": rng.integers(0, 256, (count, 3072), dtype=np.uint8),
                 b"fine_labels": rng.integers(0, 100, count).tolist(),
                 b"coarse_labels": rng.integers(0, 20, count).tolist(),
                 b"filenames": [f"img{i}.png".encode() for i in range(count)]}
        (root / name).write_bytes(pickle.dumps(batch))
        written[name] = batch
    meta = {b"fine_label_names": [f"class{i}".encode() for i in range(100)],
            b"coarse_label_names": [f"super{i}".encode() for i in range(20)]}
    (root / "meta").write_bytes(pickle.dumps(meta))
    return written


def data_cfg(name: str, root: Path, **overrides) -> dict:
    """The data group as build_batches gets it (the resolved plain dict)."""
    cfg = {"name": name, "root": str(root), "split": "train", "batch_size": 8, "image_size": 32, "num_classes": 100,
           "num_workers": 0, "pin_memory": False, "persistent_workers": False, "prefetch_factor": 2,
           "strict": False, "decoder": "simplejpeg"}
    cfg.update(overrides)
    return cfg
