"""ImageNet-like JPEGs for benchmarks and tests: gradients + block noise + pixel noise, which
compress like photographs (~75 KB at 500x375, quality 90), in one folder per class."""

from __future__ import annotations

import io
import os
from typing import List

import numpy as np
from PIL import Image


def synthetic_jpeg(rng: np.random.Generator, width: int = 500, height: int = 375, quality: int = 90) -> bytes:
    y, x = np.mgrid[0:height, 0:width]
    tint = rng.uniform(0.5, 1.5, 3)
    gradients = np.stack(
        [x * 255 / width * tint[0], y * 255 / height * tint[1], (x + y) * 128 / (width + height) * tint[2]], axis=-1
    )
    blocks = np.kron(rng.normal(0, 25, (height // 8 + 1, width // 8 + 1, 3)), np.ones((8, 8, 1)))[:height, :width]
    pixels = np.clip(gradients + blocks + rng.normal(0, 12, (height, width, 3)), 0, 255).astype(np.uint8)
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, "JPEG", quality=quality)
    return out.getvalue()


def write_image_folder(
    root: str, images: int, classes: int, width: int = 500, height: int = 375, quality: int = 90, seed: int = 0
) -> List[str]:
    """root/classNNN/imgNNNNN.jpg, images spread round-robin over the classes; returns the paths."""
    rng = np.random.default_rng(seed)
    paths = []
    for number in range(images):
        folder = os.path.join(root, f"class{number % classes:03d}")
        os.makedirs(folder, exist_ok=True)
        path = os.path.join(folder, f"img{number:05d}.jpg")
        with open(path, "wb") as fh:
            fh.write(synthetic_jpeg(rng, width, height, quality))
        paths.append(path)
    return paths
