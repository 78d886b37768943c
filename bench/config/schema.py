"""The whole config of a run: one typed field per group, the top-level keys, the rules that
span groups, and its registration in Hydra's ConfigStore.

This schema is the one source of every key's type, choices, range and default: conf/*.yaml
hold only what an option changes, and `OmegaConf.to_object` builds these dataclasses once
per run, running each group's `__post_init__` checks. Torch-free.
"""

from __future__ import annotations

import itertools
import math
import os
from dataclasses import dataclass, field
from typing import Any, List, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import DictConfig, OmegaConf

from bench import config_dir
from bench.config.data import DataConfig
from bench.config.fields import Checks, Choice, non_negative, positive
from bench.config.optimizer import OptimizerConfig
from bench.config.run import BenchmarkConfig, CheckpointConfig, ProfileConfig, TrackingConfig, TrainConfig
from bench.config.storage import StorageConfig
from bench.registries import BACKENDS, DATA


class Norm(Choice):
    batch = "batch"  # the architecture's own BatchNorm layers
    none = "none"  # every BatchNorm replaced by identity (the no-BN study)


@dataclass
class ModelConfig(Checks):
    """The `model` group: which architecture, sized by the data group (interpolated)."""

    KEY = "model"
    # A torchvision classification model (torchvision.models.list_models()) or one of bench's
    # own (bench.runtime.models): checked against that registry before the run starts.
    arch: str = "resnet50"
    num_classes: int = positive("${data.num_classes}")
    image_size: int = positive("${data.image_size}")
    norm: Norm = Norm.batch
    # ResNets: zero-init the last BatchNorm of each residual block (each block starts as identity)
    zero_init_residual: bool = False

    def __post_init__(self) -> None:
        if not self.arch:
            self._fail("arch", "a model name such as resnet50")
        self.check_ranges()


class PrecisionName(Choice):
    fp32 = "fp32"  # strict IEEE fp32: TF32 off for matmuls and convolutions
    tf32 = "tf32"  # TF32 tensor-core math (Ampere+)
    amp_fp16 = "amp_fp16"  # autocast float16 + GradScaler (CUDA only)
    bf16 = "bf16"  # autocast bfloat16 (Ampere+ GPUs or CPU)


class AutocastDtype(Choice):
    float16 = "float16"
    bfloat16 = "bfloat16"


@dataclass
class PrecisionConfig(Checks):
    """The `precision` group: autocast dtype, loss scaling, TF32 and memory format.

    Whether the device can do it (fp16 needs CUDA, bf16 needs Ampere+ or a CPU) is checked
    against the device before the run starts (bench.train.precision)."""

    KEY = "precision"
    name: PrecisionName = PrecisionName.fp32
    autocast_dtype: Optional[AutocastDtype] = None
    grad_scaler: bool = False
    tf32: bool = False
    channels_last: bool = False

    def rules(self) -> None:
        if self.grad_scaler and self.autocast_dtype != AutocastDtype.float16:
            self._fail("grad_scaler", "true only with precision.autocast_dtype=float16")


class DistributedName(Choice):
    single = "single"  # one process on one device
    ddp = "ddp"  # DistributedDataParallel, one process per GPU (gloo on CPU)


class Backend(Choice):
    auto = "auto"  # nccl with CUDA, gloo otherwise
    nccl = "nccl"
    gloo = "gloo"


class Scaling(Choice):
    weak = "weak"  # data.batch_size per process: the global batch grows with the process count
    strong = "strong"  # data.batch_size is the global batch, split over the processes


@dataclass
class DistributedConfig(Checks):
    """The `distributed` group: how many processes train together and how they talk (bench.launch)."""

    KEY = "distributed"
    name: DistributedName = DistributedName.single
    nproc_per_node: int = positive(1)  # processes (one GPU each) on this node
    nnodes: int = positive(1)
    node_rank: int = 0
    # host:port of the rendezvous; null: a free port on 127.0.0.1 (single node)
    rdzv_endpoint: Optional[str] = None
    backend: Backend = Backend.auto
    timeout_s: float = positive(300.0)  # a dead or hung rank ends the job within this
    scaling: Scaling = Scaling.weak
    gradient_as_bucket_view: bool = True
    static_graph: bool = True
    bucket_cap_mb: int = positive(25)

    @property
    def world_size(self) -> int:
        return self.nproc_per_node * self.nnodes

    def per_process(self, batch: int, world: int = 0) -> int:
        """`batch` (data.batch_size, a progressive phase's) as each of the `world` processes' (default: this
        config's): weak scaling keeps it, strong splits it (the schema refuses a batch that does not split)."""
        return batch // (world or self.world_size) if self.scaling == Scaling.strong else batch

    def rules(self) -> None:
        if self.name == DistributedName.single and self.nnodes != 1:
            self._fail("nnodes", "1 with distributed=single (more than one node needs distributed=ddp)")
        if self.name == DistributedName.single and self.world_size != 1:
            self._fail("nproc_per_node", "1 with distributed=single (multi-process runs need distributed=ddp)")
        if not 0 <= self.node_rank < self.nnodes:
            self._fail("node_rank", f"0 to {self.nnodes - 1} (distributed.nnodes - 1)")
        endpoint = self.rdzv_endpoint
        if self.nnodes > 1 and not endpoint:
            self._fail("rdzv_endpoint", "host:port of the rendezvous (node 0's address) when distributed.nnodes > 1")
        if endpoint and (":" not in endpoint or not endpoint.rsplit(":", 1)[1].isdigit()):
            self._fail("rdzv_endpoint", "host:port, e.g. node0:29500")


