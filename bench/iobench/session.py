"""One storage benchmark, whoever runs its clients: the runs (warm-up, then measured), the cache
dropped between them, and the report built from every client's results.

`run_clients(run)` runs one read (+ checkpoint) phase on every client and returns their results:
spawned processes on one host (bench.iobench.accelerators), or torch.distributed ranks gathered
on rank 0 (bench.iobench.ranks, which returns them on rank 0 only).
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Dict, List, Optional, Sequence

from bench.config import BenchConfig
from bench.iobench.checkpoint import drop_cache
from bench.iobench.checkpoint_figures import add_checkpoint_figures
from bench.iobench.client import ClientJob, shard
from bench.iobench.figures import client_rows, read_figures
from bench.iobench.measured import ReaderResult
from bench.iobench.prepare import Prepared, prepare_figures
from bench.iobench.qualify import qualification
from bench.iobench.report import StorageReport, caching_figures
from bench.iobench.result import RunFigures, StorageMetrics
from bench.iobench.runs import merge_runs, run_rows
from bench.results import FitFigures
from bench.storage.base import ObjectStore

log = logging.getLogger(__name__)


def jobs_for(
    config: BenchConfig,
    prepared: Prepared,
    location: str,
    out_dir: str,
    clients: int,
    run: int,
    only: Optional[int] = None,
    node: int = 0,
) -> List[ClientJob]:
    """Every client's job for one run (or client `only`'s)."""
    wanted = range(clients) if only is None else [only]
    return [
        ClientJob(
            location,
            out_dir,
            i,
            clients,
            [f.to_dict() for f in shard(prepared.files, i, clients)],
            [f.to_dict() for f in shard(prepared.eval_files, i, clients)],
            run,
            node,
        )
        for i in wanted
    ]


def drop_dataset_cache(store: ObjectStore, keys: Sequence[str], run: int) -> None:
    how = drop_cache(store, list(keys))
    log.info("run %d: page cache of %d dataset files dropped: %s", run, len(keys), how)


def measure(
    config: BenchConfig, run_clients: Callable[[int], Optional[List[ReaderResult]]], drop: Callable[[int], None]
) -> tuple:
    """(per-run figures, every measured result, the fit-to-measure verdict's fields) of warmup_runs +
    runs runs; ([], [], {}) off rank 0. The machine is watched (bench.machine.fitness) from the first
    measured run's start to the last one's end: this process and its accelerator and reader
    processes are the run's own; any other process's CPU in that time makes the runs unfit."""
    from bench.machine.fitness import MachineWatch

    storage = config.storage
    per_run: List[RunFigures] = []
    measured: List[ReaderResult] = []
    total = storage.warmup_runs + storage.runs
    watch: Optional[MachineWatch] = None
    try:
        for run in range(total):
            if run:
                drop(run)
            if total > 1:
                log.info("run %d of %d (%s)", run + 1, total, "warm-up" if run < storage.warmup_runs else "measured")
            if run == storage.warmup_runs:
                watch = MachineWatch().start()
            results = run_clients(run)
            if results is None or run < storage.warmup_runs:
                continue
            figures = RunFigures() if storage.workload.checkpoint_only else read_figures(results, storage)
            per_run.append(add_checkpoint_figures(figures, results))
            measured.extend(results)
    finally:  # the watch's sampling thread ends with the runs, however they end
        fit = watch.stop().as_dict() if watch is not None else {}
    return per_run, measured, fit if measured else {}


def build_report(
    config: BenchConfig,
    prepared: Prepared,
    store_url: str,
    client_name: str,
    per_run: List[RunFigures],
    results: List[ReaderResult],
    clients: int,
    hosts: int,
    fit: Optional[Dict[str, Any]] = None,
) -> StorageReport:
    storage, workload = config.storage, config.storage.workload
    record = StorageMetrics(
        workload=workload.name,
        storage=storage.name,
        storage_client=client_name,
        storage_url=store_url,
        clients=clients,
        accelerators=clients,
        hosts=hosts,
        format=workload.format,
        verify_records=workload.verify_records,
        read_mode=str(workload.read_mode),
        shuffle=str(workload.shuffle),
        num_files=len(prepared.files),
        samples_per_file=workload.samples_per_file,
        record_size=workload.record_size,
        batch_size=workload.batch_size,
        read_threads=workload.read_threads,
        readers=next((r.readers for r in results if r.readers), "none"),
        prefetch=workload.prefetch,
        computation_time=workload.computation_time,
        epochs=workload.epochs,
        runs=storage.runs,
        warmup_runs=storage.warmup_runs,
        prepare=prepare_figures(prepared),
        figures=merge_runs(per_run, results),
        caching=caching_figures(prepared.total_bytes, hosts),
        fit=FitFigures.of(fit or {}),
    )
    record.mlperf_qualifies, record.mlperf_min_num_files, record.mlperf_not_qualified_because = qualification(
        record.figures, storage, clients, hosts
    )
    prepare = {"reason": prepared.reason, "files": len(prepared.files), "eval_files": len(prepared.eval_files)}
    if prepared.written_by_client:
        prepare["written_by_client"] = prepared.written_by_client
    return StorageReport(
        results, record, prepare, run_rows(per_run) if len(per_run) > 1 else [], client_rows(results, workload)
    )
