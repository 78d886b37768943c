"""The training scenario's config rules (mode=train); those it shares with inference are in
bench.runtime.rules. Run when the config loads (bench.config.schema calls the scenario's `check`), before
any MLflow run; torch-free.
"""

from __future__ import annotations

import logging

from bench.config.distributed import Scaling
from bench.config.schema import BenchConfig
from bench.errors import ConfigError
from bench.runtime.model_names import check_arch
from bench.runtime.rules import check_once_per_run, check_training_for_accuracy

log = logging.getLogger("bench")


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
    warn_warmup_longer_than_the_run(config)
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


def warn_warmup_longer_than_the_run(config: BenchConfig) -> None:
    """The lr warm-up counts every optimizer step (the unmeasured ones too): one longer than
    the run leaves the lr below optimizer.lr at the end, and the result's lr is not the one used."""
    if config.train.steps_per_epoch is None:
        return  # the run's length is known once the dataset is listed
    planned = config.train.epochs * config.train.steps_per_epoch
    if config.benchmark.measure_steps:
        planned = min(planned, config.benchmark.measure_steps)
    steps = config.benchmark.warmup_steps + planned
    if config.scheduler.lr_warmup_steps > steps:
        log.warning(
            "scheduler.lr_warmup_steps=%d is longer than the run (%d optimizer steps: "
            "benchmark.warmup_steps + the measured window): the lr never reaches optimizer.lr=%g",
            config.scheduler.lr_warmup_steps,
            steps,
            config.optimizer.lr,
        )
