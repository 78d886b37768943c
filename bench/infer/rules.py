"""The inference scenario's config rules (mode=inference): forward passes in one process, so
training-only keys are refused, not ignored. Run when the config loads; torch-free.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any, List, Tuple

from bench.config.fields import Choice
from bench.config.run import TrainConfig
from bench.config.schema import BenchConfig
from bench.errors import ConfigError
from bench.runtime.model_names import check_arch
from bench.runtime.rules import check_training_for_accuracy, refuse_find_max_batch

TRAINING_ONLY_GROUPS = ("optimizer", "scheduler", "checkpoint")
TRAINING_ONLY_TRAIN_KEYS = ("eval_every", "target_accuracy", "label_smoothing", "resume")  # epochs/steps size inference


def check_inference(config: BenchConfig) -> None:
    check_arch(config.model)  # torch-free: before any run, from compose_config too
    check_training_for_accuracy(config)
    # the once-per-run keys benchmark.repeats refuses (bench.runtime.rules) are among them
    training_only = {
        "train.eval_every": config.train.eval_every,
        "checkpoint.every_epochs": config.checkpoint.every_epochs,
        "train.resume": config.train.resume,
        "data.progressive": config.data.progressive,
        "benchmark.breakdown": config.benchmark.breakdown,
        "storage.save_checkpoint": config.storage.save_checkpoint,
    }
    for key, value in training_only.items():
        if value:
            raise ConfigError(key, value, "its default with mode=inference (a training-only key)")
    if config.train.mlperf_log:  # MLPerf Training's log: events of a training run to its target
        raise ConfigError(
            "train.mlperf_log", True, "false with mode=inference (MLPerf Training's log times a training run)"
        )
    for key, value in changed_training_keys(config):
        raise ConfigError(
            key,
            value,
            "its default with mode=inference (a training-only key: inference "
            "runs no optimizer, schedule or checkpoint)",
        )
    if config.distributed.world_size > 1:
        raise ConfigError(
            "distributed.nproc_per_node",
            config.distributed.nproc_per_node,
            "1 with mode=inference (one process; sweep data.batch_size or run one job per GPU)",
        )
    refuse_find_max_batch(config)


def changed_training_keys(config: BenchConfig) -> List[Tuple[str, Any]]:
    """(dotted key, value) of each training-only key whose value is not the schema's default."""
    plain = lambda value: value.value if isinstance(value, Choice) else value  # noqa: E731
    changed = []
    for group in TRAINING_ONLY_GROUPS:
        current, default = getattr(config, group), type(getattr(config, group))()
        changed += [
            (f"{group}.{f.name}", plain(getattr(current, f.name)))
            for f in fields(current)
            if getattr(current, f.name) != getattr(default, f.name)
        ]
    default_train = TrainConfig()
    changed += [
        (f"train.{name}", getattr(config.train, name))
        for name in TRAINING_ONLY_TRAIN_KEYS
        if getattr(config.train, name) != getattr(default_train, name)
    ]
    return changed
