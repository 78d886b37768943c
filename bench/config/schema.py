"""The whole config of a run: one typed field per group, the top-level keys, the rules that
span groups, and its registration in Hydra's ConfigStore.

This schema is the one source of every key's type, choices, range and default: conf/*.yaml
hold only what an option changes, and `OmegaConf.to_object` builds these dataclasses once
per run, running each group's `__post_init__` checks. Torch-free.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, make_dataclass
from typing import Any, Dict, List, Optional, Tuple

from hydra.core.config_store import ConfigStore
from omegaconf import OmegaConf

from bench.config.data import DataConfig
from bench.config.distributed import DistributedConfig, Scaling
from bench.config.fields import Checks
from bench.config.model import ModelConfig
from bench.config.optimizer import OptimizerConfig
from bench.config.precision import PrecisionConfig
from bench.config.run import BenchmarkConfig, CheckpointConfig, ProfileConfig, TrackingConfig, TrainConfig
from bench.config.scheduler import SchedulerConfig
from bench.config.storage import StorageConfig
from bench.errors import ConfigError

log = logging.getLogger("bench")


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
    # the scenario: a name bench.scenario_registry knows (checked, with that scenario's own rules, once the
    # config is composed: bench.config.load)
    mode: str = "train"
    allow_cpu: bool = False  # refuse to "benchmark" a CPU by accident
    seed: int = 0
    cudnn_benchmark: bool = True
    compile: bool = False  # torch.compile; falls back to eager (and says so) if it fails
    compile_mode: Optional[str] = None  # passed to torch.compile(mode=...)
    # torch.set_num_threads; null: torch's default on a GPU, on the CPU OMP_NUM_THREADS or what fits
    # beside the loader's workers in the usable cores (bench.runtime.device.fit_cpu)
    cpu_threads: Optional[int] = None
    cpu_malloc_reuse: bool = True  # on a CPU: glibc keeps freed memory for the next step (bench.runtime.malloc)

    def __post_init__(self) -> None:
        self.positive("cpu_threads", optional=True)
        world = self.distributed.world_size
        if self.distributed.scaling == Scaling.strong and self.data.batch_size % world:
            raise self.data._error(
                "batch_size",
                f"a multiple of the process count ({world}) with "
                "distributed.scaling=strong (it is the global batch, "
                "split evenly over the processes)",
            )
        if self.storage.save_checkpoint or self.checkpoint.every_epochs or self.train.resume:
            self.storage.check_bucket()
        self._check_cosine_floor()

    def _check_cosine_floor(self) -> None:
        scheduler = self.scheduler
        if scheduler.name == "cosine" and not scheduler.scale_lr and scheduler.min_lr > self.optimizer.lr:
            raise ConfigError(
                "scheduler.min_lr",
                scheduler.min_lr,
                f"a floor at most optimizer.lr={self.optimizer.lr:g} (cosine decays from lr down to min_lr)",
            )


def register_configs() -> None:
    """Store the schema; conf/config.yaml lists it first in its defaults, so every group option
    is merged into (and type-checked by) these dataclasses. `${bench.times:8,${distributed.nproc_per_node}}`
    multiplies: the Slurm presets (conf/hydra/launcher/) ask for cores and memory per process."""
    schema = schema_class()
    store = ConfigStore.instance()
    if _STORED.get("bench_schema") is not schema:  # storing converts the dataclasses: ~0.1 s per compose
        store.store(name="bench_schema", node=schema)
        _STORED["bench_schema"] = schema
    OmegaConf.register_new_resolver("bench.times", _times, replace=True)


_STORED: Dict[str, type] = {}  # the schema class stored last (ConfigStore is a process-wide singleton)


_SCHEMAS: Dict[Tuple[Tuple[str, type], ...], type] = {}


def schema_class() -> type:
    """BenchConfig, with a field per scenario that has a config namespace of its own
    (bench.scenario_registry.OPTIONS): `count.steps=5` is then a key like any other (typed, defaulted,
    refused in one line when wrong, shown by --cfg job)."""
    from bench.scenario_registry import namespaces  # import-free itself; the dataclasses' modules load here

    key = tuple(sorted(namespaces().items()))
    if not key:
        return BenchConfig
    if key not in _SCHEMAS:
        extra = [(name, options, field(default_factory=options)) for name, options in key]
        _SCHEMAS[key] = make_dataclass("BenchConfig", extra, bases=(BenchConfig,))
    return _SCHEMAS[key]


def _times(*factors: Any) -> Any:
    product = 1
    for factor in factors:
        product *= factor
    return product
