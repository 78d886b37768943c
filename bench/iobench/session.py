"""One storage benchmark, whoever runs its clients: the dataset prepared, the runs (warm-up, then
measured) with the cache dropped between them, the runs' figures merged, and the report built from
every client's results.

The clients are this host's simulated accelerators (`Clients`: spawned processes,
bench.iobench.accelerators) or torch.distributed ranks (bench.iobench.session.Ranks, which gathers
their results on rank 0 and reports there only).

storage.runs / storage.warmup_runs are MLPerf's harness around the read phase. Warm-up runs are run
and dropped; the measured runs' figures are merged: rates and percents are the mean over runs
(MLPerf: "A benchmark result is the mean of 5 run results"), counts add up, minima and maxima stay
minima and maxima, latency percentiles are taken again over every request of every run, pass flags
are decided again on the merged figures; the spread of samples/s over the runs is reported beside
them. Each run draws a new shuffle seed, and the page cache is dropped for the dataset's files
between runs where the store allows it.

One run at a time per local dataset folder (issue 39.4): a run holds the folder's
`.bench-dataset.lock` (bench.storage.writer_lock) from before its prepare to the end of its last
read, so no other run rewrites the dataset under its read window; a second run is refused in one
line naming the first. A run is all its clients, on every host: the reporting one holds the lock.

The storage benchmark across hosts: every simulated accelerator is a torch.distributed rank
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
from dataclasses import fields, replace
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

import psutil

from bench.config import BenchConfig
from bench.config.storage import StorageWorkloadConfig
from bench.iobench.accelerators import ClientJob, run_accelerators, run_client
from bench.iobench.checkpoint import add_checkpoint_figures, drop_cache
from bench.iobench.figures import client_rows, qualification, read_figures
from bench.iobench.prepare import (
    DatasetMissing,
    Prepared,
    finish,
    planned,
    prepare_dataset,
    prepare_figures,
    reusable,
    write_files,
)
from bench.iobench.reader import uses_processes
from bench.iobench.report import StorageReport
from bench.iobench.result import CachingFigures, ReaderResult, RunFigures, StorageMetrics
from bench.launch.process_group import all_gather, destroy_process_group, init_process_group
from bench.maths.stats import mean, percentile
from bench.rank_context import RankContext
from bench.results import FitFigures
from bench.storage.base import ObjectStore, backend
from bench.storage.writer_lock import FolderBusy, WriterLock, hold

log = logging.getLogger(__name__)

# MLPerf Storage asks for a dataset of at least 5x the hosts' RAM so the page cache cannot hold it.
CACHE_SAFE_RAM_MULTIPLE = 5
SUMMED = ("read_samples", "read_bytes", "read_requests", "read_steps")
LATENCY = {"latency_ms_p50": 50, "latency_ms_p90": 90, "latency_ms_p99": 99}
# runs.csv: the headline figures of each measured run
RUN_COLUMNS = (
    "mlperf_samples_per_second",
    "mlperf_mib_per_second",
    "mlperf_au_percent",
    "samples_per_second",
    "read_mb_per_second",
    "au_percent_min",
    "latency_ms_p99",
    "checkpoint_store_write_gbps",
    "checkpoint_store_read_gbps",
)
# the settings the record repeats as the workload has them: the fields the two share, but for those it has as run
WORKLOAD_SETTINGS = {f.name for f in fields(StorageMetrics)} & {f.name for f in fields(StorageWorkloadConfig)}
WORKLOAD_SETTINGS -= {"read_mode", "shuffle", "num_files", "readers"}


class Clients:
    """storage.accelerators simulated accelerators on this host, each a process of this run (one:
    this process); accelerator i reads files i, i+N, i+2N, ... of the dataset."""

    reporter = True  # this process builds the report
    lock = WriterLock()  # prepare(): the dataset folder, this run's until run_storage ends
    node = 0  # this host's index among the run's hosts

    def __init__(self, config: BenchConfig, out_dir: Path):
        self.storage = config.storage
        self.count, self.hosts = config.storage.accelerators, 1
        self.where = backend(self.storage)
        self.location = self.where.location(out_dir, self.storage.dataset_dir)
        self.run_dir = str(out_dir)  # the checkpoints go under storage.root, or here

    def hold(self, store: ObjectStore) -> WriterLock:
        """This run as the dataset folder's one user, or FolderBusy naming the run that is. An S3
        prefix is not held: its owner object's PUT fails on some clients' and servers' pairings."""
        if getattr(store, "root", None) is None:
            return WriterLock()
        hint = "wait for it to end, or give this run another storage.root"
        return hold(store, Path(self.run_dir), hint, ".bench-dataset.lock", "dataset folder")

    def prepare(self, store: ObjectStore) -> Prepared:
        storage, self.lock = self.storage, self.hold(store)
        return prepare_dataset(store, storage.workload, storage.prepare, storage.prepare_workers)

    def job(self, prepared: Prepared, client: int, run: int) -> ClientJob:
        """What client `client` does in run `run`: its shard of the files and of the eval files."""
        shard = slice(client, None, self.count)  # client i reads files i, i+N, i+2N, ... (disjoint shards)
        files, eval_files = prepared.files[shard], prepared.eval_files[shard]
        return ClientJob(self.location, self.run_dir, client, self.count, files, eval_files, run, self.node)

    def run(self, prepared: Prepared, run: int) -> Optional[List[ReaderResult]]:
        """One read (+ checkpoint) phase on every client: their results (None where this process
        does not report)."""
        return run_accelerators(self.storage, [self.job(prepared, i, run) for i in range(self.count)])

    def drop(self, store: ObjectStore, prepared: Prepared, run: int) -> None:
        keys = [f.key for f in prepared.files + prepared.eval_files]
        log.info("run %d: page cache of %d dataset files dropped: %s", run, len(keys), drop_cache(store, keys))


