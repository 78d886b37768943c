"""The training scenario (mode=train): what must hold before a run starts, what one rank does,
and how rank 0's results become the report. What it shares with inference (a rank's run around
its loop, the out-of-memory line) is bench.runtime.scenario's."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from bench.config import BenchConfig
from bench.rank_context import RankContext
from bench.runtime.scenario import ModelScenario
from bench.train.report import TrainReport
from bench.train.result import TrainOutcome, TrainResult


class TrainScenario(ModelScenario):
    # torch._dynamo: every optimizer imports it when built (add_param_group is wrapped by
    # torch._disable_dynamo), ~1 CPU-s that each rank would pay again
    loop_modules = ("torch._dynamo", "bench.train.scenario", "bench.train.loop")
    report_class = TrainReport

    def check(self, config: BenchConfig) -> None:
        """mode=train's config rules (bench.train.rules), when the config loads."""
        from bench.train.rules import check_train

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
