"""Read phase for one simulated accelerator: reader threads feed batches to an emulated training loop.

`read_threads` threads fetch whole files (one GET / one read each) in the epoch's order, up to
`prefetch` batches ahead of the loop; the loop takes a batch, then "computes" for
`computation_time` seconds (a sleep, as in MLPerf Storage / DLIO). The first step of the run
is warm-up: its time, its samples and the requests that finished before it ended are not in
the figures.

AU (accelerator utilization) = emulated compute time / wall time of the measured steps.
"""

from __future__ import annotations

import math
import queue
import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

import psutil

from bench.config.storage import StorageWorkloadConfig
from bench.iobench.workload import FileSpec, decode_samples
from bench.storage.base import ObjectStore


@dataclass
class Request:
    key: str
    epoch: int
    bytes: int
    latency_ms: float
    finished: float  # perf_counter() when the request ended


@dataclass
class EpochStats:
    epoch: int
    steps: int = 0  # measured steps (the run's first step is never counted)
    samples: int = 0
    bytes: float = 0.0  # of the measured samples
    wall_s: float = 0.0
    compute_s: float = 0.0
    wait_s: float = 0.0

    @property
    def au(self) -> float:
        return self.compute_s / self.wall_s if self.wall_s > 0 else 0.0


@dataclass
class ReaderResult:
    client: int
    epochs: List[EpochStats]
    requests: List[Request] = field(default_factory=list)  # measured requests only
    cpu_s: float = 0.0  # this process's CPU time over the measured window
    window_start: float = 0.0  # perf_counter() clock of the process that ran it
    step_times_ms: List[float] = field(default_factory=list)

    def total(self, name: str) -> float:
        return sum(getattr(e, name) for e in self.epochs)

    def to_dict(self) -> Dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, sent: Mapping[str, Any]) -> "ReaderResult":
        """Back from to_dict() (what an accelerator process sends its parent)."""
        return cls(client=sent["client"], epochs=[EpochStats(**e) for e in sent["epochs"]],
                   requests=[Request(**r) for r in sent["requests"]], cpu_s=sent["cpu_s"],
                   window_start=sent["window_start"], step_times_ms=list(sent["step_times_ms"]))


class _Pipeline:
    """Reader threads that pull the next file themselves (the loop never has to wake up to hand
    out work) and deliver files as they finish; a semaphore bounds the files read but not yet
    consumed to `depth`, which is what prefetching means. Batches are cut from that stream."""

    def __init__(self, pool: ThreadPoolExecutor, threads: int, store: ObjectStore, files: Sequence[FileSpec],
                 fmt: str, depth: int, epoch: int, requests: List[Request]):
        self.store, self.fmt, self.epoch, self.requests, self.threads = store, fmt, epoch, requests, threads
        self._todo: Iterator[FileSpec] = iter(files)
        self._todo_lock = threading.Lock()
        self._slots = threading.Semaphore(depth)
        self._done: "queue.SimpleQueue[Any]" = queue.SimpleQueue()
        self._stopped = False
        for _ in range(threads):
            pool.submit(self._worker)

    def _worker(self) -> None:
        while True:
            self._slots.acquire()  # a place in the read-ahead window
            with self._todo_lock:
                spec = None if self._stopped else next(self._todo, None)
            if spec is None:
                self._done.put(_WORKER_DONE)
                return
            try:
                self._done.put(self._read(spec))
            except BaseException as exc:  # noqa: BLE001 - handed to the loop, which raises it
                self._done.put(exc)
                return

    def _read(self, spec: FileSpec) -> Tuple[int, int]:
        start = time.perf_counter()
        data = self.store.get(spec.key)
        end = time.perf_counter()
        self.requests.append(Request(spec.key, self.epoch, len(data), (end - start) * 1000.0, end))
        return decode_samples(data, spec, self.fmt), len(data)

    def batches(self, batch_size: int) -> Iterator[Tuple[int, float]]:
        """(samples, bytes) of successive batches, the last one may be short. A batch's bytes
        are its share of the files it came from (headers included), so they add up to the files'."""
        samples = size = 0.0
        running = self.threads
        while running:
            item = self._done.get()
            if item is _WORKER_DONE:
                running -= 1
                continue
            if isinstance(item, BaseException):
                self.stop()
                raise item
            self._slots.release()
            samples, size = samples + item[0], size + item[1]
            while samples >= batch_size:
                share = size * batch_size / samples
                samples, size = samples - batch_size, size - share
                yield batch_size, share
        if samples:
            yield int(samples), size

    def stop(self) -> None:
        """Let every reader thread finish its current file and exit (a run cut short by max_steps)."""
        with self._todo_lock:
            self._stopped = True
        for _ in range(self.threads):
            self._slots.release()