def run_storage(clients: Clients) -> Optional[StorageReport]:
    """Prepare, read and checkpoint phases, runs times; the report where `clients` report."""
    workload = clients.storage.workload
    store = clients.where.open(clients.location)  # S3: one LIST, so a bad bucket/endpoint/credential fails here
    try:
        prepared = (
            Prepared([], skipped=True, reason="storage.workload.checkpoint_only: no dataset")
            if workload.checkpoint_only
            else clients.prepare(store)
        )
        if clients.reporter:
            log.info(
                "read: %d files, %d simulated accelerators on %d host(s) x %d reader %s, batch %d, "
                "computation_time %gs",
                len(prepared.files),
                clients.count,
                clients.hosts,
                workload.read_threads,
                "processes" if uses_processes(store, prepared.files, workload) else "threads",
                workload.batch_size,
                workload.computation_time,
            )
        measured = measure(clients, store, prepared)
        return build_report(clients, store, prepared, measured) if clients.reporter else None
    finally:
        clients.lock.release()  # the dataset folder, held since the prepare, however the run ends


def measure(clients: Clients, store: ObjectStore, prepared: Prepared) -> tuple:
    """(per-run figures, every measured result, the fit-to-measure verdict's fields) of warmup_runs +
    runs runs; ([], [], {}) where `clients` do not report. The machine is watched (bench.machine.fitness)
    from the first measured run's start to the last one's end: this process and its accelerator and
    reader processes are the run's own; any other process's CPU in that time makes the runs unfit."""
    from bench.machine.fitness import MachineWatch

    storage = clients.storage
    per_run: List[RunFigures] = []
    measured: List[ReaderResult] = []
    total = storage.warmup_runs + storage.runs
    watch: Optional[MachineWatch] = None
    try:
        for run in range(total):
            if run:
                clients.drop(store, prepared, run)
            if total > 1:
                log.info("run %d of %d (%s)", run + 1, total, "warm-up" if run < storage.warmup_runs else "measured")
            if run == storage.warmup_runs:
                watch = MachineWatch().start()
            if (results := clients.run(prepared, run)) is None or run < storage.warmup_runs:
                continue
            figures = RunFigures() if storage.workload.checkpoint_only else read_figures(results, storage)
            per_run.append(add_checkpoint_figures(figures, results))
            measured.extend(results)
    finally:  # the watch's sampling thread ends with the runs, however they end
        fit = watch.stop().as_dict() if watch is not None else {}
    return per_run, measured, fit if measured else {}


def _merged(key: str, values: List[Any]) -> Any:
    if key in SUMMED:
        return sum(values)
    if all(v == values[0] for v in values):  # a setting or a count every run shares (checkpoint_count)
        return values[0]
    if key.endswith("_min"):
        return min(values)
    if key.endswith("_max"):
        return max(values)
    return mean(values)


def merge_runs(per_run: Sequence[RunFigures], results: Sequence[ReaderResult]) -> RunFigures:
    """One set of figures from the measured runs' (`per_run`, in order; `results` of all of them):
    each figure the last run has, merged over the runs (field by field, whatever the figure)."""
    if len(per_run) == 1:
        return replace(per_run[0])
    merged = RunFigures()
    for f in fields(RunFigures):
        if (last := getattr(per_run[-1], f.name)) is None:
            continue
        values = [value for m in per_run if (value := getattr(m, f.name)) is not None]
        numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)
        setattr(merged, f.name, _merged(f.name, values) if numbers and len(values) == len(per_run) else last)
    latencies = [q.latency_ms for r in results for q in r.requests]
    for key, q in LATENCY.items():
        if getattr(merged, key) is not None:
            setattr(merged, key, percentile(latencies, q))
    if merged.latency_ms_mean is not None:
        merged.latency_ms_mean = mean(latencies)
    if merged.au_pass is not None:
        merged.au_pass = all(m.au_pass for m in per_run)  # strict: every run's slowest epoch passes
    if merged.mlperf_au_percent is not None and merged.au_threshold_percent is not None:
        merged.mlperf_au_pass = merged.mlperf_au_percent >= merged.au_threshold_percent
    rates = [m.mlperf_samples_per_second for m in per_run if m.mlperf_samples_per_second is not None]
    if len(rates) == len(per_run) and (average := mean(rates)):
        merged.runs_samples_per_second_spread_percent = 100.0 * (max(rates) - min(rates)) / average
    return merged


