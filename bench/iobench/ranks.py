"""The storage benchmark across hosts: every simulated accelerator is a torch.distributed rank
(gloo, no GPU), started by torchrun / srun / Kubernetes (RANK, WORLD_SIZE, LOCAL_RANK set) or by
bench's own launcher (distributed=ddp, nproc_per_node clients per host x nnodes hosts).

Rank 0 holds the dataset folder for the run (every rank is refused when another run does) and
decides whether the dataset is reused; if not, every rank writes its 1/N of the files
and rank 0 writes the manifest. Every rank then reads its shard (barriers line up the start of
the read phase and the checkpoint writes and reads), and rank 0 gathers every client's results
(every request, for percentiles over all of them; every epoch, for AU per client) and reports.
The dataset location and the run directory are rank 0's, so with several hosts storage.root
must be a file system they all see (or S3).
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Any, List, Optional

from bench.config import BenchConfig
from bench.iobench.accelerators import run_client
from bench.iobench.measured import ReaderResult
from bench.iobench.prepare import DatasetMissing, Prepared, finish, planned, reusable, write_files
from bench.iobench.report import StorageReport
from bench.iobench.session import Clients, drop_dataset_cache, run_storage
from bench.rank_context import RankContext
from bench.storage.base import ObjectStore
from bench.storage.writer_lock import FolderBusy

log = logging.getLogger(__name__)


def hosts_and_node(ctx: RankContext) -> tuple:
    """(hosts in the run, this rank's host index), from what torch's elastic agent exports."""
    local = int(os.environ.get("LOCAL_WORLD_SIZE") or ctx.world_size)
    hosts = int(os.environ.get("GROUP_WORLD_SIZE") or max(1, ctx.world_size // max(1, local)))
    return hosts, int(os.environ.get("GROUP_RANK") or ctx.rank // max(1, local))


def _broadcast(value: Any) -> Any:
    import torch.distributed as dist

    box = [value]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def _gather(value: Any) -> List[Any]:
    import torch.distributed as dist

    gathered: List[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, value)
    return gathered


def _barrier() -> None:
    """Every rank here: torch.distributed's barrier (what lines the clients up)."""
    import torch.distributed as dist

    dist.barrier()


class Ranks(Clients):
    """Every rank one simulated accelerator; the dataset's location and the run directory are rank 0's."""

    def __init__(self, config: BenchConfig, ctx: RankContext, out_dir: Path, heartbeat: Any = None):
        super().__init__(config, out_dir)
        self.ctx, self.heartbeat, self.reporter = ctx, heartbeat, ctx.rank == 0
        self.count = ctx.world_size
        self.hosts, self.node = hosts_and_node(ctx)
        self.location, self.run_dir = _broadcast((self.location, self.run_dir))

    def prepare(self, store: ObjectStore) -> Prepared:
        """The dataset, reused (rank 0 checks) or written 1/N by every rank."""
        storage, workload, ctx = self.storage, self.storage.workload, self.ctx
        decision: Any = None
        if ctx.rank == 0:
            try:
                self.lock = self.hold(store)  # the dataset folder, for every rank of the run
                decision = reusable(store, workload, storage.prepare)  # (the dataset or None, why)
            except (DatasetMissing, FolderBusy) as exc:
                decision = exc  # raised on every rank
        decision = _broadcast(decision)
        if isinstance(decision, Exception):
            raise decision
        prepared, why = decision
        if prepared is not None:
            return prepared
        specs = planned(workload)[ctx.rank :: ctx.world_size]
        log.info("prepare: rank %d writes %d of the dataset's files to %s", ctx.rank, len(specs), store.url)
        start = time.perf_counter()
        written, latencies = write_files(store, workload, specs, storage.prepare_workers)
        shares = _gather((written, latencies, time.perf_counter() - start))
        if ctx.rank == 0:
            every_file = [f for share in shares for f in share[0]]
            every_latency = [ms for share in shares for ms in share[1]]
            prepared = finish(store, workload, every_file, max(s[2] for s in shares), why, every_latency)
            prepared.written_by_client = [len(share[0]) for share in shares]
        return _broadcast(prepared)

    def run(self, prepared: Prepared, run: int) -> Optional[List[ReaderResult]]:
        job = self.job(prepared, self.ctx.rank, run)
        result = run_client(self.storage, job, sync=_barrier, start_gate=_barrier, heartbeat=self.heartbeat)
        gathered = _gather(result)
        return gathered if self.reporter else None

    def drop(self, store: ObjectStore, prepared: Prepared, run: int) -> None:
        mine = self.job(prepared, self.ctx.rank, run)
        drop_dataset_cache(store, [f.key for f in mine.files + mine.eval_files], run)
        _barrier()


def run_as_rank(config: BenchConfig, ctx: RankContext, out_dir: Path, heartbeat: Any = None) -> Optional[StorageReport]:
    import torch

    from bench.launch.process_group import destroy_process_group, init_process_group

    init_process_group(config.distributed, ctx, torch.device("cpu"))
    try:
        return run_storage(config, Ranks(config, ctx, out_dir, heartbeat))
    finally:
        destroy_process_group()