class SchedulerName(Choice):
    constant = "constant"
    multistep = "multistep"  # x gamma at each milestone
    cosine = "cosine"  # cosine decay to min_lr
    onecycle = "onecycle"  # torch OneCycleLR


class MilestoneUnit(Choice):
    steps = "steps"  # optimizer steps, counted from the first (warm-up included)
    epochs = "epochs"  # epoch boundaries (the ImageNet recipes: 30, 60, 80), whatever the batch and GPU count


@dataclass
class SchedulerConfig(Checks):
    """The `scheduler` group: the learning-rate schedule, stepped once per optimizer step
    (bench.train.optim)."""

    KEY = "scheduler"
    name: SchedulerName = SchedulerName.constant
    lr_warmup_steps: int = non_negative(0)  # linear warm-up from warmup_start_factor x lr, in optimizer steps
    warmup_start_factor: float = 0.01
    milestones: List[int] = field(default_factory=list)  # multistep, in milestone_unit
    milestone_unit: MilestoneUnit = MilestoneUnit.steps
    gamma: float = positive(0.1)  # multistep
    min_lr: float = non_negative(0.0)  # cosine floor
    pct_start: float = 0.3  # onecycle: share of the run spent rising
    scale_lr: bool = False  # the linear scaling rule: lr x global_batch / 256
    # Deprecated spelling of lr_warmup_steps (it read like benchmark.warmup_steps); kept one release.
    warmup_steps: Optional[int] = None

    def __post_init__(self) -> None:
        self.renamed(
            "warmup_steps", "lr_warmup_steps", "; benchmark.warmup_steps is the unmeasured steps before the window"
        )
        self.check_ranges()
        self.between("warmup_start_factor", 0, 1, "a number in [0, 1]", "[]")
        if self.name == SchedulerName.multistep:
            milestones = list(self.milestones)
            # increasing from a positive first: all positive
            if not milestones or milestones[0] <= 0 or any(a >= b for a, b in itertools.pairwise(milestones)):
                self._fail("milestones", "a non-empty increasing list of positive step numbers", milestones)
        if self.name == SchedulerName.onecycle:
            self.between("pct_start", 0, 1, "a number between 0 and 1")


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
    # the scenario: an option of the config group conf/scenario/ (`scenario=storage`; `mode=storage` too)
    mode: str = "train"
    # its class (`_target_`) and own keys: untyped while Hydra composes, its class's instance once the config
    # loads (bench.config.scenario: checked there, with that scenario's own rules)
    scenario: Any = field(default_factory=dict)
    allow_cpu: bool = False  # refuse to "benchmark" a CPU by accident
    seed: int = 0
    cudnn_benchmark: bool = True
    compile: bool = False  # torch.compile; falls back to eager (and says so) if it fails
    compile_mode: Optional[str] = None  # passed to torch.compile(mode=...)
    # torch.set_num_threads; null: torch's default on a GPU, on the CPU OMP_NUM_THREADS or what fits
    # beside the loader's workers in the usable cores (bench.runtime.device.fit_cpu)
    cpu_threads: Optional[int] = positive(None)
    cpu_malloc_reuse: bool = True  # on a CPU: glibc keeps freed memory for the next step (bench.runtime.malloc)

    def rules(self) -> None:
        world = self.distributed.world_size
        if self.distributed.scaling == Scaling.strong and self.data.batch_size % world:
            self.data._fail(
                "batch_size",
                f"a multiple of the process count ({world}) with distributed.scaling=strong (it is the global batch, "
                "split evenly over the processes)",
            )
        if self.storage.save_checkpoint or self.checkpoint.every_epochs or self.train.resume:
            self.storage.check_bucket()
        scheduler = self.scheduler
        if scheduler.name == "cosine" and not scheduler.scale_lr and scheduler.min_lr > self.optimizer.lr:
            scheduler._fail(
                "min_lr", f"a floor at most optimizer.lr={self.optimizer.lr:g} (cosine decays from lr down to min_lr)"
            )


def register_configs() -> None:
    """Store the schema; conf/config.yaml lists it first in its defaults, so every group option
    is merged into (and type-checked by) these dataclasses. `${bench.times:8,${distributed.nproc_per_node}}`
    multiplies: the Slurm presets (conf/hydra/launcher/) ask for cores and memory per process."""
    if not _STORED:  # storing converts the dataclasses (~0.1 s per compose); ConfigStore is process-wide
        ConfigStore.instance().store(name="bench_schema", node=schema())
        _STORED.append("bench_schema")
    OmegaConf.register_new_resolver("bench.times", lambda *factors: math.prod(factors), replace=True)
    # Every registered data option and storage backend (bench.registries) is a group option too:
    # `data=<name>`, `storage=<name>`. One with a YAML of its own (conf/data/<name>.yaml: defaults, a
    # comment) is that file; one without needs none.
    for group, names in (("data", DATA), ("storage", BACKENDS)):
        for name in names:
            if not os.path.exists(os.path.join(config_dir(), group, f"{name}.yaml")):
                ConfigStore.instance().store(group=group, name=name, node={"name": name})


_STORED: List[str] = []  # what this process stored in Hydra's ConfigStore already


def schema() -> DictConfig:
    """BenchConfig as a structured node, its `scenario` node open: a scenario's own keys (`scenario.steps=5`)
    are known once its class is (bench.config.scenario.typed, when the config loads)."""
    node = OmegaConf.structured(BenchConfig)
    OmegaConf.set_struct(node.scenario, False)
    return node
