"""The training scenario's config rules (mode=train), and the two it shares with inference (a
real dataset for accuracy; what happens once per run cannot sit inside benchmark.repeats'
windows). Run when the config loads (bench.config.schema calls the scenario's `check`), before
any MLflow run; torch-free.
"""

from __future__ import annotations

import logging

from bench.config.distributed import Scaling
from bench.config.schema import BenchConfig
from bench.errors import ConfigError

log = logging.getLogger("bench")


def check_train(config: BenchConfig) -> None:
    check_training_for_accuracy(config)
    check_once_per_run(config)
    if config.benchmark.find_max_batch:
        reason = ("false with data.progressive (each phase has its own batch)" if config.data.progressive else
                  "false with distributed.scaling=strong (the search finds a batch per process)"
                  if config.distributed.scaling == Scaling.strong else None)
        if reason:
            raise ConfigError("benchmark.find_max_batch", True, reason)
    warn_warmup_longer_than_the_run(config)
    if config.train.resume and not config.checkpoint.every_epochs:
        # resume is there to survive a crash: with no interval set it writes one at every epoch end
        config.checkpoint.every_epochs = 1


def refuse_find_max_batch(config: BenchConfig) -> None:
    """A mode other than training: the batch search is for training."""
    if config.benchmark.find_max_batch:
        raise ConfigError("benchmark.find_max_batch", True, f"false with mode={config.mode} (the search is for training)")


def check_once_per_run(config: BenchConfig) -> None:
    """N windows of the same run: nothing that happens once per run may sit inside them."""
    if config.benchmark.repeats == 1:
        return
    once = {"train.eval_every": config.train.eval_every, "checkpoint.every_epochs": config.checkpoint.every_epochs,
            "train.resume": config.train.resume, "data.progressive": config.data.progressive}
    for key, value in once.items():
        if value:
            raise ConfigError("benchmark.repeats", config.benchmark.repeats,
                              f"1 with {key}={value!r} (repeats re-measure one window; validation, checkpoints, "
                              "resume and progressive phases happen once per run)")


def check_training_for_accuracy(config: BenchConfig) -> None:
    """What needs a real dataset: epochs as passes over it, and validation."""
    if not config.data.synthetic:
        return
    if config.train.steps_per_epoch is None:
        raise config.train._error("steps_per_epoch", "a positive integer with data=synthetic "
                                  "(null means one pass over a real dataset)")
    if config.train.eval_every:
        what = "train.target_accuracy" if config.train.target_accuracy is not None else "train.eval_every"
        raise ConfigError(what, getattr(config.train, what.split(".")[1]),
                          "none with data=synthetic (random labels: nothing to learn); validation needs "
                          "a real dataset: data=imagefolder or data=cifar100 (python -m bench.data digits "
                          "--dst DIR writes one)")


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
        log.warning("scheduler.lr_warmup_steps=%d is longer than the run (%d optimizer steps: "
                    "benchmark.warmup_steps + the measured window): the lr never reaches optimizer.lr=%g",
                    config.scheduler.lr_warmup_steps, steps, config.optimizer.lr)
