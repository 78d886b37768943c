"""The simulated accelerators: one accelerator's whole job, and storage.accelerators=N of them as
processes on one host.

One accelerator's job (`run_client`): its share of the read phase (with periodic checkpoints and
evaluation passes), then its part of the checkpoint phase. The same function runs in this process
(one accelerator), in a spawned accelerator process (N on one host) or in a torch.distributed rank
(several hosts, bench.iobench.session); only `sync` (a barrier across the clients, or nothing) and
where the result goes differ.

N on one host (`run_accelerators`): accelerator i reads files i, i+N, i+2N, ... (disjoint shards).
With N > 1 each one is a fresh spawned process (no forked threads or MLflow state) that opens its
own store; a barrier starts their measured loops together, another lines up their checkpoint
writes and reads. One that fails or dies fails the phase, with its reason, within a bounded time.
"""

from __future__ import annotations

import logging
import multiprocessing
import queue as queue_module
import signal
import socket
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

from bench.config.storage import CheckpointWriters, StorageConfig
from bench.errors import BenchError
from bench.iobench.checkpoint import CHECKPOINT_DIR, Checkpointer, Sync, run_checkpoints
from bench.iobench.formats.base import FileSpec
from bench.iobench.reader import run_reader
from bench.iobench.result import ReaderResult
from bench.machine.children import STOP_SIGNALS, stop_signals
from bench.storage.base import Backend, backend

log = logging.getLogger(__name__)

START_TIMEOUT_S = 120.0  # spawning and importing an accelerator process


@dataclass
class ClientJob:
    """What one simulated accelerator does (picklable: sent to a spawned process)."""

    location: str  # the dataset: a local directory or s3://bucket/prefix
    out_dir: str  # the run's directory (checkpoints go under storage.root, or there)
    client: int
    clients: int
    files: List[FileSpec] = field(default_factory=list)  # its shard
    eval_files: List[FileSpec] = field(default_factory=list)
    run: int = 0
    node: int = 0


def _checkpointer(storage: StorageConfig, job: ClientJob, where: Backend) -> Optional[Checkpointer]:
    """Client 0's checkpointer (checkpoint_writers=one), or every client's, each writing its share (all)."""
    workload = storage.workload
    writers = job.clients if workload.checkpoint_writers == CheckpointWriters.all else 1
    if not workload.checkpoint_size_mb or job.client >= writers:
        return None
    store = where.checkpoint_store(Path(job.out_dir), CHECKPOINT_DIR)
    share = workload.checkpoint_size_mb / writers
    return Checkpointer(store, storage.checkpoint_name, share, job.client, writers, workload.checkpoint_keep)


def run_client(
    storage: StorageConfig,
    job: ClientJob,
    sync: Sync = lambda: None,
    start_gate: Optional[Sync] = None,
    heartbeat: Optional[Callable[[], None]] = None,
) -> ReaderResult:
    """`start_gate` waits until every client is ready to read (bench.iobench.reader.run_reader);
    `sync` lines the clients' checkpoint writes and reads up (bench.iobench.checkpoint)."""
    workload = storage.workload
    where = backend(storage)
    checkpointer = _checkpointer(storage, job, where)
    try:
        if workload.checkpoint_only:
            result = ReaderResult(job.client, [], host=socket.gethostname())
        else:
            result = run_reader(
                where.open(job.location),
                job.files,
                workload,
                job.client,
                start_gate,
                run=job.run,
                eval_files=job.eval_files,
                periodic=checkpointer.periodic if checkpointer is not None else None,
                heartbeat=heartbeat,
            )
        if workload.checkpoint_size_mb:
            result.checkpoint_cache_drop, result.checkpoint_error = run_checkpoints(
                checkpointer, workload.checkpoint_count, sync, heartbeat or (lambda: None)
            )
        if checkpointer is not None:
            result.checkpoints = [{k: v for k, v in r.items() if k != "key"} for r in checkpointer.records]
    finally:  # also after a failure: a checkpoint left behind is only litter
        if checkpointer is not None and not checkpointer.keep:
            try:
                checkpointer.remove_written()
            except Exception as exc:
                log.warning("could not delete the benchmark's checkpoints at %s: %s", checkpointer.store.url, exc)
    result.run, result.node = job.run, job.node
    return result