_WORKER_DONE = object()


def files_in_flight(workload: StorageWorkloadConfig) -> int:
    """The files that hold `prefetch` batches, plus two per reader thread (the one it reads and
    one it finished that the loop has not picked up yet), so a thread does not stall on the
    loop's wake-up latency when files are small and fast."""
    ahead = math.ceil(workload.prefetch * workload.batch_size / workload.samples_per_file)
    return 2 * workload.read_threads + ahead


def epoch_order(files: Sequence[FileSpec], workload: StorageWorkloadConfig, client: int, epoch: int) -> List[FileSpec]:
    order = list(files)
    if workload.shuffle:
        random.Random(f"{workload.seed}-{client}-{epoch}").shuffle(order)
    return order


def run_reader(store: ObjectStore, files: Sequence[FileSpec], workload: StorageWorkloadConfig, client: int = 0,
               start_gate: Optional[Any] = None) -> ReaderResult:
    """The emulated training loop of one accelerator over `files` (its shard of the dataset).
    `start_gate` (a barrier) lines the clients up so their measured windows overlap."""
    compute = float(workload.computation_time)
    max_steps = workload.max_steps
    requests: List[Request] = []
    result = ReaderResult(client, [], requests)
    me = psutil.Process()
    step, cpu_at_start = 0, 0.0
    if start_gate is not None:
        start_gate.wait()
    with ThreadPoolExecutor(max_workers=workload.read_threads, thread_name_prefix=f"reader{client}") as pool:
        for epoch in range(1, workload.epochs + 1):
            stats = EpochStats(epoch)
            result.epochs.append(stats)
            pipeline = _Pipeline(pool, workload.read_threads, store, epoch_order(files, workload, client, epoch),
                                 workload.format, files_in_flight(workload), epoch, requests)
            batches = pipeline.batches(workload.batch_size)
            epoch_clock = time.perf_counter()
            try:
                while max_steps is None or step < max_steps:
                    started = time.perf_counter()
                    batch = next(batches, None)
                    if batch is None:
                        break
                    fetched = time.perf_counter()
                    if compute > 0:
                        time.sleep(compute)
                    ended = time.perf_counter()
                    step += 1
                    if step == 1:  # warm-up: the measured window opens when the first step ends
                        result.window_start = epoch_clock = ended
                        cpu_at_start = _cpu_seconds(me)
                        continue
                    stats.steps += 1
                    stats.samples += batch[0]
                    stats.bytes += batch[1]
                    stats.wait_s += fetched - started
                    stats.compute_s += compute
                    result.step_times_ms.append((ended - started) * 1000.0)
            finally:  # also on Ctrl-C / SIGTERM: readers blocked on the window must exit, or the pool waits forever
                pipeline.stop()
            stats.wall_s = time.perf_counter() - epoch_clock
            if max_steps is not None and step >= max_steps:
                break
    result.cpu_s = _cpu_seconds(me) - cpu_at_start
    _keep_measured(result, requests)
    return result


def _keep_measured(result: ReaderResult, requests: List[Request]) -> None:
    """The requests that ended after the warm-up step (their latencies are the reported ones)."""
    result.requests = [r for r in requests if r.finished >= result.window_start]


def _cpu_seconds(process: psutil.Process) -> float:
    times = process.cpu_times()
    return times.user + times.system

