"""The whole config of a run: one typed field per group, the top-level keys, the rules that
span groups, and its registration in Hydra's ConfigStore.

This schema is the one source of every key's type, choices, range and default: conf/*.yaml
hold only what an option changes, and `OmegaConf.to_object` builds these dataclasses once
per run, running each group's `__post_init__` checks. Torch-free.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, fields
from typing import Any, List, Optional, Tuple

from hydra.core.config_store import ConfigStore
from omegaconf import OmegaConf

from bench.config.data import DataConfig
from bench.config.distributed import DistributedConfig, Scaling
from bench.config.fields import Checks, Choice
from bench.config.model import ModelConfig
from bench.config.optimizer import OptimizerConfig
from bench.config.precision import PrecisionConfig
from bench.config.run import BenchmarkConfig, CheckpointConfig, ProfileConfig, TrackingConfig, TrainConfig
from bench.config.scheduler import SchedulerConfig
from bench.config.storage import StorageConfig
from bench.errors import ConfigError

log = logging.getLogger("bench")


class Mode(Choice):
    """The scenario a run measures (bench.scenarios)."""

    train = "train"  # training throughput
    storage = "storage"  # the storage benchmark: emulated accelerators read a dataset
    inference = "inference"  # forward passes only (torch.inference_mode): images/s and per-batch latency


@dataclass
class BenchConfig(Checks):
    defaults: List[Any] = field(default_factory=list)
    # data before model: model's sizes are interpolated from data's, and the groups are built (and
    # checked) in this order, so a bad data.image_size is named as such, not as model.image_size
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    precision: PrecisionConfig = field(default_factory=PrecisionConfig)
    optimizer: OptimizerConfig = field(default_factory=OptimizerConfig)
    scheduler: SchedulerConfig = field(default_factory=SchedulerConfig)
    distributed: DistributedConfig = field(default_factory=DistributedConfig)
    storage: StorageConfig = field(default_factory=StorageConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    benchmark: BenchmarkConfig = field(default_factory=BenchmarkConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    tracking: TrackingConfig = field(default_factory=TrackingConfig)
    profile: ProfileConfig = field(default_factory=ProfileConfig)
    mode: Mode = Mode.train
    allow_cpu: bool = False  # refuse to "benchmark" a CPU by accident
    seed: int = 0
    cudnn_benchmark: bool = True
    compile: bool = False  # torch.compile; falls back to eager (and says so) if it fails
    compile_mode: Optional[str] = None  # passed to torch.compile(mode=...)
    cpu_threads: Optional[int] = None  # torch.set_num_threads; null keeps torch's default

    def __post_init__(self) -> None:
        self.positive("cpu_threads", optional=True)
        world = self.distributed.world_size
        if self.distributed.scaling == Scaling.strong and self.data.batch_size % world:
            raise self.data._error("batch_size", f"a multiple of the process count ({world}) with "
                                   "distributed.scaling=strong (it is the global batch, split evenly over the processes)")
        if self.mode == Mode.storage or self.storage.save_checkpoint or self.checkpoint.every_epochs \
                or self.train.resume:
            self.storage.check_bucket()
        if self.mode in (Mode.train, Mode.inference):
            self._check_training_for_accuracy()
        if self.mode == Mode.inference:
            self._check_inference()
        self._check_cosine_floor()
        self._check_repeats()
        self._check_find_max_batch()
        self._warn_warmup_longer_than_the_run()
        if self.mode == Mode.train and self.train.resume and not self.checkpoint.every_epochs:
            # resume is there to survive a crash: with no interval set it writes one at every epoch end
            self.checkpoint.every_epochs = 1

    def _check_repeats(self) -> None:
        """N windows of the same run: nothing that happens once per run may sit inside them."""
        if self.mode == Mode.storage:  # storage.workload.epochs repeats the read phase; no model runs
            if self.benchmark.repeats != 1:
                raise ConfigError("benchmark.repeats", self.benchmark.repeats, "1 with mode=storage "
                                  "(storage.workload.epochs repeats the read phase)")
            if self.profile.enabled:
                raise ConfigError("profile.enabled", True, "false with mode=storage (no model runs)")
        if self.benchmark.repeats == 1:
            return
        once = {"train.eval_every": self.train.eval_every, "checkpoint.every_epochs": self.checkpoint.every_epochs,
                "train.resume": self.train.resume, "data.progressive": self.data.progressive}
        for key, value in once.items():
            if value:
                raise ConfigError("benchmark.repeats", self.benchmark.repeats,
                                  f"1 with {key}={value!r} (repeats re-measure one window; validation, checkpoints, "
                                  "resume and progressive phases happen once per run)")

    def _check_find_max_batch(self) -> None:
        if not self.benchmark.find_max_batch:
            return
        reason = (f"false with mode={self.mode} (the search is for training)" if self.mode != Mode.train else
                  "false with data.progressive (each phase has its own batch)" if self.data.progressive else
                  "false with distributed.scaling=strong (the search finds a batch per process)"
                  if self.distributed.scaling == Scaling.strong else None)
        if reason:
            raise ConfigError("benchmark.find_max_batch", True, reason)

    def _check_inference(self) -> None:
        """mode=inference runs forward passes in one process: training-only keys are refused, not ignored."""
        training_only = {"train.eval_every": self.train.eval_every, "checkpoint.every_epochs": self.checkpoint.every_epochs,
                         "train.resume": self.train.resume, "data.progressive": self.data.progressive,
                         "benchmark.breakdown": self.benchmark.breakdown,
                         "storage.save_checkpoint": self.storage.save_checkpoint}
        for key, value in training_only.items():
            if value:
                raise ConfigError(key, value, "its default with mode=inference (a training-only key)")
        for key, value in _changed_training_keys(self):
            raise ConfigError(key, value, "its default with mode=inference (a training-only key: inference "
                              "runs no optimizer, schedule or checkpoint)")
        if self.distributed.world_size > 1:
            raise ConfigError("distributed.nproc_per_node", self.distributed.nproc_per_node,
                              "1 with mode=inference (one process; sweep data.batch_size or run one job per GPU)")

    def _check_cosine_floor(self) -> None:
        if self.scheduler.name == "cosine" and not self.scheduler.scale_lr and self.scheduler.min_lr > self.optimizer.lr:
            raise ConfigError("scheduler.min_lr", self.scheduler.min_lr,
                              f"a floor at most optimizer.lr={self.optimizer.lr:g} (cosine decays from lr down to min_lr)")

    def _check_training_for_accuracy(self) -> None:
        """What needs a real dataset: epochs as passes over it, and validation."""
        if not self.data.synthetic:
            return
        if self.train.steps_per_epoch is None:
            raise self.train._error("steps_per_epoch", "a positive integer with data=synthetic "
                                    "(null means one pass over a real dataset)")
        if self.train.eval_every:
            what = "train.target_accuracy" if self.train.target_accuracy is not None else "train.eval_every"
            raise ConfigError(what, getattr(self.train, what.split(".")[1]),
                              "none with data=synthetic (random labels: nothing to learn); validation needs "
                              "a real dataset: data=imagefolder or data=cifar100 (python -m bench.data digits "
                              "--dst DIR writes one)")

    def _warn_warmup_longer_than_the_run(self) -> None:
        """The lr warm-up counts every optimizer step (the unmeasured ones too): one longer than
        the run leaves the lr below optimizer.lr at the end, and the result's lr is not the one used."""
        if self.train.steps_per_epoch is None:
            return  # the run's length is known once the dataset is listed
        planned = self.train.epochs * self.train.steps_per_epoch
        if self.benchmark.measure_steps:
            planned = min(planned, self.benchmark.measure_steps)
        steps = self.benchmark.warmup_steps + planned
        if self.mode == Mode.train and self.scheduler.lr_warmup_steps > steps:
            log.warning("scheduler.lr_warmup_steps=%d is longer than the run (%d optimizer steps: "
                        "benchmark.warmup_steps + the measured window): the lr never reaches optimizer.lr=%g",
                        self.scheduler.lr_warmup_steps, steps, self.optimizer.lr)


