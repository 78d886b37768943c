"""`python -m bench.data prepare ...` (image folder -> shards), `python -m bench.data digits ...`
(scikit-learn's 8x8 digits as an image folder) and `python -m bench.data bench-loader ...`
(bench/data/__main__.py; this module is its code).

`prepare --storage KEY=VALUE` sets keys of the storage group for an s3:// destination; they go
through the schema like any `storage.KEY=VALUE` override of `python -m bench`."""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from typing import Any, List, Optional

from bench.config.storage import StorageLocation
from bench.errors import EXIT_FAILED, CheckpointError, ConfigError, ConfigProblem, DataError, Interrupted, print_error
from bench.machine.children import sigterm_raises
from bench.machine.writable import check_writable_dir
from bench.secrets import redact_output
from bench.tools import ab


def _storage_config(pairs: List[str]) -> StorageLocation:
    """--storage KEY=VALUE pairs as the storage group, typed and checked by the schema."""
    from bench.config import compose

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

    manifest, already = write_digits(
        args.dst,
        _number("--val-fraction", args.val_fraction, float, "a fraction between 0 and 1"),
        _number("--size", args.size, int, "a whole number of pixels"),
        args.format,
        _number("--seed", args.seed, int, "a whole number"),
    )
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
    prep.add_argument(
        "--storage",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="storage group options for s3:// (e.g. endpoint=http://localhost:9000)",
    )
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
    bench.add_argument(
        "--dir",
        default=os.path.join(tempfile.gettempdir(), "bench-loader"),
        help="where the generated dataset and shards live (reused between runs)",
    )
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
            from bench.config import compose
            from bench.tools.loader_benchmark import report, run

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


if __name__ == "__main__":
    sys.exit(main())
