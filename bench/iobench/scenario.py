"""The storage benchmark (mode=storage): MLPerf-Storage-style emulation of training I/O.

Phases, each in its own module: prepare (write the dataset, or reuse it), read (simulated
accelerators: reader threads + emulated compute; processes of this run on one host, or
torch.distributed ranks across hosts), checkpoint (torch.save to the store and back, per
client). No model runs and no GPU is needed: the accelerators are emulated. storage.runs and
storage.warmup_runs repeat the read and checkpoint phases as MLPerf's harness does.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any, Callable, Optional

from bench.config import BenchConfig
from bench.config.distributed import DistributedName
from bench.iobench.reader import uses_processes
from bench.iobench.report import StorageReport
from bench.scenario_base import BaseScenario

log = logging.getLogger(__name__)


def clients_of(config: BenchConfig) -> int:
    """Simulated accelerators: the ranks with distributed=ddp (WORLD_SIZE under torchrun, srun,
    Kubernetes), else storage.accelerators processes on this host."""
    if config.distributed.name == DistributedName.ddp:
        return int(os.environ.get("WORLD_SIZE") or config.distributed.world_size)
    return config.storage.accelerators


class StorageScenario(BaseScenario):
    report_class = StorageReport

    def has_ranks(self, config: BenchConfig) -> bool:
        """With distributed=ddp the simulated accelerators are ranks started by a launcher;
        otherwise this process runs the benchmark and starts accelerator processes of its own."""
        return config.distributed.name == DistributedName.ddp

    def check(self, config: BenchConfig) -> None:
        """mode=storage's config rules (bench.iobench.rules), when the config loads."""
        from bench.iobench.rules import check_storage

        check_storage(config)

    def preflight(self, config: BenchConfig) -> None:
        from bench.iobench.preflight import check_storage_run

        check_storage_run(config, clients_of(config), self.has_ranks(config), _run_dir())

    def run_name(self, config: BenchConfig) -> str:
        storage = config.storage
        return f"storage-{storage.workload.name}-{storage.name}-c{clients_of(config)}"

    def run_rank(
        self, config: BenchConfig, ctx: Any, out_dir: Path, heartbeat: Optional[Callable[[], None]] = None
    ) -> Optional[StorageReport]:
        """Prepare, read and checkpoint phases, runs times."""
        if ctx.distributed:
            from bench.iobench.ranks import run_as_rank

            return run_as_rank(config, ctx, out_dir, heartbeat)
        from bench.iobench.accelerators import run_accelerators
        from bench.iobench.prepare import Prepared, prepare_dataset
        from bench.iobench.session import build_report, drop_dataset_cache, jobs_for, measure
        from bench.storage.registry import backend

        storage, workload = config.storage, config.storage.workload
        where = backend(storage)
        dataset = where.location(out_dir, storage.dataset_dir)
        store = where.open(dataset)  # S3: one LIST, so a bad bucket/endpoint/credential fails here
        prepared = (
            Prepared([], skipped=True, reason="storage.workload.checkpoint_only: no dataset")
            if workload.checkpoint_only
            else prepare_dataset(store, workload, storage.prepare, storage.prepare_workers)
        )
        log.info(
            "read: %d files, %d simulated accelerators x %d reader %s, batch %d, computation_time %gs",
            len(prepared.files),
            storage.accelerators,
            workload.read_threads,
            "processes" if uses_processes(store, prepared.files, workload) else "threads",
            workload.batch_size,
            workload.computation_time,
        )
        keys = [f.key for f in prepared.files + prepared.eval_files]
        per_run, results, fit = measure(
            config,
            lambda run: run_accelerators(
                storage, jobs_for(config, prepared, dataset, str(out_dir), storage.accelerators, run)
            ),
            lambda run: drop_dataset_cache(store, keys, run),
        )
        return build_report(
            config, prepared, store.url, where.describe(store), per_run, results, storage.accelerators, 1, fit
        )

    def report(self, outcome: StorageReport, config: BenchConfig) -> StorageReport:
        return outcome

    def explain(self, exc: BaseException, config: BenchConfig) -> Optional[str]:
        from bench.iobench.freespace import DiskFull

        return str(exc) if isinstance(exc, DiskFull) else None


def _run_dir() -> Optional[Path]:
    """The run's directory (where storage.root=null keeps the dataset and the checkpoints): Hydra's
    output directory, made before the task starts; None outside Hydra (not known yet)."""
    from hydra.core.hydra_config import HydraConfig

    if not HydraConfig.initialized():
        return None
    runtime: Any = HydraConfig.get().runtime  # a DictConfig at run time (typed as Hydra's dataclass)
    output_dir = runtime.get("output_dir")  # unset where Hydra composed without a run
    return Path(output_dir) if output_dir else None
