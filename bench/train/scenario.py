"""The training scenario (mode=train): its config rules (`TrainScenario.check`: run when the config loads,
before any MLflow run; torch-free, as this module is), what must hold before a run starts, what
one rank does, and how rank 0's results become the report. What it shares with inference (a rank's
run around its loop, the out-of-memory line, the rules in bench.runtime.model_names) is bench.runtime's.

What must hold before a training run starts, beyond the schema: what every run of a model
needs (bench.runtime.scenario: the dataset on disk, the device and its precision, the model,
the machine's cores and memory) and what training adds: the val split, where checkpoints go, the
checkpoint to resume from, BatchNorm's batch, the batch search's GPU. Each failure is one sentence naming the key
(exit 2), and all of it runs before an MLflow run is opened. Cheapest first: the dataset check
needs no torch.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Optional

from bench.config import BenchConfig
from bench.config.run import RESUME_AUTO
from bench.config.schema import Scaling
from bench.errors import CheckpointError, ConfigError, ConfigProblem
from bench.rank_context import RankContext
from bench.runtime.model_names import check_arch, check_once_per_run, check_training_for_accuracy
from bench.runtime.scenario import ModelScenario, check_model_run
from bench.train.report import TrainReport
from bench.train.result import TrainOutcome, TrainResult


class TrainScenario(ModelScenario):
    # torch._dynamo: every optimizer imports it when built (add_param_group is wrapped by
    # torch._disable_dynamo), ~1 CPU-s that each rank would pay again
    loop_modules = ("torch._dynamo", "bench.train.scenario", "bench.train.loop")
    report_class = TrainReport

    def check(self, config: BenchConfig) -> None:
        """mode=train's config rules, when the config loads."""
        check_arch(config.model)  # torch-free: before any run, from compose_config too
        check_training_for_accuracy(config)
        check_once_per_run(config)
        if config.benchmark.find_max_batch and config.data.progressive:
            raise ConfigError(
                "benchmark.find_max_batch", True, "false with data.progressive (each phase has its own batch)"
            )
        if config.benchmark.find_max_batch and config.distributed.scaling == Scaling.strong:
            raise ConfigError(
                "benchmark.find_max_batch",
                True,
                "false with distributed.scaling=strong (the search finds a batch per process)",
            )
        check_mlperf_log(config)
        if config.train.resume and not config.checkpoint.every_epochs:
            # resume is there to survive a crash: with no interval set it writes one at every epoch end
            config.checkpoint.every_epochs = 1

    def preflight(self, config: BenchConfig) -> None:
        """The dataset (a missing one is refused before torch loads), the device, the model, the machine
        (bench.runtime.scenario), and training's own: the val split, the checkpoints (check_checkpoints)."""
        check_model_run(config, validation=bool(config.train.eval_every), storage=check_checkpoints)

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
        # the batch actually used names the run
        if (found := report.record.figure("batch_size_found")) and config.tracking.run_name is None:
            report.run_name = self.run_name(config, found)
        return report


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


def check_checkpoints(config: BenchConfig) -> None:
    """The checkpoint to resume from (check_resume_file); where checkpoints go on a local disk can be
    written: storage.root, and checkpoint.dir under it (else under the launch directory) when training
    checkpoints are written (bench.train.resume)."""
    from bench.storage.local import check_local_dirs

    check_resume_file(config)
    epochs = bool(config.checkpoint.every_epochs or config.train.resume)
    if epochs or config.storage.save_checkpoint:
        check_local_dirs(config.storage, Path.cwd(), {"checkpoint.dir": config.checkpoint.dir} if epochs else {})


def check_resume_file(config: BenchConfig) -> None:
    """train.resume=<file>: there, read as plain data (its tensors mapped, not read) and compared with
    this run before an MLflow run is opened: a file that is not there, a damaged one, one that needs
    more than plain data (a crafted pickle) and one of another model or optimizer are refused in one
    line (exit 2). `auto` and bare names are looked up in the checkpoint folder when the run starts."""
    resume = config.train.resume
    if not resume or resume == RESUME_AUTO or ("/" not in resume.strip("/") and not resume.startswith(("/", "."))):
        return
    if not os.path.isfile(resume):
        raise ConfigError(
            "train.resume",
            resume,
            "'auto', a checkpoint file written by checkpoint.every_epochs, "
            "or a checkpoint's name in checkpoint.dir (this file does not exist)",
        )
    from bench.train.checkpoint_format import check_meta, read

    try:
        state = read(Path(resume), resume, mmap=True)
        check_meta(state, config, resume)
    except CheckpointError as exc:
        raise ConfigProblem(f"train.resume: {exc}", "train.resume", resume) from None
    if int(state["epoch"]) >= config.train.epochs:  # a run of no steps would report no figures
        raise ConfigProblem(
            f"train.resume: checkpoint {resume} ends epoch {state['epoch']}, and this run has "
            f"train.epochs={config.train.epochs}: no epoch is left to train. Raise train.epochs to go on",
            "train.resume",
            resume,
        )
