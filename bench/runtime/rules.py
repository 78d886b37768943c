"""Config rules the model scenarios share (training and inference): a real dataset for accuracy,
what happens once per run cannot sit inside benchmark.repeats' windows, the batch search is for
training. Run when the config loads, before any MLflow run; torch-free."""

from __future__ import annotations

from typing import Any, Dict

from bench.config.schema import BenchConfig
from bench.errors import ConfigError


def refuse_find_max_batch(config: BenchConfig) -> None:
    """A mode other than training: the batch search is for training."""
    if config.benchmark.find_max_batch:
        raise ConfigError(
            "benchmark.find_max_batch", True, f"false with mode={config.mode} (the search is for training)"
        )


def once_per_run(config: BenchConfig) -> Dict[str, Any]:
    """The keys of what happens once per training run (validation, checkpoints, resume, progressive
    phases), with their values: benchmark.repeats refuses them, inference refuses them all."""
    return {
        "train.eval_every": config.train.eval_every,
        "checkpoint.every_epochs": config.checkpoint.every_epochs,
        "train.resume": config.train.resume,
        "data.progressive": config.data.progressive,
    }


def check_once_per_run(config: BenchConfig) -> None:
    """N windows of the same run: nothing that happens once per run may sit inside them."""
    if config.benchmark.repeats == 1:
        return
    for key, value in once_per_run(config).items():
        if value:
            raise ConfigError(
                "benchmark.repeats",
                config.benchmark.repeats,
                f"1 with {key}={value!r} (repeats re-measure one window; validation, checkpoints, "
                "resume and progressive phases happen once per run)",
            )


def check_training_for_accuracy(config: BenchConfig) -> None:
    """What needs a real dataset: epochs as passes over it, and validation."""
    if not config.data.synthetic:
        return
    if config.train.steps_per_epoch is None:
        raise config.train._error(
            "steps_per_epoch", "a positive integer with data=synthetic (null means one pass over a real dataset)"
        )
    if config.train.eval_every:
        target = config.train.target_accuracy is not None  # eval_every is an int: 0, never null
        what, off = ("train.target_accuracy", "null") if target else ("train.eval_every", "0")
        raise ConfigError(
            what,
            getattr(config.train, what.split(".")[1]),
            f"{off} with data=synthetic (random labels: nothing to learn); validation needs "
            "a real dataset: data=imagefolder or data=cifar100 (python -m bench.data digits "
            "--dst DIR writes one)",
        )
