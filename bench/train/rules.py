"""The training scenario's config rules (mode=train); those it shares with inference are in
bench.runtime.rules. Run when the config loads (bench.config.schema calls the scenario's `check`), before
any MLflow run; torch-free.
"""

from __future__ import annotations

from bench.config.distributed import Scaling
from bench.config.schema import BenchConfig
from bench.errors import ConfigError
from bench.runtime.model_names import check_arch
from bench.runtime.rules import check_once_per_run, check_training_for_accuracy


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