TRAINING_ONLY_GROUPS = ("optimizer", "scheduler", "checkpoint")
TRAINING_ONLY_TRAIN_KEYS = ("eval_every", "target_accuracy", "label_smoothing", "resume")  # epochs/steps size inference


def _changed_training_keys(config: BenchConfig) -> List[Tuple[str, Any]]:
    """(dotted key, value) of each training-only key whose value is not the schema's default."""
    plain = lambda value: value.value if isinstance(value, Choice) else value  # noqa: E731
    changed = []
    for group in TRAINING_ONLY_GROUPS:
        current, default = getattr(config, group), type(getattr(config, group))()
        changed += [(f"{group}.{f.name}", plain(getattr(current, f.name))) for f in fields(current)
                    if getattr(current, f.name) != getattr(default, f.name)]
    default_train = TrainConfig()
    changed += [(f"train.{name}", getattr(config.train, name)) for name in TRAINING_ONLY_TRAIN_KEYS
                if getattr(config.train, name) != getattr(default_train, name)]
    return changed


def register_configs() -> None:
    """Store the schema; conf/config.yaml lists it first in its defaults, so every group option
    is merged into (and type-checked by) these dataclasses. `${bench.times:8,${distributed.nproc_per_node}}`
    multiplies: the Slurm presets (conf/hydra/launcher/) ask for cores and memory per process."""
    ConfigStore.instance().store(name="bench_schema", node=BenchConfig)
    OmegaConf.register_new_resolver("bench.times", _times, replace=True)


def _times(*factors: Any) -> Any:
    product = 1
    for factor in factors:
        product *= factor
    return product
