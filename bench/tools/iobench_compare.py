"""`python -m bench.iobench.compare` (bench.tools.iobench_compare): our read phase against a plain
baseline on the same files, alternating A-B-B-A.

    python -m bench.iobench.compare local [--files 512 --file-kb 1024 --threads 8 --rounds 5]
    python -m bench.iobench.compare s3    [--files 64 --file-kb 1024 --threads 8 --rounds 3 --client obstore]

local: the storage benchmark's read phase (computation_time=0: the I/O ceiling) vs open()/read()
of the same files from a ThreadPoolExecutor of the same concurrency.
s3: the same read phase through `--client` against a moto server this command starts on
127.0.0.1 vs a boto3 client in a thread pool of the same concurrency. The loopback server is
the bottleneck, so this guards our client overhead, not S3's speed.

Both sides read every file once per round, timed from the first request to the last byte (ours:
its epoch, from sending the pass to its readers to its last step, so forking its reader
processes is outside; the baseline's thread pool start, under a millisecond, is inside); MB/s =
dataset bytes / that time. Prints each round, the medians and ours/baseline (median of per-round
ratios, with its 95% interval and verdict: bench.analysis.rounds); with --min-ratio it exits 1
when the ratio is lower.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import sys
import tempfile
from pathlib import Path
from typing import Callable, List, Sequence, Tuple

from bench.analysis.rounds import alternate
from bench.config.storage import PrepareMode, StorageConfig
from bench.doctor.storage_read import ceiling_storage
from bench.errors import BenchError, print_error
from bench.iobench.formats.base import FileSpec
from bench.iobench.prepare import prepare_dataset
from bench.machine.writable import writable_dir_refusal
from bench.storage.base import ObjectStore
from bench.storage.local import LocalStore
from bench.storage.registry import open_store
from bench.tools import ab
from bench.tools.ceiling_readers import Costs, bench_reader, pool_reader

SAMPLES_PER_FILE = 16
WORKLOAD = "storage.workload."  # the keys its flags spell
# Only for the throw-away loopback server this command starts; real credentials are never needed.
LOOPBACK_CREDENTIALS = {"AWS_ACCESS_KEY_ID": "loopback", "AWS_SECRET_ACCESS_KEY": "loopback"}


def storage_for(args: argparse.Namespace, *overrides: str) -> StorageConfig:
    """The storage group of a read phase at the I/O ceiling: every file read once, in order, a batch a file;
    its flags (--files, --threads, --prefetch) spell their storage.workload keys."""
    record = max(1, args.file_kb * 1024 // SAMPLES_PER_FILE)
    workload = dict(name="compare", samples_per_file=SAMPLES_PER_FILE, batch_size=SAMPLES_PER_FILE, shuffle="false")
    return ceiling_storage({**workload, "record_size": record}, *args.overrides, *overrides)


def compare_reads(
    store: ObjectStore,
    files: Sequence[FileSpec],
    storage: StorageConfig,
    read: Callable[[str], int],
    args: argparse.Namespace,
    names: Tuple[str, str],
) -> float:
    """A-B-B-A rounds of MB/s after one warm-up pass of each (page cache, connection pools, imports):
    ours, one pass of the storage benchmark's read phase (its MB/s over its epoch), against `read`
    of every file from a plain ThreadPoolExecutor. Prints the medians and the ratio; returns it."""
    costs = Costs()  # (the storage ceiling's CPU figures: not printed here)
    ours = bench_reader(store, files, storage.workload, "ours", costs)
    sides = {"ours": ours, "baseline": pool_reader(read, [f.key for f in files], args.threads, costs)}
    found = alternate(sides, args.rounds, warmup=1, unit="MB/s")
    ratio = found.ratio("baseline")
    for side, name in zip(sides, names, strict=True):
        values = found.figures[side]
        print(f"{side} ({name}): median {found.median(side):.0f} MB/s [{min(values):.0f}-{max(values):.0f}]")
    print(f"ratio ours/baseline: {ab.said(ratio)}")
    return ratio.ratio


def compare_local(args: argparse.Namespace, root: Path) -> float:
    storage = storage_for(args)
    store = LocalStore(root)
    files = prepare_dataset(store, storage.workload, PrepareMode.auto, workers=4).files

    def read(key: str) -> int:
        with open(root / key, "rb") as fh:
            return len(fh.read())

    print(f"local: {len(files)} files x {args.file_kb} KiB in {root}, {args.threads} threads (page cache warm)")
    names = ("storage read phase, computation_time=0", "open/read in a ThreadPoolExecutor")
    return compare_reads(store, files, storage, read, args, names)


def compare_s3(args: argparse.Namespace) -> float:
    from moto.server import ThreadedMotoServer

    from bench.storage.s3.boto3_store import boto3_client
    from bench.storage.s3.settings import S3Settings

    added = {name: value for name, value in LOOPBACK_CREDENTIALS.items() if name not in os.environ}
    os.environ.update(added)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        endpoint = f"http://{host}:{port}"
        settings = S3Settings(
            "compare", "data", endpoint, "us-east-1", max_attempts=5, timeout_s=60, connect_timeout_s=5
        )
        admin = boto3_client(settings, max_pool_connections=args.threads)
        admin.create_bucket(Bucket=settings.bucket)
        keys = {"endpoint": endpoint, "bucket": settings.bucket, "prefix": settings.prefix, "client": args.client}
        storage = storage_for(args, "storage=s3", *(f"storage.{key}={value}" for key, value in keys.items()))
        location = f"s3://{settings.bucket}/{settings.prefix}"
        writer = dataclasses.replace(storage, client="obstore")  # moto refuses s3torchconnector's writes
        files = prepare_dataset(open_store(location, writer), storage.workload, PrepareMode.auto, 4).files
        store = open_store(location, storage)

        def read(key: str) -> int:
            return len(admin.get_object(Bucket=settings.bucket, Key=f"{settings.prefix}/{key}")["Body"].read())

        print(f"s3: {len(files)} objects x {args.file_kb} KiB on moto at {endpoint}, {args.threads} threads")
        names = (f"storage read phase via {args.client}", "boto3 get_object in a ThreadPoolExecutor")
        return compare_reads(store, files, storage, read, args, names)
    finally:
        server.stop()
        for name in added:
            del os.environ[name]


def main(argv: List[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.iobench.compare", description=__doc__.split("\n\n")[0])
    parser.add_argument("backend", choices=("local", "s3"))
    ab.spell(parser, "--files", None, "default: 512 local, 64 s3 (moto serves ~300 MB/s)", WORKLOAD + "num_files")
    parser.add_argument("--file-kb", type=int, default=1024)
    ab.spell(parser, "--threads", 8, key=WORKLOAD + "read_threads")
    parser.add_argument("--rounds", type=int, default=5, help="A-B-B-A rounds")
    ours = "ours: batches (= files here) read ahead; the baseline queues every file at once"
    ab.spell(parser, "--prefetch", 8, ours, WORKLOAD + "prefetch")
    parser.add_argument("--client", default="obstore", choices=("obstore", "boto3", "s3torchconnector"))
    parser.add_argument("--root", type=Path, help="local: dataset directory (default: a temporary one)")
    parser.add_argument("--min-ratio", type=float, help="exit 1 when ours/baseline is below this")
    args, overrides = ab.parse(parser, argv)
    if problem := ab.below_one(args, "rounds", "file_kb"):
        return print_error(problem)
    logging.basicConfig(level=logging.WARNING)
    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # moto's per-request access log
    args.files = args.files or (512 if args.backend == "local" else 64)
    args.overrides = [f"{WORKLOAD}num_files={args.files}", *overrides]
    try:  # the keys, as the storage benchmark checks them, before any file is written
        storage_for(args)
        unwritable = writable_dir_refusal("--root", str(args.root)) if args.root else None
    except BenchError as exc:
        unwritable = str(exc)
    if unwritable:
        return print_error(unwritable)
    if args.backend == "s3":
        ratio = compare_s3(args)
    elif args.root:
        ratio = compare_local(args, args.root)
    else:
        with tempfile.TemporaryDirectory(prefix="bench-compare-") as tmp:
            ratio = compare_local(args, Path(tmp))
    if args.min_ratio is not None and ratio < args.min_ratio:
        print(f"ratio {ratio:.2f} is below --min-ratio {args.min_ratio}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
