"""`python -m bench.tools.storage_ceiling`: the storage benchmark's read ceiling against fio and a
plain Python read loop, on the same files, warm and cold, alternating.

    python -m bench.tools.storage_ceiling [--files 128 --samples-per-file 64 --record-size 114660
                                           --threads 4 --rounds 3 --root DIR --min-fio 0.9 --min-plain 1.0]

Three readers of the same dataset (raw records, written once):
- bench: the read phase (bench.iobench.reader.run_reader, computation_time=0), whole files read
  in record-sized pieces (or --transfer-size) into reused buffers by --threads reader threads;
- fio: --threads jobs (threads), each reading its own files in order, psync, bs = the same piece
  size, invalidate=0 (this command drops the cache itself, for every reader alike); its
  throughput is its own (io_bytes / runtime), which leaves its start-up out;
- plain: `open(path, "rb")`, then `read(piece)` until the end, for every file from a
  ThreadPoolExecutor of --threads threads (the same piece size: with --transfer-size at least the
  file size every reader reads each file in one call).
Each round runs them A-B-C-C-B-A (bench.analysis.rounds: ratios are medians of per-round ratios
with a 95% interval and a verdict); warm rounds read from the page cache (one untimed pass first),
cold rounds drop the cache for the dataset's files before every timed pass with
posix_fadvise(DONTNEED) (after fdatasync). Prints every pass, the medians and bench/fio,
bench/plain; --min-fio / --min-plain make it a check (exit 1 below). Without fio it says so in
one line and compares with plain Python only.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence

from bench.analysis.rounds import Rounds, alternate
from bench.config import compose
from bench.config.storage import PrepareMode, StorageWorkloadConfig
from bench.iobench.formats.base import FileSpec
from bench.iobench.prepare import prepare_dataset
from bench.iobench.reader import run_reader
from bench.storage.local import LocalStore

Reader = Callable[[], float]  # one timed pass over every file: MB/s


def workload_for(args: argparse.Namespace) -> StorageWorkloadConfig:
    values = {
        "name": "ceiling",
        "num_files": args.files,
        "samples_per_file": args.samples_per_file,
        "record_size": args.record_size,
        "batch_size": args.samples_per_file,
        "read_threads": args.threads,
        "prefetch": args.prefetch,
        "computation_time": 0,
        "shuffle": "none",
        "checkpoint_size_mb": 0,
        "transfer_size": args.transfer_size or "null",
    }
    return compose("mode=storage", *[f"storage.workload.{k}={v}" for k, v in values.items()]).storage.workload


def bench_reader(store: LocalStore, files: Sequence[FileSpec], workload: StorageWorkloadConfig) -> Reader:
    total = sum(f.size for f in files)

    def run() -> float:
        start = time.perf_counter()
        run_reader(store, files, workload)
        return total / (time.perf_counter() - start) / 1e6

    return run


def plain_reader(paths: Sequence[str], threads: int, block: int) -> Reader:
    def read(path: str) -> int:
        size = 0
        with open(path, "rb") as fh:
            while piece := fh.read(block):
                size += len(piece)
        return size

    def run() -> float:
        start = time.perf_counter()
        with ThreadPoolExecutor(threads) as pool:
            total = sum(pool.map(read, paths))
        return total / (time.perf_counter() - start) / 1e6

    return run


def fio_job(paths: Sequence[str], threads: int, block: int) -> str:
    lines = [
        "[global]",
        "ioengine=psync",
        "rw=read",
        f"bs={block}",
        "direct=0",
        "invalidate=0",
        "thread",
        "group_reporting",
        "file_service_type=sequential",
    ]
    for job in range(threads):
        mine = paths[job::threads]
        if mine:
            lines += [f"[reader{job}]", "filename=" + ":".join(mine)]
    return "\n".join(lines) + "\n"


def fio_reader(paths: Sequence[str], threads: int, block: int, job_file: Path) -> Reader:
    job_file.write_text(fio_job(paths, threads, block))

    def run() -> float:
        done = subprocess.run(
            ["fio", "--output-format=json", str(job_file)], capture_output=True, text=True, check=True
        )
        read = json.loads(done.stdout[done.stdout.index("{") :])["jobs"][0]["read"]
        return read["io_bytes"] / (read["runtime"] / 1000.0) / 1e6

    return run


def summarise(found: Rounds, label: str) -> Dict[str, float]:
    """Each reader's median and range, then bench against every other reader (median of per-round
    ratios, 95% interval, verdict); returns those ratios."""
    print(found.summary("MB/s", label), flush=True)
    ratios = found.ratios()
    print(
        f"{label} ratios: " + ", ".join(f"bench/{other} {ratio.ratio:.2f}" for other, ratio in ratios.items()),
        flush=True,
    )
    return {other: ratio.ratio for other, ratio in ratios.items()}


def modes_of(text: str) -> List[str]:
    """--modes: warm, cold, both, or a comma list of warm and cold."""
    modes: List[str] = []
    for word in (w.strip() for w in text.split(",") if w.strip()):
        if word not in ("warm", "cold", "both"):
            raise SystemExit(f"[ERROR] --modes={text!r} is not valid: accepted warm, cold, both or warm,cold")
        modes += ["warm", "cold"] if word == "both" else [word]
    return list(dict.fromkeys(modes))


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.tools.storage_ceiling", description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=128)
    parser.add_argument("--samples-per-file", type=int, default=64)
    parser.add_argument("--record-size", type=int, default=114660, help="bytes (default: MLPerf's ResNet-50 record)")
    parser.add_argument("--transfer-size", type=int, help="bytes per read call (default: one record)")
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--prefetch", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3, help="A-B-C-C-B-A rounds per temperature")
    parser.add_argument("--modes", default="both", help="warm, cold or both (default)")
    parser.add_argument("--root", type=Path, help="dataset directory (default: a temporary one under the cwd)")
    parser.add_argument("--min-fio", type=float, help="exit 1 when bench/fio is below this (warm or cold)")
    parser.add_argument("--min-plain", type=float, help="exit 1 when bench/plain is below this (warm or cold)")
    args = parser.parse_args(argv)
    root = args.root or Path(tempfile.mkdtemp(prefix="bench-ceiling-", dir="."))
    try:
        return _compare(args, root)
    finally:
        if args.root is None:
            shutil.rmtree(root, ignore_errors=True)


def _compare(args: argparse.Namespace, root: Path) -> int:
    workload = workload_for(args)
    store = LocalStore(root)
    files = prepare_dataset(store, workload, PrepareMode.auto, workers=4).files
    paths = [str(root / f.key) for f in files]
    block = args.transfer_size or args.record_size
    readers: Dict[str, Reader] = {"bench": bench_reader(store, files, workload)}
    if files[0].size % block:
        print(
            f"fio reads whole blocks only and times a partial last block oddly: --transfer-size {block} does not "
            f"divide the file size ({files[0].size} bytes); pick one that does for a fair comparison"
        )
    if shutil.which("fio"):
        readers["fio"] = fio_reader(paths, args.threads, block, root / "ceiling.fio")
    else:
        print("fio: not installed (Debian: apt-get install fio): comparing with plain Python only")
    readers["plain"] = plain_reader(paths, args.threads, block)
    print(
        f"{len(files)} files x {files[0].size / 2**20:.1f} MiB in {root}, {args.threads} threads, "
        f"reads of {block} bytes; cold = posix_fadvise(DONTNEED) of every file before each pass"
    )
    failed = False
    for mode in modes_of(args.modes):

        def before(mode: str = mode) -> None:  # bound now: alternate() calls it in this iteration
            if mode != "warm":
                store.drop_cache([f.key for f in files])

        # warm: one untimed pass of every reader first (the page cache holds the dataset, every
        # reader's code is warm); cold: the cache is dropped before every pass anyway
        found = alternate(
            readers, args.rounds, warmup=1 if mode == "warm" else 0, before=before, label=mode, unit="MB/s"
        )
        ratios = summarise(found, mode)
        for other, floor in (("fio", args.min_fio), ("plain", args.min_plain)):
            if floor is not None and other in ratios and ratios[other] < floor:
                print(f"{mode}: bench/{other} {ratios[other]:.2f} is below {floor}", file=sys.stderr)
                failed = True
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
