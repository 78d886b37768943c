"""`python -m bench.data prepare ...` (image folder -> shards), `python -m bench.data digits ...`
(scikit-learn's 8x8 digits as an image folder) and `python -m bench.data bench-loader ...`
(bench/data/__main__.py; this module is its code).

`prepare --storage KEY=VALUE` sets keys of the storage group for an s3:// destination; they go
through the schema like any `storage.KEY=VALUE` override of `python -m bench`."""

from __future__ import annotations

import argparse
import math
import os
import statistics
import tempfile
from typing import Any, Callable, Dict, Generator, List, Optional, Tuple

from bench.analysis.rounds import alternate, ratio_of
from bench.config import compose
from bench.config.storage import StorageLocation
from bench.data.registry import Batches, build_batches
from bench.errors import EXIT_FAILED, CheckpointError, ConfigError, ConfigProblem, DataError, Interrupted, print_error
from bench.machine.children import exit_without_teardown, sigterm_raises
from bench.machine.writable import check_writable_dir
from bench.secrets import redact_output
from bench.tools import ab


def _storage_config(pairs: List[str]) -> StorageLocation:
    """--storage KEY=VALUE pairs as the storage group, typed and checked by the schema."""
    for pair in pairs:
        if "=" not in pair:
            raise DataError(f"--storage {pair!r} is not KEY=VALUE (e.g. --storage endpoint=http://localhost:9000)")
    return compose(*[f"storage.{pair}" for pair in pairs]).storage


def _number(option: str, text: str, kind: type, accepted: str) -> Any:
    """--option's text as an int or float, or the one-line ConfigError naming the option."""
    try:
        return kind(text)
    except ValueError:
        raise ConfigError(option, text, accepted) from None


def _digits(args: argparse.Namespace) -> str:
    from bench.data.digits import describe, write_digits

    fraction = _number("--val-fraction", args.val_fraction, float, "a fraction between 0 and 1")
    size = _number("--size", args.size, int, "a whole number of pixels")
    seed = _number("--seed", args.seed, int, "a whole number")
    manifest, already = write_digits(args.dst, fraction, size, args.format, seed)
    if already:
        return f"{args.dst} already holds the digits: {describe(manifest)}; nothing to do"
    return f"wrote {describe(manifest)} to {args.dst}"


def main(argv: Optional[List[str]] = None) -> int:
    redact_output()  # a tracking URI or an endpoint read from the environment may carry a password
    parser = argparse.ArgumentParser(prog="python -m bench.data", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)

    prep = commands.add_parser("prepare", help="write pre-resized JPEG shards of an image folder")
    prep.add_argument("--src", required=True, help="image folder: train/ and val/ of class folders, or class folders")
    prep.add_argument("--dst", required=True, help="output directory or s3://bucket/prefix")
    prep.add_argument("--size", type=int, default=256, help="short side of the stored images (never upscaled)")
    prep.add_argument("--quality", type=int, default=90, help="JPEG quality of the stored images")
    prep.add_argument("--shard-size", type=int, default=1000, help="images per shard")
    prep.add_argument("--workers", type=int, default=None, help="encoding processes (default: CPU count)")
    said = "storage group options for s3:// (e.g. endpoint=http://localhost:9000)"
    prep.add_argument("--storage", action="append", default=[], metavar="KEY=VALUE", help=said)
    prep.add_argument("--no-progress", action="store_true")

    digits = commands.add_parser("digits", help="write scikit-learn's 8x8 digits (1,797 images) as an image folder")
    digits.add_argument("--dst", required=True, help="output directory: <dst>/train/<0..9>/ and <dst>/val/<0..9>/")
    digits.add_argument("--val-fraction", default="0.2", help="share of each class in val (stratified; default 0.2)")
    digits.add_argument("--size", default="32", help="side of the stored RGB images, upscaled from 8 (default 32)")
    digits.add_argument("--format", default="png", help="png (default) or jpeg")
    digits.add_argument("--seed", default="0", help="seed of the train/val split (default 0)")

    bench = commands.add_parser("bench-loader", help="our loaders vs a torchvision ImageFolder+PIL baseline")
    bench.add_argument("--images", type=int, default=600)
    for flag, default in (("--classes", 10), ("--workers", 2), ("--batch-size", 64), ("--image-size", 224)):
        ab.spell(bench, flag, default)  # the loaders' config keys (bench.tools.ab)
    bench.add_argument("--rounds", type=int, default=3)
    bench.add_argument("--batches", type=int, default=20, help="timed batches per measurement")
    bench.add_argument("--warmup", type=int, default=4, help="discarded batches per measurement")
    bench.add_argument("--shard-image-size", type=int, default=256, help="prepare --size of the shards")
    bench.add_argument("--shard-size", type=int, default=100, help="prepare --shard-size of the shards")
    said = "where the generated dataset and shards live (reused between runs)"
    bench.add_argument("--dir", default=os.path.join(tempfile.gettempdir(), "bench-loader"), help=said)
    bench.add_argument("--loaders", default="imagefolder,shards")

    args = parser.parse_args(argv)
    with sigterm_raises():  # SIGTERM ends it as Ctrl-C does, wherever it waits (an S3 endpoint's check too)
        return _command(args)


