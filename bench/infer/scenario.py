"""The inference scenario (mode=inference): the checks every run of a model has (dataset, device,
precision on that device, model, what fits: bench.runtime.scenario) and the out-of-memory
explanation, then forward passes in one process (bench.infer.loop); a sweep runs each job in a
process of its own, as training does. Its config rules (`check_inference`: forward passes in one
process, so training-only keys are refused, not ignored) run when the config loads; torch-free, as
this module is."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path
from typing import Any, List, Optional, Tuple

from bench.config import BenchConfig
from bench.config.fields import Choice
from bench.config.run import TrainConfig
from bench.errors import ConfigError
from bench.infer.report import InferReport
from bench.infer.result import InferResult
from bench.rank_context import RankContext
from bench.runtime.model_names import check_arch
from bench.runtime.rules import check_training_for_accuracy, once_per_run, refuse_find_max_batch
from bench.runtime.scenario import ModelScenario


class InferScenario(ModelScenario):
    loop_modules = ("bench.infer.scenario", "bench.infer.loop")
    report_class = InferReport  # one rank; a launcher gives every sweep job a fresh process

    def check(self, config: BenchConfig) -> None:
        """mode=inference's config rules (check_inference): training-only keys refused."""
        check_inference(config)

    def run_name(self, config: BenchConfig, batch_size: Optional[int] = None) -> str:
        return f"infer-{config.model.arch}-{config.precision.name}-bs{config.data.batch_size}"

    def measure(
        self, config: BenchConfig, device: Any, ctx: RankContext, monitor: Any, out_dir: Path, heartbeat: Any
    ) -> InferResult:
        from bench.infer.loop import infer

        return infer(config, device, monitor=monitor, ctx=ctx, on_step=heartbeat, out_dir=out_dir)


TRAINING_ONLY_GROUPS = ("optimizer", "scheduler", "checkpoint")
TRAINING_ONLY_TRAIN_KEYS = ("eval_every", "target_accuracy", "label_smoothing", "resume")  # epochs/steps size inference


def check_inference(config: BenchConfig) -> None:
    check_arch(config.model)  # torch-free: before any run, from compose_config too
    check_training_for_accuracy(config)
    training_only = {
        **once_per_run(config),  # what benchmark.repeats refuses too (bench.runtime.rules)
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
