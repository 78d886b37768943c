"""scikit-learn's bundled 8x8 digits (1,797 real images, 10 classes, no download) written as an
image folder `data=imagefolder` reads: `<dst>/train/<0..9>/<n>.png` and `<dst>/val/<0..9>/<n>.png`.

`python -m bench.data digits --dst DIR` is the command. The split is stratified and seeded
(sklearn's train_test_split), so every class is in both splits and the same options give the
same files. Everything is written into a temporary directory next to `dst`, `digits.json` (the
manifest: counts, size, format, seed) last, and the directory is renamed onto `dst`: `dst` is
either absent or complete. Torch-free; numpy, PIL and sklearn are imported when called.
"""

from __future__ import annotations

import contextlib
import errno
import json
import math
import os
import shutil
import tempfile
from typing import Any, Dict, Tuple

from bench.errors import ConfigError, DataError
from bench.machine.writable import check_writable_dir

MANIFEST = "digits.json"
FORMATS = {"png": ("PNG", ".png", {}), "jpeg": ("JPEG", ".jpg", {"quality": 95})}  # PIL's format, suffix, options
IMAGES, CLASSES = 1797, 10  # load_digits(): fixed, bundled with scikit-learn
MAX_SIZE = 1024


def check_options(dst: str, val_fraction: float, size: int, image_format: str, seed: int = 0) -> None:
    """ConfigError naming the option for a value that cannot work (exit 2, nothing written)."""
    if not 0 <= seed < 2**32:
        raise ConfigError("--seed", seed, "a whole number from 0 to 4294967295")
    if not 1 <= size <= MAX_SIZE:
        raise ConfigError("--size", size, f"a whole number of pixels from 1 to {MAX_SIZE}")
    # every class needs an image in each split: train_test_split wants >= CLASSES on both sides
    low, high = CLASSES / IMAGES, 1 - CLASSES / IMAGES
    if not (math.isfinite(val_fraction) and low <= val_fraction <= high):
        raise ConfigError(
            "--val-fraction",
            val_fraction,
            f"a fraction from {math.ceil(low * 1000) / 1000:g} to {math.floor(high * 1000) / 1000:g} "
            f"(at least one image of each class in train and in val)",
        )
    if image_format not in FORMATS:
        raise ConfigError("--format", image_format, " or ".join(FORMATS))
    check_writable_dir("--dst", dst)


def read_manifest(dst: str) -> Dict[str, Any] | None:
    """The manifest of a complete digits folder at `dst`, or None."""
    try:
        with open(os.path.join(dst, MANIFEST)) as fh:
            manifest = json.load(fh)
    except (OSError, ValueError):
        return None
    return manifest if isinstance(manifest, dict) else None


def describe(manifest: Dict[str, Any]) -> str:
    return (
        f"{manifest['train']} train and {manifest['val']} val images ({manifest['classes']} classes, "
        f"{manifest['size']}x{manifest['size']} {manifest['format']})"
    )


def write_digits(
    dst: str, val_fraction: float = 0.2, size: int = 32, image_format: str = "png", seed: int = 0
) -> Tuple[Dict[str, Any], bool]:
    """Write the digits image folder at `dst`: (its manifest, whether it was already there)."""
    dst = os.path.abspath(dst)
    check_options(dst, val_fraction, size, image_format, seed)
    wanted = {"size": size, "format": image_format, "seed": seed, "val_fraction": val_fraction}
    if os.path.isdir(dst) and os.listdir(dst):
        if (manifest := read_manifest(dst)) is None:
            raise ConfigError(
                "--dst",
                dst,
                f"a new or empty directory, or one this command wrote (it holds other files and no {MANIFEST})",
            )
        if any(manifest.get(key) != value for key, value in wanted.items()):
            raise ConfigError(
                "--dst",
                dst,
                f"another directory: this one holds the digits as {describe(manifest)}, "
                f"seed {manifest.get('seed')}, val fraction {manifest.get('val_fraction')}",
            )
        return manifest, True
    try:
        import numpy as np
        from PIL import Image
        from sklearn.datasets import load_digits
        from sklearn.model_selection import train_test_split
    except ImportError as exc:
        raise DataError(
            f"python -m bench.data digits needs scikit-learn, numpy and pillow ({exc}): pip install scikit-learn"
        ) from None

    digits = load_digits()
    pixels = np.clip(np.rint(digits.images * (255.0 / 16.0)), 0, 255).astype(np.uint8)  # 0..16 -> 0..255
    labels = digits.target.astype(int)
    train, val = train_test_split(np.arange(len(labels)), test_size=val_fraction, stratify=labels, random_state=seed)
    pil_format, suffix, options = FORMATS[image_format]
    parent = os.path.dirname(dst)
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=f".{os.path.basename(dst)}.tmp-", dir=parent)
    try:
        counts: Dict[str, Dict[str, int]] = {}
        for split, members in (("train", train), ("val", val)):
            counts[split] = {str(c): int((labels[members] == c).sum()) for c in range(CLASSES)}  # images per class
            for c in range(CLASSES):
                os.makedirs(os.path.join(tmp, split, str(c)))
            for n in sorted(int(i) for i in members):
                image = Image.fromarray(pixels[n]).resize((size, size), Image.Resampling.BICUBIC).convert("RGB")
                image.save(os.path.join(tmp, split, str(labels[n]), f"{n:04d}{suffix}"), pil_format, **options)
        manifest = {
            "dataset": "sklearn.datasets.load_digits",
            "classes": CLASSES,
            "train": len(train),
            "val": len(val),
            **wanted,
            "per_class": counts,
        }
        with open(os.path.join(tmp, MANIFEST), "w") as fh:  # last: its presence means complete
            json.dump(manifest, fh, indent=2)
        placed = _put_in_place(tmp, dst)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if not placed:  # another digits command filled dst meanwhile: the same images if its options are these
        shutil.rmtree(tmp, ignore_errors=True)
        return write_digits(dst, val_fraction, size, image_format, seed)
    return manifest, False


def _put_in_place(tmp: str, dst: str) -> bool:
    """Rename the written folder to dst (an empty dst is replaced); False when dst holds files by now."""
    try:
        with contextlib.suppress(FileNotFoundError):
            os.rmdir(dst)  # empty (checked above): the rename takes its place
        os.rename(tmp, dst)
    except OSError as exc:
        if exc.errno in (errno.ENOTEMPTY, errno.EEXIST):
            return False
        raise
    return True
