"""The readers `python -m bench.tools.storage_ceiling` alternates: bench's read phase (records
checked, or not), fio and a plain Python loop. Each one pass over every file returns MB/s and
notes the CPU seconds per GB it took in a `Costs`. `python -m bench.iobench.compare` alternates
two of them: the read phase (through any backend) and a thread pool's plain reads.

fio is timed by the span of its I/O, not by its own figure: fio's bandwidth is io_bytes over the
runtime of its longest job, each job timed from its own start. With more jobs than cores (8 on
this 2-core machine) the jobs run staggered, not side by side: in one pass over 64 files x 11 MB
the eight jobs started 0 to 52 ms apart and each ran 3 to 59 ms, so the longest job's 23 ms
became "32 GB/s" when the pass took 48 ms (15 GB/s). A per-I/O log (write_iops_log, stamped
with the Unix time in ms: log_unix_epoch) gives every job's first and last completion; the pass
runs from the first to the last of them (1 ms resolution; the log cost no CPU that could be
measured: 0.185 vs 0.186 s a pass, 10 passes each). fio's CPU is the process's (its rusage as a
child) less its start-up, taken from the same job with one I/O per job run right after every
pass (0.13-0.15 s here for 8 jobs over 64 files, a pass 0.18-0.20 s; the jobs' own usr_cpu and
sys_cpu gave 0.038 CPU-s/GB for a pass where ten passes in one run cost 0.052 per GB more than
one). bench's and plain Python's CPU is this process's user + system time over the pass, with
that of the children it reaped meanwhile (bench's reader processes).

bench is timed as the storage benchmark times an epoch: from the epoch's start (its readers
started, the pass sent to them) to its last step (`epoch_s`), so what starts and ends the readers
(forking 8 reader processes and reaping them: ~10 + ~7 ms here) is outside it, as fio's start-up
is outside its span; that time is printed on its own line. Its CPU-s/GB is the one the storage
benchmark reports (client_cpu_seconds_per_gb: this process's and its readers' CPU over the
measured window, from the first step's end); the whole call's, starting and ending the readers
included, is printed beside the start-up time.
"""

from __future__ import annotations

import json
import resource
import shutil
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable, Dict, List, Sequence, Tuple

from bench.config.storage import StorageWorkloadConfig
from bench.iobench.formats.base import FileSpec
from bench.iobench.reader import run_reader
from bench.machine.children import run_child
from bench.storage.base import ObjectStore

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
    if log_prefix:  # one line per I/O, stamped with the Unix time in ms: the pass's span
        lines += [f"write_iops_log={log_prefix}", "log_avg_msec=0", "log_unix_epoch=1"]
    for job in range(threads):
        if mine := paths[job::threads]:
            lines += [f"[reader{job}]", "filename=" + ":".join(mine)]
    return "\n".join(lines) + "\n"


def io_span_ms(log_dir: Path) -> int:
    """From the first I/O completion of any job to the last one of any job, in ms (at least 1)."""
    first, last = None, None
    for log in log_dir.glob("*.log"):
        if stamps := [int(line.split(",", 1)[0]) for line in log.read_text().splitlines() if line.strip()]:
            first = min(stamps[0], first if first is not None else stamps[0])
            last = max(stamps[-1], last if last is not None else stamps[-1])
    if first is None or last is None:
        raise RuntimeError(f"fio wrote no I/O log under {log_dir}")
    return max(last - first, 1)


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
