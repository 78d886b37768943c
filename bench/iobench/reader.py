"""Read phase for one simulated accelerator: readers feed batches to an emulated training loop.

`read_threads` readers (forked processes for local files, threads otherwise: `readers`,
bench.iobench.reader_processes) read in the epoch's order (file_order, sample_order: below) — whole files,
or one sample at a time with read_mode=sample — up to `prefetch` batches ahead of the loop; the loop
takes a batch, then "computes" for `computation_time` seconds (a sleep, as in MLPerf Storage /
DLIO). Each epoch is timed twice (bench.iobench.result): strictly, with the run's first step
as warm-up, and by MLPerf's rules. Every `eval_every_epochs` epochs an evaluation pass reads
the eval files (timed apart); with checkpoint_every_steps a checkpoint is written every K steps
and its time is left out of the epoch's clocks (reported on its own).
"""

from __future__ import annotations

import functools
import math
import os
import random
import socket
import time
from typing import Any, Callable, Iterable, Iterator, List, Optional, Sequence, Tuple, TypeVar, Union

from bench.config.storage import PROCESSES_NEED, Readers, ReadMode, Shuffle, StorageWorkloadConfig
from bench.errors import ConfigError
from bench.iobench.formats.base import FileSpec, Unchecked, format_for
from bench.iobench.pipeline import Fetcher, ThreadReaders, WorkItem
from bench.iobench.reader_processes import ReaderProcesses
from bench.iobench.result import EpochStats, ReaderResult, Request
from bench.storage.base import ObjectStore

Periodic = Callable[[int], float]  # called after step K, 2K, ...: writes a checkpoint, returns its seconds


def files_in_flight(workload: StorageWorkloadConfig) -> int:
    """Work items in the read-ahead window: the files (or samples) that hold `prefetch` batches,
    plus two per reader thread (the one it reads and one it finished that the loop has not picked
    up yet), so a thread does not stall on the loop's wake-up latency when items are small and fast."""
    per_item = 1 if workload.read_mode == ReadMode.sample else workload.samples_per_file
    return 2 * workload.read_threads + math.ceil(workload.prefetch * workload.batch_size / per_item)


def uses_processes(store: ObjectStore, files: Sequence[FileSpec], workload: StorageWorkloadConfig) -> bool:
    """Are this accelerator's readers processes (storage.workload.readers)?"""
    local = bool(files) and getattr(store, "local_path", lambda key: None)(files[0].key) is not None
    can = local and hasattr(os, "fork")
    if workload.readers == Readers.processes and not can:
        raise ConfigError("storage.workload.readers", "processes", PROCESSES_NEED)
    return can and workload.readers != Readers.threads


ReaderPool = Union[ThreadReaders, ReaderProcesses]  # the same start / children_cpu_s / close


def open_readers(
    store: ObjectStore,
    files: Sequence[FileSpec],
    eval_files: Sequence[FileSpec],
    workload: StorageWorkloadConfig,
    client: int,
    run: int,
) -> ReaderPool:
    fmt = format_for(workload.format) if workload.verify_records else Unchecked(format_for(workload.format))
    make_fetcher = functools.partial(Fetcher, store, fmt, workload.transfer_size, workload.jpeg_decode)

    def work(evaluation: bool, epoch: int) -> Sequence[WorkItem]:
        """The pass's items in its order: whole files, or with read_mode=sample one sample each."""
        passed = eval_files if evaluation else files
        if workload.read_mode == ReadMode.sample:
            return sample_order(passed, workload, client, epoch, run)
        return [(spec, None) for spec in file_order(passed, workload, client, epoch, run)]

    readers = ReaderProcesses if uses_processes(store, files, workload) else ThreadReaders
    return readers(make_fetcher, workload.read_threads, files_in_flight(workload), work)