class AcceleratorFailed(BenchError):
    """A simulated accelerator raised or died; names which one and why."""


def run_accelerators(storage: StorageConfig, jobs: List[ClientJob]) -> List[ReaderResult]:
    count = len(jobs)
    if count == 1:
        return [run_client(storage, jobs[0])]
    context = multiprocessing.get_context("spawn")
    gate = context.Barrier(count, timeout=START_TIMEOUT_S)
    checkpoint_gate = context.Barrier(count)  # no timeout: writers wait for the slowest (a dead one fails the run)
    results = context.Queue()
    processes = [
        context.Process(
            target=_accelerator_main,
            name=f"bench-accelerator-{i}",
            daemon=True,
            args=(storage, job, gate, checkpoint_gate, results),
        )
        for i, job in enumerate(jobs)
    ]
    try:
        # inside the try: a signal held during the starts is handed on at the end of _start_all, and
        # the children must still be ended and joined then. Left alone, this process went on to exit
        # and its barriers' semaphores were unlinked under a child still unpickling them
        # (FileNotFoundError in SemLock._rebuild, a traceback on stderr)
        _start_all(processes)
        return _collect(processes, results, count)
    finally:
        started = [process for process in processes if process.pid is not None]
        for process in started:
            if process.is_alive():
                process.terminate()  # held by a child until its start-up data is read: no half pickle
        for process in started:
            process.join(timeout=10)
            if process.is_alive():
                process.kill()
                process.join(timeout=10)


def _start_all(processes: List[Any]) -> None:
    """Start every process with Ctrl-C and SIGTERM held: a signal handled while a child's start-up
    data is half written leaves that child reading half a pickle (EOFError, a traceback on
    stderr). Held twice over: at the C level (the children inherit the block and lift it in
    _accelerator_main) and at the Python level, for a signal that arrived just before the block
    and whose handler would otherwise run at any point inside start()."""
    held: List[int] = []
    in_main_thread = threading.current_thread() is threading.main_thread()  # elsewhere: no Python handlers (bench.api)
    handlers = {
        signum: signal.signal(signum, lambda number, _frame: held.append(number))
        for signum in (STOP_SIGNALS if in_main_thread else ())
    }
    with stop_signals(signal.SIG_BLOCK):  # at its end a signal blocked meanwhile reaches its own handler
        try:
            for process in processes:
                process.start()
        finally:
            for signum, handler in handlers.items():
                signal.signal(signum, handler)
    if held:  # one whose handler ran while held: hand it on as if it came now
        handler = handlers[signal.Signals(held[0])]
        if callable(handler):
            handler(held[0], None)
        else:
            signal.raise_signal(held[0])


def _collect(processes: List[Any], results: Any, count: int) -> List[ReaderResult]:
    collected: Dict[int, ReaderResult] = {}
    while len(collected) < count:
        try:
            index, ok, payload = results.get(timeout=1.0)
        except queue_module.Empty:
            if dead := [p for i, p in enumerate(processes) if i not in collected and not p.is_alive()]:
                time.sleep(0.5)  # its last message may still be in the pipe
                if results.empty():
                    raise AcceleratorFailed(
                        f"simulated accelerator {dead[0].name} exited with code {dead[0].exitcode} before reporting"
                    ) from None
            continue
        if not ok:
            raise AcceleratorFailed(f"simulated accelerator {index} failed: {payload}")
        collected[index] = payload
    return [collected[i] for i in range(count)]


def _accelerator_main(storage: StorageConfig, job: ClientJob, gate: Any, checkpoint_gate: Any, results: Any) -> None:
    # The parent decides when to stop (it terminates its accelerators): Ctrl-C, which reaches the
    # whole process group, is not for them. SIGTERM keeps its default: a quiet exit.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
    try:
        results.put((job.client, True, run_client(storage, job, sync=checkpoint_gate.wait, start_gate=gate.wait)))
    except BaseException as exc:
        results.put((job.client, False, f"{type(exc).__name__}: {exc}"))  # first, so the parent sees the cause
        gate.abort()  # then release the others from the barriers
        checkpoint_gate.abort()
