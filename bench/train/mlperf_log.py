"""train.mlperf_log=true: the run's MLPerf Training log, `mlperf.log` in the run's directory,
written by rank 0 through MLPerf's own `mlperf_logging.mllog` as the events happen, and checked
against MLPerf Training's ResNet rules with

    python -m mlperf_logging.compliance_checker --usage training --ruleset 4.0.0 mlperf.log

Events (MLPerf's clock, the one time-to-accuracy counts: the run starts at the first training step):
cache_clear and init_start before the model is built; the submission and hyper-parameter keys,
init_stop and run_start at the first step; block/epoch start and stop around every epoch, with
eval_start, eval_accuracy and eval_stop for an evaluated one; run_stop with status success when
train.target_accuracy was reached, aborted otherwise. 4.0.0 is the last round with ResNet-50.
The division is train.mlperf_division: open by default (the checker then checks the log's format and
events, and passes any config); closed applies the closed division's ResNet rules. What they ask
that bench's config does not give (a poly schedule's keys, the end learning rate of 0.0001, ...) is
logged as bench ran it: the checker names it, nothing is faked.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Dict, Optional

from bench.config import BenchConfig

LOG_FILE = "mlperf.log"


class _Silent:
    """Stands for mllog's logger where no log is written: every call does nothing."""

    def start(self, **_: Any) -> None:
        return None

    end = event = start


class MlperfLog:
    """mllog's events into `path` only (mllog's own logger also prints every line to stdout); with
    no path (train.mlperf_log=false, and every rank but 0) the loop's calls do nothing. The keys are
    MLPerf's (mllog.constants' values)."""

    def __init__(self, path: Optional[Path] = None):
        self.log: Any = _Silent()
        self.handler: Optional[logging.Handler] = None
        if path is None:
            return
        from mlperf_logging import mllog

        logger = logging.getLogger(f"bench.mlperf.{id(self)}")
        logger.propagate = False
        logger.setLevel(logging.INFO)
        self.handler = logging.FileHandler(path)
        logger.addHandler(self.handler)
        here = str(Path(__file__).resolve().parents[2])  # the metadata's file names, from the package root
        self.log = mllog.mllog.MLLogger(logger=logger, default_stack_offset=1, root_dir=here)
        self.log.event(key="cache_clear", value=True)
        self.log.start(key="init_start")

    def run_start(self, hyper: Dict[str, Any]) -> None:
        for key, value in hyper.items():
            self.log.event(key=key, value=value)
        self.log.end(key="init_stop")
        self.log.start(key="run_start")

    def event(self, key: str, value: Any, **metadata: Any) -> None:
        self.log.event(key=key, value=value, metadata=metadata)

    def start(self, key: str, **metadata: Any) -> None:
        self.log.start(key=key, metadata=metadata)

    def end(self, key: str, **metadata: Any) -> None:
        self.log.end(key=key, metadata=metadata)

    def run_stop(self, reached: Optional[bool]) -> None:
        self.log.end(key="run_stop", metadata={"status": "success" if reached else "aborted"})
        if self.handler is not None:
            self.handler.close()


def open_mlperf_log(config: BenchConfig, out_dir: Optional[Path], is_reporter: bool) -> MlperfLog:
    """Rank 0's log when train.mlperf_log is on (init_start is now); a silent one otherwise."""
    if not config.train.mlperf_log or out_dir is None or not is_reporter:
        return MlperfLog()
    return MlperfLog(out_dir / LOG_FILE)


def hyper_parameters(
    config: BenchConfig,
    global_batch: int,
    base_lr: float,
    planned_steps: int,
    train_samples: Optional[int],
    platform: str,
) -> Dict[str, Any]:
    """The submission and hyper-parameter keys MLPerf Training's ResNet rules ask for, as this run has them."""
    optimizer, scheduler = config.optimizer, config.scheduler
    hyper: Dict[str, Any] = {
        "submission_org": "bench",
        "submission_platform": platform,
        "submission_division": str(config.train.mlperf_division),
        "submission_status": "onprem",
        "submission_benchmark": "resnet",
        "seed": config.seed,
        "global_batch_size": global_batch,
        "gradient_accumulation_steps": 1,
        "train_samples": train_samples if train_samples is not None else planned_steps * global_batch,
        "opt_name": optimizer.name.value,
        "opt_learning_rate_warmup_epochs": 0,
        "model_bn_span": global_batch // max(1, config.distributed.world_size),
    }
    if optimizer.name.value == "sgd":
        hyper.update(
            sgd_opt_base_learning_rate=base_lr,
            sgd_opt_end_learning_rate=scheduler.min_lr,
            sgd_opt_learning_rate_decay_steps=planned_steps,
            sgd_opt_weight_decay=optimizer.weight_decay,
            sgd_opt_momentum=optimizer.momentum,
        )
    return hyper