class _Loop:
    """The emulated training loop of one accelerator, across epochs (one step counter)."""

    def __init__(
        self,
        readers: ReaderPool,
        workload: StorageWorkloadConfig,
        client: int,
        periodic: Optional[Periodic],
        heartbeat: Callable[[], None],
        deadline: Optional[float] = None,
    ):
        self.readers, self.workload, self.periodic, self.heartbeat = readers, workload, periodic, heartbeat
        self.deadline, self.step = deadline, 0
        self.result = ReaderResult(client, [], host=socket.gethostname())
        self.requests: List[Request] = []
        self._cpu_at_start = self._children_cpu_at_start = 0.0

    def _going(self) -> bool:
        """max_steps not reached, and the deadline (if any) not passed."""
        in_time = self.deadline is None or time.perf_counter() <= self.deadline
        return in_time and (self.workload.max_steps is None or self.step < self.workload.max_steps)

    def epoch(self, epoch: int) -> bool:
        """One epoch; False once max_steps is reached or the deadline passed."""
        workload, compute = self.workload, float(self.workload.computation_time)
        stats = EpochStats(epoch)
        self.result.epochs.append(stats)
        epoch_start = time.perf_counter()
        pipeline = self.readers.start(False, epoch, self.requests)
        batches = pipeline.batches(workload.batch_size)
        epoch_clock = time.perf_counter()  # strict clock: as it always ran
        try:
            while self._going():
                started = time.perf_counter()
                if (batch := next(batches, None)) is None:
                    break
                fetched = time.perf_counter()
                if compute > 0:
                    time.sleep(compute)
                ended = time.perf_counter()
                self.step += 1
                for index in batch.requests:
                    self.requests[index].step = self.step
                stats.add_step(batch.samples, batch.bytes, compute, ended - epoch_start)
                self.heartbeat()
                if self.step == 1:  # warm-up: the strict window opens when the run's first step ends
                    self.result.window_start = epoch_clock = ended
                    self._cpu_at_start = time.process_time()
                    self._children_cpu_at_start = self.readers.children_cpu_s()
                else:
                    stats.steps += 1
                    stats.samples += batch.samples
                    stats.bytes += batch.bytes
                    stats.wait_s += fetched - started
                    stats.compute_s += compute
                    self.result.step_times_ms.append((ended - started) * 1000.0)
                every = workload.checkpoint_every_steps  # set whenever there is a periodic checkpoint
                if self.periodic is not None and every and self.step % every == 0:
                    spent = self.periodic(self.step)
                    stats.checkpoint_s += spent
                    epoch_clock += spent
        finally:  # also on Ctrl-C / SIGTERM: readers blocked on the window must exit, or the pool waits forever
            pipeline.stop()
        stats.wall_s = time.perf_counter() - epoch_clock
        return self._going()

    def evaluate(self, epoch: int) -> None:
        """One evaluation pass over the eval files: timed apart, its requests not in the read figures."""
        workload = self.workload
        compute, stats = float(workload.eval_computation_time), EpochStats(epoch)
        start = time.perf_counter()
        pipeline = self.readers.start(True, epoch, [])
        try:
            for batch in pipeline.batches(workload.eval_batch_size or workload.batch_size):
                if compute > 0:
                    time.sleep(compute)
                stats.add_step(batch.samples, batch.bytes, compute, time.perf_counter() - start)
        finally:
            pipeline.stop()
        stats.epoch_s = time.perf_counter() - start
        self.result.evals.append(stats)

    def finish(self) -> ReaderResult:
        """The result; the readers end here (their CPU is as they reported it during the passes)."""
        result = self.result
        own = time.process_time() - self._cpu_at_start
        self.readers.close()
        result.cpu_s = own + self.readers.children_cpu_s() - self._children_cpu_at_start
        # the measured window's requests: those a step after the warm-up one consumed, each once
        result.requests = [r for r in self.requests if r.step >= 2]
        return result


