"""`python -m bench.data bench-loader` (bench.tools.data): our loaders against a hand-written torchvision ImageFolder +
PIL pipeline, on the same generated JPEGs, workers and batch size.

Loaders alternate within each round in palindromic order (A-B-C-C-B-A, bench.analysis.rounds),
since a shared machine drifts. Each measurement starts a fresh loader, discards warm-up batches
(worker start-up, first decode), then times `--batches` batches including our device step
(uint8 -> normalised float32 NCHW on the CPU, one thread). Result per loader: median images/s and its
ratio to the baseline's median, plus CPU time per image (main process + workers), which other load on a
shared machine barely moves.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
from typing import Any, Callable, Dict, Generator, List, Tuple

import torch

from bench.analysis.rounds import alternate, ratio_of
from bench.data.registry import Batches, build_batches
from bench.data.sample_images import write_image_folder
from bench.tools import ab

BASELINE = "torchvision-baseline"


def ensure_images(args: argparse.Namespace) -> str:
    """--images generated JPEGs in --classes class folders under --dir (reused between runs)."""
    images, classes = args.images, args.classes
    root = os.path.join(args.dir, f"images-{images}-{classes}")
    existing = sum(len(files) for _, _, files in os.walk(root)) if os.path.isdir(root) else 0
    if existing != images:
        import shutil

        shutil.rmtree(root, ignore_errors=True)
        write_image_folder(root, images, classes)
    return root


def ensure_shards(images_root: str, args: argparse.Namespace) -> str:
    """Those images as shards (prepare --size --shard-size), made again when the images are newer."""
    from bench.data.prepare import prepare

    size, shard_size, workers = args.shard_image_size, args.shard_size, max(1, args.workers)
    shards_root = os.path.join(args.dir, f"shards-{args.images}-{args.classes}-{size}-{shard_size}")
    meta = os.path.join(shards_root, "train", "meta.json")  # written last: its presence means complete
    if not os.path.isfile(meta) or os.path.getmtime(meta) < os.path.getmtime(images_root):
        prepare(images_root, shards_root, size=size, shard_size=shard_size, workers=workers, progress=False)
    return shards_root


def baseline_batches(root: str, args: argparse.Namespace) -> Generator[Any, None, None]:
    """What people write by hand: ImageFolder + PIL + RandomResizedCrop + flip + ToTensor + Normalize."""
    from torchvision import datasets, transforms

    transform = transforms.Compose(
        [
            transforms.RandomResizedCrop(args.image_size),
            transforms.RandomHorizontalFlip(),
            transforms.ToTensor(),
            transforms.Normalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225)),
        ]
    )
    loader = torch.utils.data.DataLoader(
        datasets.ImageFolder(root, transform),
        batch_size=args.batch_size,
        shuffle=True,
        num_workers=args.workers,
        drop_last=True,
        persistent_workers=args.workers > 0,
        prefetch_factor=4 if args.workers else None,
    )
    while True:  # epoch after epoch
        yield from loader


def our_batches(name: str, root: str, args: argparse.Namespace) -> Batches:
    from bench.config import compose

    data = compose(f"data={name}", f"data.root={root}", *ab.spelled(args), "data.pin_memory=false").data
    return build_batches(data, torch.device("cpu"), torch.contiguous_format, seed=0)


def measure(make: Callable[[], Batches | Generator[Any, None, None]], args: argparse.Namespace) -> Tuple[float, float]:
    """(images/s, CPU milliseconds per image) over --batches batches after --warmup discarded ones."""
    from bench.doctor.loader import timed_batches

    _count, images, seconds, cpu = timed_batches(make(), args.warmup, args.batches)
    assert images == args.batches * args.batch_size
    return images / seconds, cpu * 1000 / images


def run(args: argparse.Namespace) -> Dict[str, List[Tuple[float, float]]]:
    """Every loader of --loaders and the baseline, --rounds rounds (the bench-loader command's arguments)."""
    # The device step (normalising on the CPU) stands in for a GPU: one intra-op thread, since
    # idle OpenMP threads spin and take CPU from the workers of every loader alike.
    torch.set_num_threads(1)
    images_root, loaders = ensure_images(args), args.loaders.split(",")
    makers: Dict[str, Callable[[], Batches | Generator[Any, None, None]]] = {
        BASELINE: lambda: baseline_batches(images_root, args)
    }
    if "imagefolder" in loaders:
        makers["imagefolder"] = lambda: our_batches("imagefolder", images_root, args)
    if "shards" in loaders:
        shards_root = ensure_shards(images_root, args)
        makers["shards"] = lambda: our_batches("shards", shards_root, args)
    cpu_ms: Dict[str, List[float]] = {name: [] for name in makers}

    def timed(name: str) -> Callable[[], float]:
        def one() -> float:
            speed, cpu = measure(makers[name], args)
            cpu_ms[name].append(cpu)
            return speed

        return one

    # no extra warm-up pass: every measurement discards its own warm-up batches
    found = alternate({name: timed(name) for name in makers}, args.rounds, warmup=0, unit="images/s")
    return {name: list(zip(found.figures[name], cpu_ms[name], strict=True)) for name in makers}


def report(rates: Dict[str, List[Tuple[float, float]]]) -> str:
    """Median images/s and its ratio to the baseline's; the median of the per-round ratios (each
    round runs every loader back to back, so it cancels slow drifts of a shared machine); CPU
    milliseconds per image summed over the main process and the workers (robust to other load)."""
    base = rates[BASELINE]
    lines = [
        f"{'loader':<22}{'img/s':>8}{'ratio':>8}{'round ratio':>13}{'CPU ms/img':>12}{'CPU ratio':>11}"
        f"{'95% of round ratio':>20}  verdict vs baseline; img/s per run"
    ]
    for name, values in rates.items():
        speed = statistics.median(v[0] for v in values)
        cpu = statistics.median(v[1] for v in values)
        paired = ratio_of([v[0] for v in values], [b[0] for b in base], BASELINE)
        base_cpu = statistics.median(b[1] for b in base)
        lines.append(
            f"{name:<22}{speed:>8.0f}{speed / statistics.median(b[0] for b in base):>7.2f}x"
            f"{paired.ratio:>12.2f}x{cpu:>12.2f}{base_cpu / cpu if cpu else math.nan:>10.2f}x"
            f"{f'{paired.low:.2f}-{paired.high:.2f}':>20}  "
            + (f"{paired.verdict}; " if name != BASELINE else "-; ")
            + " ".join(f"{v[0]:.0f}" for v in values)
        )
    return "\n".join(lines)
