"""Where each data option finds its files, and the one-sentence error when they are not there.

Torch-free: the training scenario's preflight runs the `check_*` functions (through
bench.data.registry) before any model or MLflow run exists, and the loaders call the finders
again (they can be used without the app, e.g. by `python -m bench.data`).
"""

from __future__ import annotations

import itertools
import logging
import os
from typing import Iterator, List, Optional, Tuple

from bench.config.data import DataConfig
from bench.errors import DataError
from bench.machine.writable import check_writable_dir

log = logging.getLogger(__name__)

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".bmp", ".webp", ".ppm", ".tif", ".tiff")
CIFAR_SPLIT_FILES = {"train": "train", "val": "test"}
SHARD_META = "meta.json"


def _root_is_a_dir(root: str, said: str) -> None:
    """DataError `data.root='...' does not exist<said>` unless data.root is a directory."""
    if not os.path.isdir(root):
        raise DataError(f"data.root={root!r} does not exist{said}")


def imagefolder_base(root: str, split: str) -> str:
    """ImageNet layout (root/train, root/val, one folder per class) or a flat class-folder root."""
    _root_is_a_dir(
        root,
        " or is not a directory: expected an image folder with one sub-folder per class "
        "(or train/ and val/ holding them)",
    )
    split_dir = os.path.join(root, split)
    if os.path.isdir(os.path.join(root, "train")) or os.path.isdir(os.path.join(root, "val")):
        if not os.path.isdir(split_dir):
            raise DataError(f"{root} has no {split}/ folder for data.split={split}")
        return split_dir
    return root


def class_folders(base: str) -> List[str]:
    names = sorted(entry.name for entry in os.scandir(base) if entry.is_dir() and not entry.name.startswith("."))
    if not names:
        raise DataError(f"{base} is empty: expected one sub-folder per class holding images")
    return names


def _images_in(folder: str, seen: set, skipped: list) -> Iterator[str]:
    """The images under `folder`, in the loader's order (torchvision's ImageFolder's). Symlinks are
    followed, but each real directory (device, inode) is walked once: a link to a folder already
    walked (a loop such as `sub -> .`, or a second link to one folder) is left out and added to
    `skipped`; `seen`: the (device, inode) pairs read so far, shared by a split's class folders."""

    def walk() -> Iterator[Tuple[str, List[str]]]:
        for where, dirs, files in os.walk(folder, followlinks=True):
            dirs[:] = sorted(d for d in dirs if not d.startswith("."))  # sorted: which of two links is walked is fixed
            real = os.stat(where)
            if (real.st_dev, real.st_ino) in seen:
                dirs[:] = []
                skipped.append(where)
                continue
            seen.add((real.st_dev, real.st_ino))
            yield where, files

    for where, files in sorted(walk()):
        # hidden files are not images: macOS's ._x.jpg (AppleDouble) would be counted, then skipped as corrupt
        yield from (
            os.path.join(where, f) for f in sorted(files) if f.lower().endswith(IMAGE_EXTENSIONS) and f[:1] != "."
        )


def scan_image_folder(base: str, classes: Optional[List[str]] = None) -> Tuple[List[str], List[str], List[int]]:
    """(class names, image paths, labels), ordered like torchvision's ImageFolder; `classes`: the
    label of each class name (val/ takes train/'s), a class without a folder here has no images."""
    classes = classes or class_folders(base)
    paths: List[str] = []
    labels: List[int] = []
    seen: set = set()
    skipped: List[str] = []
    for label, name in enumerate(classes):
        for path in _images_in(os.path.join(base, name), seen, skipped):
            paths.append(path)
            labels.append(label)
    if skipped:
        log.warning("%s: left out %s: each a link to a folder already read (a symlink loop?)", base, _names(skipped))
    if not paths:
        raise DataError(
            f"{base} holds no images: expected files ending in {', '.join(IMAGE_EXTENSIONS)} inside its class folders"
        )
    return classes, paths, labels


def _names(items: List[str]) -> str:
    return ", ".join(items[:10]) + (", ..." if len(items) > 10 else "")


def val_classes(root: str) -> Tuple[List[str], List[str]]:
    """(train/'s classes, the ones val/ lacks): val/ is labelled with train/'s class-to-index map (its own
    would shift every label after a class it lacks); a val/ class train/ lacks has no label."""
    if not os.path.isdir(os.path.join(root, "val")):
        raise DataError(
            f"data.root={root!r} has no val/ folder: validation (train.eval_every, "
            "train.target_accuracy) needs train/ and val/ class folders"
        )
    val = class_folders(os.path.join(root, "val"))
    if not os.path.isdir(os.path.join(root, "train")):
        return val, []
    train = class_folders(os.path.join(root, "train"))
    train_labels(train, val, f"{root}/val")
    return train, [name for name in train if name not in val]


def train_labels(train: List[str], val: List[str], where: str) -> List[int]:
    """train/'s label of each of val/'s classes; a val/ class train/ lacks has none: DataError naming it."""
    if extra := [name for name in val if name not in train]:
        raise DataError(
            f"{where} has {len(extra)} class(es) that train/ lacks: {_names(extra)} (train/ has {_names(train)}): "
            "val/ is labelled with train/'s classes, so each of its own must be one of them"
        )
    return [train.index(name) for name in val]


def check_class_count(found: int, where: str, num_classes: int) -> None:
    if found > num_classes:
        raise DataError(
            f"{where} has {found} classes but data.num_classes={num_classes}: set data.num_classes={found} (or more)"
        )


CIFAR_DOWNLOAD_BYTES = 340 * 2**20  # torchvision's archive (161 MB) and what it unpacks to (178 MB)


