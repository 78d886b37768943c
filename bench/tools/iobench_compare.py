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
import json
import logging
import os
import resource
import shutil
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable, Dict, List, Sequence, Tuple

from bench.analysis.rounds import alternate
from bench.config.storage import PrepareMode, StorageConfig, StorageWorkloadConfig
from bench.doctor.storage_read import ceiling_storage
from bench.errors import BenchError, print_error
from bench.iobench.formats.base import FileSpec
from bench.iobench.prepare import prepare_dataset
from bench.iobench.reader import run_reader
from bench.machine.children import exit_without_teardown, run_child
from bench.machine.writable import writable_dir_refusal
from bench.maths.stats import on_its_side
from bench.storage.base import ObjectStore, open_store
from bench.storage.local import LocalStore
from bench.tools import ab

SAMPLES_PER_FILE = 16
WORKLOAD = "storage.workload."  # the keys its flags spell
# Only for the throw-away loopback server this command starts; real credentials are never needed.
LOOPBACK_CREDENTIALS = {"AWS_ACCESS_KEY_ID": "loopback", "AWS_SECRET_ACCESS_KEY": "loopback"}


# ---- the readers ----
# The readers `python -m bench.tools.storage_ceiling` alternates: bench's read phase (records
# checked, or not), fio and a plain Python loop. Each one pass over every file returns MB/s and
# notes the CPU seconds per GB it took in a `Costs`. `python -m bench.iobench.compare` alternates
# two of them: the read phase (through any backend) and a thread pool's plain reads.
#
# fio is timed by the span of its I/O, not by its own figure: fio's bandwidth is io_bytes over the
# runtime of its longest job, each job timed from its own start. With more jobs than cores (8 on
# this 2-core machine) the jobs run staggered, not side by side: in one pass over 64 files x 11 MB
# the eight jobs started 0 to 52 ms apart and each ran 3 to 59 ms, so the longest job's 23 ms
# became "32 GB/s" when the pass took 48 ms (15 GB/s). A per-I/O log (write_iops_log, stamped
# with the Unix time in ms: log_unix_epoch) gives every job's first and last completion; the pass
# runs from the first to the last of them (1 ms resolution; the log cost no CPU that could be
# measured: 0.185 vs 0.186 s a pass, 10 passes each). fio's CPU is the process's (its rusage as a
# child) less its start-up, taken from the same job with one I/O per job run right after every
# pass (0.13-0.15 s here for 8 jobs over 64 files, a pass 0.18-0.20 s; the jobs' own usr_cpu and
# sys_cpu gave 0.038 CPU-s/GB for a pass where ten passes in one run cost 0.052 per GB more than
# one). bench's and plain Python's CPU is this process's user + system time over the pass, with
# that of the children it reaped meanwhile (bench's reader processes).
#
# bench is timed as the storage benchmark times an epoch: from the epoch's start (its readers
# started, the pass sent to them) to its last step (`epoch_s`), so what starts and ends the readers
# (forking 8 reader processes and reaping them: ~10 + ~7 ms here) is outside it, as fio's start-up
# is outside its span; that time is printed on its own line. Its CPU-s/GB is the one the storage
# benchmark reports (client_cpu_seconds_per_gb: this process's and its readers' CPU over the
# measured window, from the first step's end); the whole call's, starting and ending the readers
# included, is printed beside the start-up time.

Reader = Callable[[], float]  # one timed pass over every file: MB/s


class Costs:
    """CPU seconds per GB of every pass, by reader."""

    def __init__(self) -> None:
        self.cpu_s_per_gb: Dict[str, List[float]] = {}
        self.fio_own_mb_s: List[float] = []  # fio's own figure (io_bytes / its longest job), for the record
        self.outside_ms: Dict[str, List[float]] = {}  # bench: a pass's time outside its epoch (readers' start, end)
        self.whole_cpu_s_per_gb: Dict[str, List[float]] = {}  # bench: the whole call's CPU, start and end included

    def note(self, name: str, cpu_s: float, nbytes: int) -> None:
        self.cpu_s_per_gb.setdefault(name, []).append(cpu_s / (nbytes / 1e9))

    def median(self, name: str) -> float:
        return statistics.median(self.cpu_s_per_gb[name])

    def keep_last(self, passes: int) -> None:
        """Forget all but every reader's last `passes` passes (the timed ones after warm-up passes)."""
        self.fio_own_mb_s[:] = self.fio_own_mb_s[-passes:]
        for kept in (self.cpu_s_per_gb, self.outside_ms, self.whole_cpu_s_per_gb):
            for name, values in kept.items():
                kept[name] = values[-passes:]

    def clear(self) -> None:
        for kept in (self.cpu_s_per_gb, self.fio_own_mb_s, self.outside_ms, self.whole_cpu_s_per_gb):
            kept.clear()