def run_rows(per_run: Sequence[RunFigures]) -> List[Dict[str, Any]]:
    """runs.csv: the headline figures of each measured run (an empty cell: none)."""
    return [
        {"run": i, **{k: v if (v := getattr(m, k)) is not None else "" for k in RUN_COLUMNS}}
        for i, m in enumerate(per_run)
    ]


def build_report(clients: Clients, store: ObjectStore, prepared: Prepared, measured: tuple) -> StorageReport:
    """The report of measure()'s (per-run figures, every measured result, the fit verdict's fields)."""
    per_run, results, fit = measured
    storage, workload = clients.storage, clients.storage.workload
    ram, dataset_bytes = psutil.virtual_memory().total, sum(f.size for f in prepared.files)
    cached = dataset_bytes < CACHE_SAFE_RAM_MULTIPLE * ram * clients.hosts
    record = StorageMetrics(
        workload=workload.name,
        storage=storage.name,
        storage_client=clients.where.describe(store),
        storage_url=store.url,
        clients=clients.count,
        accelerators=clients.count,
        hosts=clients.hosts,
        read_mode=str(workload.read_mode),
        shuffle=str(workload.shuffle),
        num_files=len(prepared.files),
        readers=next((r.readers for r in results if r.readers), "none"),
        runs=storage.runs,
        warmup_runs=storage.warmup_runs,
        prepare=prepare_figures(prepared),
        figures=merge_runs(per_run, results),
        caching=CachingFigures(dataset_bytes=dataset_bytes, client_ram_bytes=ram, potential_caching=cached),
        fit=FitFigures.of(fit),
        **{key: getattr(workload, key) for key in WORKLOAD_SETTINGS},
    )
    record.mlperf_qualifies, record.mlperf_min_num_files, record.mlperf_not_qualified_because = qualification(
        record.figures, storage, clients.count, clients.hosts
    )
    prepare = {"reason": prepared.reason, "files": len(prepared.files), "eval_files": len(prepared.eval_files)}
    if prepared.written_by_client:
        prepare["written_by_client"] = prepared.written_by_client
    return StorageReport(
        results, record, prepare, run_rows(per_run) if len(per_run) > 1 else [], client_rows(results, workload)
    )


def _broadcast(value: Any) -> Any:
    import torch.distributed as dist

    box = [value]
    dist.broadcast_object_list(box, src=0)
    return box[0]


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
        # the hosts in the run and this rank's host index, from what torch's elastic agent exports
        local = int(os.environ.get("LOCAL_WORLD_SIZE") or ctx.world_size)
        self.hosts = int(os.environ.get("GROUP_WORLD_SIZE") or max(1, ctx.world_size // max(1, local)))
        self.node = int(os.environ.get("GROUP_RANK") or ctx.rank // max(1, local))
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
        shares = all_gather((written, latencies, time.perf_counter() - start), ctx)
        if ctx.rank == 0:
            every_file = [f for share in shares for f in share[0]]
            every_latency = [ms for share in shares for ms in share[1]]
            prepared = finish(store, workload, every_file, max(s[2] for s in shares), why, every_latency)
            prepared.written_by_client = [len(share[0]) for share in shares]
        return _broadcast(prepared)

    def run(self, prepared: Prepared, run: int) -> Optional[List[ReaderResult]]:
        job = self.job(prepared, self.ctx.rank, run)
        mine = run_client(self.storage, job, sync=_barrier, start_gate=_barrier, heartbeat=self.heartbeat)
        gathered = all_gather(mine, self.ctx)  # every rank's, on every rank: the call is collective
        return gathered if self.reporter else None

    def drop(self, store: ObjectStore, prepared: Prepared, run: int) -> None:
        mine = self.job(prepared, self.ctx.rank, run)  # this rank's shard
        super().drop(store, replace(prepared, files=mine.files, eval_files=mine.eval_files), run)
        _barrier()


def run_as_rank(config: BenchConfig, ctx: RankContext, out_dir: Path, heartbeat: Any = None) -> Optional[StorageReport]:
    import torch

    init_process_group(config.distributed, ctx, torch.device("cpu"))
    try:
        return run_storage(Ranks(config, ctx, out_dir, heartbeat))
    finally:
        destroy_process_group()
