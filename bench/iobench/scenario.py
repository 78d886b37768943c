"""The storage benchmark (mode=storage): MLPerf-Storage-style emulation of training I/O.

Phases, each in its own module: prepare (write the dataset, or reuse it), read (simulated
accelerators: reader threads + emulated compute; processes of this run on one host, or
torch.distributed ranks across hosts), checkpoint (torch.save to the store and back, per
client). No model runs and no GPU is needed: the accelerators are emulated. storage.runs and
storage.warmup_runs repeat the read and checkpoint phases as MLPerf's harness does.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable, Optional

from bench.config import BenchConfig
from bench.config.schema import DistributedName
from bench.errors import ConfigError
from bench.iobench.report import StorageReport
from bench.runtime.model_names import refuse_find_max_batch
from bench.scenario_base import BaseScenario


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
        """mode=storage's config rules, when the config loads (torch-free): no model runs, so the
        model-run knobs are refused; an S3 store needs its bucket."""
        config.storage.check_bucket()
        if config.benchmark.repeats != 1:  # storage.workload.epochs repeats the read phase; no model runs
            raise ConfigError(
                "benchmark.repeats",
                config.benchmark.repeats,
                "1 with mode=storage (storage.workload.epochs repeats the read phase)",
            )
        if config.profile.enabled:
            raise ConfigError("profile.enabled", True, "false with mode=storage (no model runs)")
        if config.train.mlperf_log:  # MLPerf Storage's figures are in the results (mlperf_* keys), not a log
            raise ConfigError(
                "train.mlperf_log",
                True,
                "false with mode=storage (MLPerf Training's log times a training run; MLPerf Storage's "
                "figures are in the results)",
            )
        refuse_find_max_batch(config)

    def preflight(self, config: BenchConfig) -> None:
        from bench.iobench.preflight import check_storage_run

        check_storage_run(config, clients_of(config), self.has_ranks(config), _run_dir())

    def run_name(self, config: BenchConfig) -> str:
        storage = config.storage  # the batch too, as a training run's name has it: a batch sweep's jobs apart
        return f"storage-{storage.workload.name}-{storage.name}-bs{storage.workload.batch_size}-c{clients_of(config)}"

    def run_rank(
        self, config: BenchConfig, ctx: Any, out_dir: Path, heartbeat: Optional[Callable[[], None]] = None
    ) -> Optional[StorageReport]:
        """Prepare, read and checkpoint phases, runs times."""
        from bench.iobench.session import Clients, run_as_rank, run_storage

        if ctx.distributed:
            return run_as_rank(config, ctx, out_dir, heartbeat)
        return run_storage(Clients(config, out_dir))

    def report(self, outcome: StorageReport, config: BenchConfig) -> StorageReport:
        return outcome

    def explain(self, exc: BaseException, config: BenchConfig) -> Optional[str]:
        from bench.iobench.freespace import DiskFull
        from bench.storage.writer_lock import FolderBusy  # another run on the dataset folder

        return str(exc) if isinstance(exc, (DiskFull, FolderBusy)) else None


def _run_dir() -> Optional[Path]:
    """The run's directory (where storage.root=null keeps the dataset and the checkpoints): Hydra's
    output directory, made before the task starts; None outside Hydra (not known yet)."""
    from hydra.core.hydra_config import HydraConfig

    if not HydraConfig.initialized():
        return None
    runtime: Any = HydraConfig.get().runtime  # a DictConfig at run time (typed as Hydra's dataclass)
    output_dir = runtime.get("output_dir")  # unset where Hydra composed without a run
    return Path(output_dir) if output_dir else None
