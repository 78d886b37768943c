"""The storage benchmark (mode=storage): MLPerf-Storage-style emulation of training I/O.

Phases, each in its own module: prepare (write the dataset, or reuse it), read (simulated
accelerators: reader threads + emulated compute, one process each), checkpoint (torch.save
to the store and back). No model runs and no GPU is needed: the accelerators are emulated.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Callable, Dict, Optional

from bench.config import BenchConfig
from bench.iobench.report import StorageReport

log = logging.getLogger(__name__)

CHECKPOINT_DIR = "iobench-checkpoints"


class StorageScenario:
    has_ranks = False  # runs in the calling process; its accelerators are processes of its own
    preload = ()
    report_class = StorageReport

    def preflight(self, config: BenchConfig) -> None:
        """The files fit in memory (each is read whole, several at a time); the store itself is
        checked when it is opened (one LIST)."""
        import psutil

        from bench.errors import ConfigError
        from bench.iobench.reader import files_in_flight

        workload = config.storage.workload
        file_bytes = workload.samples_per_file * (workload.record_size + 3 * workload.record_size_stdev)
        held = file_bytes * files_in_flight(workload) * config.storage.accelerators
        ram = psutil.virtual_memory().total
        if held > ram:
            raise ConfigError("storage.workload.record_size", workload.record_size,
                              f"records whose files fit in memory: each file is read whole, {files_in_flight(workload)} "
                              f"at a time per simulated accelerator, {held / 2**30:.1f} GiB in all, and this machine "
                              f"has {ram / 2**30:.1f} GiB (lower record_size, samples_per_file, read_threads or prefetch)")

    def run_name(self, config: BenchConfig) -> str:
        storage = config.storage
        return f"storage-{storage.workload.name}-{storage.name}-c{storage.accelerators}"

    def run_rank(self, config: BenchConfig, ctx: Any, out_dir: Path,
                 heartbeat: Optional[Callable[[], None]] = None) -> StorageReport:
        """Prepare, read and checkpoint phases."""
        from bench.iobench.accelerators import run_accelerators
        from bench.iobench.prepare import prepare_dataset, prepare_summary
        from bench.iobench.report import caching_metrics, read_metrics
        from bench.storage.registry import backend

        storage, workload = config.storage, config.storage.workload
        where = backend(storage)
        dataset = where.location(out_dir, storage.dataset_dir)
        store = where.open(dataset)  # S3: one LIST, so a bad bucket/endpoint/credential fails here
        prepared = prepare_dataset(store, workload, storage.prepare, storage.prepare_workers)
        log.info("read: %d files, %d simulated accelerators x %d reader threads, batch %d, computation_time %gs",
                 len(prepared.files), storage.accelerators, workload.read_threads, workload.batch_size,
                 workload.computation_time)
        results = run_accelerators(dataset, storage, prepared.files)
        metrics: Dict[str, Any] = {
            "mode": "storage", "workload": workload.name, "storage": str(storage.name),
            "storage_client": where.describe(store), "storage_url": store.url, "clients": storage.accelerators,
            "accelerators": storage.accelerators, "format": str(workload.format), "num_files": len(prepared.files),
            "samples_per_file": workload.samples_per_file, "record_size": workload.record_size,
            "batch_size": workload.batch_size, "read_threads": workload.read_threads, "prefetch": workload.prefetch,
            "computation_time": workload.computation_time, "epochs": workload.epochs,
            **prepare_summary(prepared), **read_metrics(results, storage), **caching_metrics(prepared.total_bytes),
        }
        if workload.checkpoint_size_mb > 0:
            try:
                metrics.update(self._checkpoint_phase(config, out_dir))
            except Exception as exc:  # noqa: BLE001 - a full disk: the read phase's figures still stand
                metrics["checkpoint_error"] = f"{type(exc).__name__}: {getattr(exc, 'strerror', None) or exc}"
        return StorageReport(results, metrics, {"reason": prepared.reason, "files": len(prepared.files)})

    def _checkpoint_phase(self, config: BenchConfig, out_dir: Path) -> Dict[str, Any]:
        from bench.iobench.checkpoint import run_checkpoint
        from bench.storage.registry import backend

        store = backend(config.storage).checkpoint_store(out_dir, CHECKPOINT_DIR)
        log.info("checkpoint: %.1f MB to %s", config.storage.workload.checkpoint_size_mb, store.url)
        return run_checkpoint(store, config.storage.checkpoint_name, config.storage.workload.checkpoint_size_mb)

    def report(self, outcome: StorageReport, config: BenchConfig) -> StorageReport:
        return outcome

    def explain(self, exc: BaseException, config: BenchConfig) -> Optional[str]:
        return None
