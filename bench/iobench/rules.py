"""The storage benchmark's config rules (mode=storage): no model runs, so the model-run knobs
are refused; an S3 store needs its bucket. Run when the config loads; torch-free.
"""

from __future__ import annotations

from bench.config.schema import BenchConfig
from bench.errors import ConfigError
from bench.runtime.rules import refuse_find_max_batch


def check_storage(config: BenchConfig) -> None:
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