def _command(args: argparse.Namespace) -> int:
    try:
        if args.command == "prepare":
            from bench.data.prepare import describe, prepare

            for name, value in (("--size", args.size), ("--shard-size", args.shard_size)):
                if value <= 0:
                    raise DataError(f"{name}={value} must be a positive integer")
            if not 1 <= args.quality <= 100:
                raise DataError(f"--quality={args.quality} must be between 1 and 100")
            if args.workers is not None and args.workers < 0:  # 0 has always meant the default
                raise ConfigError("--workers", args.workers, "an integer of 1 or more (0, or none: the CPU count)")
            if "://" not in args.dst:  # a local directory; s3:// is checked when its store is opened
                check_writable_dir("--dst", args.dst)
            storage, progress = _storage_config(args.storage), False if args.no_progress else None
            summary = prepare(
                args.src, args.dst, args.size, args.quality, args.shard_size, args.workers, storage, progress=progress
            )
            print(describe(args.dst, summary), flush=True)
        elif args.command == "digits":
            print(_digits(args), flush=True)
        else:
            if problem := ab.below_one(args, "images", "rounds", "batches"):
                return print_error(problem)
            check_writable_dir("--dir", args.dir)
            compose(*ab.spelled(args))  # the flags' config keys, checked before any image is written
            print(report(run(args)), flush=True)
    except (Interrupted, KeyboardInterrupt) as exc:  # the pool's processes were ended with it
        stopped = exc if isinstance(exc, Interrupted) else Interrupted("SIGINT")
        return print_error(
            f"{args.command} stopped by {stopped.signal_name}: its workers were ended; what was written "
            "is incomplete (a split is complete once its meta.json exists)",
            stopped.exit_code,
        )
    except (DataError, ConfigError, ConfigProblem, CheckpointError) as exc:  # bad argument, source, --dst in use
        return print_error(str(exc))
    except Exception as exc:  # e.g. an S3 store that cannot be opened: one line, no traceback
        return print_error(f"{args.command} failed: {type(exc).__name__}: {exc}", EXIT_FAILED)
    return 0


# ---- bench-loader ----
# `python -m bench.data bench-loader`: our loaders against a hand-written torchvision ImageFolder +
# PIL pipeline, on the same generated JPEGs, workers and batch size.
#
# Loaders alternate within each round in palindromic order (A-B-C-C-B-A, bench.analysis.rounds),
# since a shared machine drifts. Each measurement starts a fresh loader, discards warm-up batches
# (worker start-up, first decode), then times `--batches` batches including our device step
# (uint8 -> normalised float32 NCHW on the CPU, one thread). Result per loader: median images/s and its
# ratio to the baseline's median, plus CPU time per image (main process + workers), which other load on a
# shared machine barely moves.

BASELINE = "torchvision-baseline"


def ensure_images(args: argparse.Namespace) -> str:
    """--images generated JPEGs in --classes class folders under --dir (reused between runs)."""
    images, classes = args.images, args.classes
    root = os.path.join(args.dir, f"images-{images}-{classes}")
    existing = sum(len(files) for _, _, files in os.walk(root)) if os.path.isdir(root) else 0
    if existing != images:
        import shutil

        from bench.data.sample_images import write_image_folder

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
    import torch
    from torchvision import datasets, transforms

    crop, flip = transforms.RandomResizedCrop(args.image_size), transforms.RandomHorizontalFlip()
    normalize = transforms.Normalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))
    transform = transforms.Compose([crop, flip, transforms.ToTensor(), normalize])
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
    import torch

    data = compose(f"data={name}", f"data.root={root}", *ab.spelled(args), "data.pin_memory=false").data
    return build_batches(data, torch.device("cpu"), torch.contiguous_format, seed=0)


def run(args: argparse.Namespace) -> Dict[str, List[Tuple[float, float]]]:
    """Every loader of --loaders and the baseline, --rounds rounds (the bench-loader command's arguments)."""
    import torch

    from bench.doctor.loader import timed_batches

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
        def one() -> float:  # images/s over --batches batches after --warmup discarded ones; CPU ms per image noted
            _count, images, seconds, cpu = timed_batches(makers[name](), args.warmup, args.batches)
            assert images == args.batches * args.batch_size
            cpu_ms[name].append(cpu * 1000 / images)
            return images / seconds

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
            + (f"{paired.verdict_at(2)}; " if name != BASELINE else "-; ")  # judged as printed: 2 places
            + " ".join(f"{v[0]:.0f}" for v in values)
        )
    return "\n".join(lines)


if __name__ == "__main__":
    exit_without_teardown(main)