def run_reader(
    store: ObjectStore,
    files: Sequence[FileSpec],
    workload: StorageWorkloadConfig,
    client: int = 0,
    start_gate: Optional[Callable[[], Any]] = None,
    *,
    run: int = 0,
    eval_files: Sequence[FileSpec] = (),
    periodic: Optional[Periodic] = None,
    heartbeat: Optional[Callable[[], None]] = None,
    deadline: Optional[float] = None,
    window_s: Optional[float] = None,
) -> ReaderResult:
    """The emulated training loop of one accelerator over `files` (its shard of the dataset).
    `start_gate` (a barrier's wait) lines the clients up so their measured windows overlap; `deadline`
    (a time.perf_counter() value) ends the read early, after the step that passes it; `window_s`
    does the same `window_s` seconds after the readers started (the doctor's budget: a deadline
    set before a slow fork could pass before the first read, issue 29)."""
    periodic = periodic if workload.checkpoint_every_steps else None
    readers = open_readers(store, files, eval_files, workload, client, run)
    if window_s is not None:
        ends = time.perf_counter() + window_s
        deadline = ends if deadline is None else min(deadline, ends)
    loop = _Loop(readers, workload, client, periodic, heartbeat or (lambda: None), deadline)
    loop.result.readers = "processes" if isinstance(readers, ReaderProcesses) else "threads"
    try:
        if start_gate is not None:  # after the readers started: a fork is in no one's window
            start_gate()
        for epoch in range(1, workload.epochs + 1):
            going = loop.epoch(epoch)
            if eval_files and epoch % workload.eval_every_epochs == 0:
                loop.evaluate(epoch)
            if not going:
                break
    finally:
        result = loop.finish()
    return result


# ---- The order an epoch reads in: `storage.workload.shuffle` none | file | sample, seeded.
#
# - none: files in order, each file's samples in order;
# - file: the file order shuffled (seeded per client and epoch, or per client only with
#   seed_change_epoch=false);
# - sample: the file order shuffled, then the stream of samples passed through a shuffle buffer
#   of `shuffle_buffer` samples, as tf.data's shuffle does (fill the buffer, then emit a random
#   element and put the next one in its place; drain in random order at the end). A buffer as
#   large as the epoch (null) is a full permutation.
#
# With read_mode=sample the samples are read in that order (one seek and read each); with
# whole-file reads the files are read whole in the file order, and the sample order only decides
# which samples form a batch (no I/O of its own).
# The run index (storage.runs) changes the seed too: MLPerf wants a new seed every run.
T = TypeVar("T")


def _rng(workload: StorageWorkloadConfig, client: int, epoch: int, run: int, what: str) -> random.Random:
    epoch_part = epoch if workload.seed_change_epoch else 1
    run_part = f"-run{run}" if run else ""  # run 0 keeps the seeds runs had before storage.runs existed
    return random.Random(f"{workload.seed}-{client}-{epoch_part}{run_part}{what}")


def file_order(
    files: Sequence[FileSpec], workload: StorageWorkloadConfig, client: int, epoch: int, run: int = 0
) -> List[FileSpec]:
    order = list(files)
    if workload.shuffle_mode != Shuffle.none:
        _rng(workload, client, epoch, run, "").shuffle(order)
    return order


def buffered_shuffle(items: Iterable[T], buffer_size: Optional[int], rng: random.Random) -> Iterator[T]:
    """tf.data's shuffle(buffer_size): every item exactly once, each at most buffer_size - 1
    places earlier than it came in. None: a full permutation (a buffer that holds them all, shuffled)."""
    buffer: List[T] = []
    for item in items:
        if buffer_size is None or len(buffer) < buffer_size:
            buffer.append(item)
            continue
        pick = rng.randrange(buffer_size)
        yield buffer[pick]
        buffer[pick] = item
    rng.shuffle(buffer)
    yield from buffer


def sample_order(
    files: Sequence[FileSpec], workload: StorageWorkloadConfig, client: int, epoch: int, run: int = 0
) -> List[Tuple[FileSpec, int]]:
    """(file, sample index) in the order an epoch reads them one by one."""
    stream = (
        (spec, index) for spec in file_order(files, workload, client, epoch, run) for index in range(spec.samples)
    )
    if workload.shuffle_mode != Shuffle.sample:
        return list(stream)
    return list(buffered_shuffle(stream, workload.shuffle_buffer, _rng(workload, client, epoch, run, "-samples")))
