"""The training scenario (mode=train): its config rules (`check_train`: run when the config loads,
before any MLflow run; torch-free, as this module is), what must hold before a run starts, what
one rank does, and how rank 0's results become the report. What it shares with inference (a rank's
run around its loop, the out-of-memory line, the rules in bench.runtime.rules) is bench.runtime's."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from bench.config import BenchConfig
from bench.config.distributed import Scaling
from bench.errors import ConfigError
from bench.rank_context import RankContext
from bench.runtime.model_names import check_arch
from bench.runtime.rules import check_once_per_run, check_training_for_accuracy
from bench.runtime.scenario import ModelScenario
from bench.train.report import TrainReport
from bench.train.result import TrainOutcome, TrainResult


class TrainScenario(ModelScenario):
    # torch._dynamo: every optimizer imports it when built (add_param_group is wrapped by
    # torch._disable_dynamo), ~1 CPU-s that each rank would pay again
    loop_modules = ("torch._dynamo", "bench.train.scenario", "bench.train.loop")
    report_class = TrainReport

    def check(self, config: BenchConfig) -> None:
        """mode=train's config rules (check_train), when the config loads."""
        check_train(config)

    def preflight(self, config: BenchConfig) -> None:
        """The dataset, the device, the model, the machine: bench.train.preflight."""
        from bench.train.preflight import check_training

        check_training(config)  # the dataset first: a missing one is refused before torch loads

    def run_name(self, config: BenchConfig, batch_size: Optional[int] = None) -> str:
        """<model>-<precision>-bs<batch>[-x<processes>]; `batch_size`: the one find_max_batch found."""
        world = config.distributed.world_size
        batch = f"bs{batch_size}-max" if batch_size else f"bs{config.data.batch_size}"
        return f"{config.model.arch}-{config.precision.name}-{batch}" + (f"-x{world}" if world > 1 else "")

    def measure(
        self, config: BenchConfig, device: Any, ctx: RankContext, monitor: Any, out_dir: Path, heartbeat: Any
    ) -> TrainResult:
        """Train as one rank (bench.train.loop), the end-of-run checkpoint written by rank 0."""
        from bench.train.loop import train

        return train(config, device, monitor=monitor, ctx=ctx, on_step=heartbeat, out_dir=out_dir)

    def explain(self, exc: BaseException, config: BenchConfig) -> Optional[str]:
        """Another run writing the checkpoint folder is said in its own line; out of memory as any model run."""
        from bench.storage.writer_lock import FolderBusy

        return str(exc) if isinstance(exc, FolderBusy) else super().explain(exc, config)

    def report(self, outcome: TrainOutcome, config: BenchConfig) -> TrainReport:
        report = TrainReport.from_outcome(outcome, config)
        found = report.record.figure("batch_size_found")
        if found and config.tracking.run_name is None:  # the batch actually used names the run
            report.run_name = self.run_name(config, found)
        return report


def check_train(config: BenchConfig) -> None:
    check_arch(config.model)  # torch-free: before any run, from compose_config too
    check_training_for_accuracy(config)
    check_once_per_run(config)
    if config.benchmark.find_max_batch:
        reason = (
            "false with data.progressive (each phase has its own batch)"
            if config.data.progressive
            else "false with distributed.scaling=strong (the search finds a batch per process)"
            if config.distributed.scaling == Scaling.strong
            else None
        )
        if reason:
            raise ConfigError("benchmark.find_max_batch", True, reason)
    check_mlperf_log(config)
    if config.train.resume and not config.checkpoint.every_epochs:
        # resume is there to survive a crash: with no interval set it writes one at every epoch end
        config.checkpoint.every_epochs = 1


def check_mlperf_log(config: BenchConfig) -> None:
    """train.mlperf_log: one run timed from its first step (MLPerf's), through MLPerf's own logger."""
    if not config.train.mlperf_log:
        return
    if config.benchmark.repeats > 1:
        raise ConfigError("train.mlperf_log", True, "false with benchmark.repeats > 1 (MLPerf times one run)")
    import importlib.util

    if importlib.util.find_spec("mlperf_logging") is None:
        raise ConfigError(
            "train.mlperf_log", True, "false without the mlperf-logging package (pip install -e '.[mlperf]' brings it)"
        )
