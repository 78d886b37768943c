"""One simulated accelerator's whole job: its share of the read phase (with periodic
checkpoints and evaluation passes), then its part of the checkpoint phase.

The same function runs in this process (one accelerator), in a spawned accelerator process
(storage.accelerators=N on one host) or in a torch.distributed rank (several hosts); only
`sync` (a barrier across the clients, or nothing) and where the result goes differ.
"""

from __future__ import annotations

import logging
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

from bench.config.storage import CheckpointWriters, StorageConfig
from bench.iobench.checkpoint import CHECKPOINT_DIR, Checkpointer, Sync, run_checkpoints
from bench.iobench.formats.base import FileSpec
from bench.iobench.measured import ReaderResult
from bench.iobench.reader import run_reader
from bench.storage.registry import backend, open_store

__all__ = ["CHECKPOINT_DIR", "ClientJob", "run_client", "shard"]
log = logging.getLogger(__name__)


@dataclass
class ClientJob:
    """What one simulated accelerator does (picklable: sent to a spawned process)."""

    location: str  # the dataset: a local directory or s3://bucket/prefix
    out_dir: str  # the run's directory (checkpoints go under storage.root, or there)
    client: int
    clients: int
    files: List[Dict[str, Any]] = field(default_factory=list)  # its shard, as FileSpec dicts
    eval_files: List[Dict[str, Any]] = field(default_factory=list)
    run: int = 0
    node: int = 0


def shard(files: List[FileSpec], index: int, count: int) -> List[FileSpec]:
    """Client i reads files i, i+N, i+2N, ... (disjoint shards)."""
    return list(files[index::count])


def _checkpointer(storage: StorageConfig, job: ClientJob) -> Optional[Checkpointer]:
    workload = storage.workload
    shared = workload.checkpoint_writers == CheckpointWriters.all
    if not workload.checkpoint_size_mb or (not shared and job.client != 0):
        return None
    store = backend(storage).checkpoint_store(Path(job.out_dir), CHECKPOINT_DIR)
    share = workload.checkpoint_size_mb / job.clients if shared else workload.checkpoint_size_mb
    return Checkpointer(
        store,
        storage.checkpoint_name,
        share,
        job.client,
        shared and job.clients > 1,
        writers=job.clients if shared else 1,
        keep=workload.checkpoint_keep,
    )


def run_client(
    storage: StorageConfig,
    job: ClientJob,
    sync: Sync = lambda: None,
    start_gate: Optional[Any] = None,
    heartbeat: Optional[Callable[[], None]] = None,
) -> ReaderResult:
    checkpointer = _checkpointer(storage, job)
    try:
        return _run(storage, job, checkpointer, sync, start_gate, heartbeat)
    finally:  # also after a failure: a checkpoint left behind is only litter
        if checkpointer is not None and not checkpointer.keep:
            try:
                checkpointer.remove_written()
            except Exception as exc:
                log.warning("could not delete the benchmark's checkpoints at %s: %s", checkpointer.store.url, exc)


def _run(
    storage: StorageConfig,
    job: ClientJob,
    checkpointer: Optional[Checkpointer],
    sync: Sync,
    start_gate: Optional[Any],
    heartbeat: Optional[Callable[[], None]],
) -> ReaderResult:
    workload = storage.workload
    if workload.checkpoint_only:
        result = ReaderResult(job.client, [], host=socket.gethostname())
    else:
        store = open_store(job.location, storage)
        periodic = checkpointer.periodic() if checkpointer is not None else None
        result = run_reader(
            store,
            [FileSpec(**f) for f in job.files],
            workload,
            job.client,
            start_gate,
            run=job.run,
            eval_files=[FileSpec(**f) for f in job.eval_files],
            periodic=periodic,
            heartbeat=heartbeat,
        )
    if workload.checkpoint_size_mb:
        result.checkpoint_cache_drop, result.checkpoint_error = run_checkpoints(
            checkpointer, workload.checkpoint_count, sync, heartbeat or (lambda: None)
        )
    if checkpointer is not None:
        result.checkpoints = [{k: v for k, v in r.items() if k != "key"} for r in checkpointer.records]
    result.run, result.node = job.run, job.node
    return result