def download_cifar100(root: str) -> None:
    """data.download=true: CIFAR-100 fetched into data.root by torchvision (its URL and checksum),
    after a check that the disk has room; offline or refused, one line saying what to do instead."""
    import shutil

    check_writable_dir("data.root", root)  # a file there, or a read-only mount: one line, not a traceback
    os.makedirs(root, exist_ok=True)
    if (free := shutil.disk_usage(root).free) < CIFAR_DOWNLOAD_BYTES:
        raise DataError(
            f"data.download=true needs {CIFAR_DOWNLOAD_BYTES / 1e6:.0f} MB in {root} for CIFAR-100; "
            f"{free / 1e6:.0f} MB free: point data.root at a larger disk"
        )
    from torchvision.datasets import CIFAR100
    from torchvision.datasets.utils import download_and_extract_archive

    try:  # torchvision's URL and archive checksum; writes <root>/cifar-100-python.tar.gz, cifar-100-python/
        download_and_extract_archive(CIFAR100.url, root, filename=CIFAR100.filename, md5=CIFAR100.tgz_md5)
    except Exception as exc:
        shutil.rmtree(os.path.join(root, "cifar-100-python"), ignore_errors=True)  # nothing half-fetched stays
        if os.path.exists(os.path.join(root, "cifar-100-python.tar.gz")):
            os.remove(os.path.join(root, "cifar-100-python.tar.gz"))
        reason = str(getattr(exc, "reason", exc)).splitlines()[0] if str(exc) else type(exc).__name__
        raise DataError(
            f"data.download=true could not fetch CIFAR-100 into {root} ({type(exc).__name__}: {reason}): "
            f"without network access, copy cifar-100-python/ (train, test, meta) there and set "
            f"data.root to it, with data.download=false"
        ) from None
    unpacked = os.path.join(root, "cifar-100-python")
    for name in os.listdir(unpacked):  # train, test, meta: where data.root says, as a copy made by hand is
        os.replace(os.path.join(unpacked, name), os.path.join(root, name))
    os.rmdir(unpacked)
    os.remove(os.path.join(root, "cifar-100-python.tar.gz"))


def cifar_file(root: str, split: str) -> str:
    path = os.path.join(root, CIFAR_SPLIT_FILES[split])
    _root_is_a_dir(root, ": expected the CIFAR-100 python folder (cifar-100-python/ with train, test and meta)")
    if not os.path.isfile(path):
        raise DataError(
            f"{path} not found: expected the CIFAR-100 python files train, test and meta in {root} "
            "(data.download=true fetches them there)"
        )
    return path


def shard_split_key(split: str) -> str:
    return f"{split}/{SHARD_META}"


def check_local_shards(root: str, split: str) -> None:
    _root_is_a_dir(root, ": expected shards written by `python -m bench.data prepare --src <image folder> --dst <dir>`")
    if not os.path.isfile(os.path.join(root, shard_split_key(split))):
        raise DataError(
            f"{root} holds no {shard_split_key(split)}: expected shards written by "
            "`python -m bench.data prepare` (is data.split right?)"
        )


PROBE_IMAGES = 4  # the first images preflight decodes: a folder of non-images fails before the run


def check_imagefolder(data: DataConfig) -> None:
    base = imagefolder_base(data.dataset_root, data.split)
    classes = class_folders(base)
    check_class_count(len(classes), base, data.num_classes)
    warn_empty_class_folders(base, classes)
    check_first_images_decode(base, classes)


def warn_empty_class_folders(base: str, classes: List[str]) -> None:
    """A class folder without images still is a class (a label, an output of the head) that no
    sample has: kept, as torchvision's ImageFolder order needs it, but said once."""
    if empty := [name for name in classes if next(_images_in(os.path.join(base, name), set(), []), None) is None]:
        log.warning(
            "%s: %d class folder(s) hold no images and still count as classes (labels no image has): %s",
            base,
            len(empty),
            _names([os.path.join(base, name) for name in empty]),
        )


def check_first_images_decode(base: str, classes: List[str]) -> None:
    """The first few images (in the loader's order) open as images: a folder of other files, or
    of files named .jpg that are not, is a dataset problem for preflight, not a run failure. A
    corrupt image among good ones is the loader's to skip (or, with data.strict, to stop at)."""
    from PIL import Image, UnidentifiedImageError

    # zero-byte files left out: the loader skips and counts them like corrupt images, and they say nothing of
    # whether the folder holds images
    images = (path for name in classes for path in _images_in(os.path.join(base, name), set(), []))
    paths = list(itertools.islice((path for path in images if os.path.getsize(path) > 0), PROBE_IMAGES))
    if not paths:
        raise DataError(
            f"{base} holds no images (or only empty files): expected files ending in "
            f"{', '.join(IMAGE_EXTENSIONS)} inside its class folders"
        )
    problems = []
    for path in paths:
        try:
            with Image.open(path) as image:
                image.verify()
            return
        except (OSError, UnidentifiedImageError, SyntaxError, ValueError) as exc:
            problems.append(f"{path}: {exc}")
    raise DataError(
        f"{base}: none of its first {len(paths)} images can be decoded (first: {problems[0]}): "
        "expected JPEG/PNG images in the class folders"
    )


def check_separate_val(root: str) -> None:
    """A val/ folder of its own, whose classes are train/'s (val_classes); the ones it lacks said once."""
    if lacks := val_classes(root)[1]:
        log.warning("%s/val lacks train/'s class(es) %s: validation scores the others", root, _names(lacks))


def check_cifar100(data: DataConfig) -> None:
    if data.download and not all(os.path.isfile(os.path.join(data.dataset_root, f)) for f in ("train", "test")):
        download_cifar100(data.dataset_root)
    cifar_file(data.dataset_root, data.split)