def _cpu_seconds() -> float:
    """User + system of this process (in ns: os.times() counts 10 ms ticks) and of its reaped children."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


def bench_reader(
    store: ObjectStore, files: Sequence[FileSpec], workload: StorageWorkloadConfig, name: str, costs: Costs
) -> Reader:
    """One pass of the storage benchmark's read phase; its MB/s over its epoch."""
    total = sum(f.size for f in files)

    def run() -> float:
        cpu, start = _cpu_seconds(), time.perf_counter()
        result = run_reader(store, files, workload)
        whole = time.perf_counter() - start
        seconds = sum(epoch.epoch_s for epoch in result.epochs)
        # its CPU as the storage benchmark reports it: over its measured window (the first step's
        # end to the last's), this process and its reader processes; the whole call's kept apart
        costs.note(name, result.cpu_s, int(sum(epoch.bytes for epoch in result.epochs)))
        costs.whole_cpu_s_per_gb.setdefault(name, []).append((_cpu_seconds() - cpu) / (total / 1e9))
        costs.outside_ms.setdefault(name, []).append((whole - seconds) * 1000.0)
        return total / seconds / 1e6

    return run


def pool_reader(read: Callable[[str], int], keys: Sequence[str], threads: int, costs: Costs) -> Reader:
    """A plain baseline: `read` (bytes read) every key from a ThreadPoolExecutor of `threads` threads."""

    def run() -> float:
        cpu, start = _cpu_seconds(), time.perf_counter()
        with ThreadPoolExecutor(threads) as pool:
            total = sum(pool.map(read, keys))
        seconds = time.perf_counter() - start
        costs.note("plain", _cpu_seconds() - cpu, total)
        return total / seconds / 1e6

    return run


def plain_reader(paths: Sequence[str], threads: int, block: int, costs: Costs) -> Reader:
    """`open(path, "rb")`, then `read(block)` until the end, for every file."""

    def read(path: str) -> int:
        size = 0
        with open(path, "rb") as fh:
            while piece := fh.read(block):
                size += len(piece)
        return size

    return pool_reader(read, paths, threads, costs)


def fio_job(paths: Sequence[str], threads: int, block: int, log_prefix: str = "") -> str:
    lines = ["[global]", "ioengine=psync", "rw=read", f"bs={block}", "direct=0", "invalidate=0", "thread"]
    lines += ["group_reporting", "file_service_type=sequential"]
    if log_prefix:  # one line per I/O, stamped with the Unix time in ms: the pass's span
        lines += [f"write_iops_log={log_prefix}", "log_avg_msec=0", "log_unix_epoch=1"]
    for job in range(threads):
        if mine := paths[job::threads]:
            lines += [f"[reader{job}]", "filename=" + ":".join(mine)]
    return "\n".join(lines) + "\n"


def io_span_ms(log_dir: Path) -> int:
    """From the first I/O completion of any job to the last one of any job, in ms (at least 1)."""
    spans = []  # each job's first and last completion
    for log in log_dir.glob("*.log"):
        if stamps := [int(line.split(",", 1)[0]) for line in log.read_text().splitlines() if line.strip()]:
            spans.append((stamps[0], stamps[-1]))
    if not spans:
        raise RuntimeError(f"fio wrote no I/O log under {log_dir}")
    return max(max(last for _, last in spans) - min(first for first, _ in spans), 1)


def fio_figures(report: Dict) -> Tuple[int, float]:
    """(io_bytes, fio's own MB/s) from fio's JSON (group_reporting: one job)."""
    read = report["jobs"][0]["read"]
    return read["io_bytes"], read["io_bytes"] / (max(read["runtime"], 1) / 1000.0) / 1e6


def run_fio(job_file: Path) -> Tuple[Dict, float]:
    """fio's JSON report and the CPU seconds the fio process took."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    # a child that ends with this process (Ctrl-C, SIGTERM, even SIGKILL of this one)
    done = run_child(["fio", "--output-format=json", str(job_file)])
    done.check_returncode()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return json.loads(done.stdout[done.stdout.index("{") :]), cpu


def fio_reader(paths: Sequence[str], threads: int, block: int, work_dir: Path, costs: Costs) -> Reader:
    log_dir = work_dir / "fio-logs"
    job_file, start_up_file = work_dir / "ceiling.fio", work_dir / "ceiling-start-up.fio"
    job_file.write_text(fio_job(paths, threads, block, str(log_dir / "pass")))
    start_up_file.write_text(fio_job(paths, threads, block).replace("[global]", "[global]\nnumber_ios=1", 1))

    def run() -> float:
        shutil.rmtree(log_dir, ignore_errors=True)
        log_dir.mkdir(parents=True)
        report, cpu = run_fio(job_file)
        nbytes, own = fio_figures(report)
        span = io_span_ms(log_dir)
        shutil.rmtree(log_dir, ignore_errors=True)
        start_up = run_fio(start_up_file)[1]  # after the pass: its few reads leave a cold pass cold
        costs.fio_own_mb_s.append(own)
        costs.note("fio", max(cpu - start_up, 0.0), nbytes)
        return nbytes / (span / 1000.0) / 1e6

    return run


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

    from bench.storage.s3 import S3Settings
    from bench.storage.s3.boto3_store import boto3_client

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
        print(f"ratio {on_its_side(ratio, args.min_ratio, 2)} is below --min-ratio {args.min_ratio}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    exit_without_teardown(main)
