"""Typed schema of a run: one dataclass per config group, registered in Hydra's ConfigStore.

Hydra merges the YAML files under conf/ into these dataclasses, so a wrong type or an
unknown key fails at composition time with the key named (keys added with `+key=...` get
past Hydra and are caught by ``bench.validate``, as are values that cannot work: zero
sizes, unknown names). This module must not import torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, List, Optional

from hydra.core.config_store import ConfigStore


@dataclass
class ModelConfig:
    arch: str = "resnet50"  # see bench.validate.MODEL_ARCHS
    num_classes: int = "${data.num_classes}"  # type: ignore[assignment]
    image_size: int = "${data.image_size}"  # type: ignore[assignment]


@dataclass
class DataConfig:
    name: str = "synthetic"  # synthetic | imagefolder | cifar100 | shards
    batch_size: int = 128  # per process
    image_size: int = 224
    num_classes: int = 1000
    # real data (ignored by synthetic): a directory, or s3://bucket/prefix for shards
    root: Optional[str] = None
    split: str = "train"  # train (random-resized crop + flip) | val (resize + center crop)
    num_workers: Optional[int] = None  # DataLoader worker processes; null: this rank's share of the CPUs, <= 8
    pin_memory: bool = True  # page-locked batches for async host-to-GPU copies (CUDA only)
    persistent_workers: bool = True  # keep workers between epochs (map-style datasets)
    prefetch_factor: int = 4  # batches each worker prepares ahead
    strict: bool = False  # a corrupt image stops the run (false: skipped and counted)
    decoder: str = "simplejpeg"  # simplejpeg (libjpeg-turbo, DCT-domain downscale) | pil


@dataclass
class PrecisionConfig:
    name: str = "fp32"  # fp32 | tf32 | amp_fp16 | bf16
    autocast_dtype: Optional[str] = None  # None | float16 | bfloat16
    grad_scaler: bool = False
    tf32: bool = False
    channels_last: bool = False


@dataclass
class OptimizerConfig:
    name: str = "sgd"  # sgd | adam | adamw | adagrad | adadelta
    lr: float = 0.1
    weight_decay: float = 1e-4
    momentum: float = 0.9
    nesterov: bool = False
    betas: List[float] = field(default_factory=lambda: [0.9, 0.999])
    eps: float = 1e-8
    exclude_bn_bias_from_wd: bool = False
    # fused/foreach kernels: null lets bench pick (fused on CUDA where torch has it)
    fused: Optional[bool] = None


@dataclass
class SchedulerConfig:
    name: str = "constant"  # constant | multistep | cosine | onecycle
    warmup_steps: int = 0  # linear warm-up from warmup_start_factor x lr
    warmup_start_factor: float = 0.01
    milestones: List[int] = field(default_factory=list)  # multistep, in optimizer steps
    gamma: float = 0.1
    min_lr: float = 0.0  # cosine floor
    pct_start: float = 0.3  # onecycle
    # the linear scaling rule: lr x global_batch / 256
    scale_lr: bool = False


@dataclass
class DistributedConfig:
    name: str = "single"  # single | ddp
    nproc_per_node: int = 1  # processes (one GPU each) on this node
    nnodes: int = 1
    node_rank: int = 0
    # host:port of the c10d rendezvous; null: a free port on 127.0.0.1 (single node)
    rdzv_endpoint: Optional[str] = None
    backend: str = "auto"  # auto (nccl with CUDA, gloo otherwise) | nccl | gloo
    timeout_s: float = 300.0  # a dead or hung rank ends the job within this
    # weak: data.batch_size is per process; strong: data.batch_size is the global batch
    scaling: str = "weak"
    gradient_as_bucket_view: bool = True
    static_graph: bool = True
    bucket_cap_mb: int = 25



@dataclass
class StorageWorkloadConfig:
    """What the storage benchmark (mode=storage) emulates: MLPerf Storage / DLIO terms."""
    name: str = "custom"  # a label for reports (the presets name their workload)
    num_files: int = 16
    samples_per_file: int = 8
    record_size: int = 65536  # bytes per sample
    record_size_stdev: int = 0  # per-file record sizes drawn from N(record_size, stdev)
    format: str = "raw"  # raw (records back to back) | npz (numpy archive, decoded on read)
    batch_size: int = 4  # samples per step of one simulated accelerator
    read_threads: int = 4  # reader threads per simulated accelerator
    prefetch: int = 2  # batches read ahead of the emulated compute
    computation_time: float = 0.0  # seconds of emulated compute per batch; 0 = I/O ceiling
    epochs: int = 1
    max_steps: Optional[int] = None  # stop each accelerator after this many steps
    shuffle: bool = True  # file order shuffled per epoch (seeded)
    seed: int = 0
    au_threshold: float = 0.9  # accelerator-utilization pass mark
    checkpoint_size_mb: float = 16.0  # checkpoint phase size; 0 skips the phase


@dataclass
class StorageConfig:
    name: str = "local"  # local | s3
    # local: a directory (null: the run's Hydra output directory); s3: unused
    root: Optional[str] = None
    save_checkpoint: bool = False
    checkpoint_name: str = "checkpoint.pt"
    fsync: bool = True
    # local reads bypass the page cache (O_DIRECT, or fadvise DONTNEED where O_DIRECT is refused)
    direct_io: bool = False
    # s3: credentials come from the AWS environment variables / profile only, never from here
    endpoint: Optional[str] = None  # null: AWS; http(s)://host:port for MinIO, Ceph, moto ...
    bucket: Optional[str] = None
    prefix: str = ""
    region: str = "us-east-1"
    client: str = "obstore"  # obstore | s3torchconnector | boto3
    max_attempts: int = 5  # tries per request (5xx, throttling, timeouts retried with backoff)
    timeout_s: float = 60.0  # per request
    connect_timeout_s: float = 5.0
    # storage benchmark (mode=storage)
    dataset_dir: str = "iobench-dataset"  # under root (local) or prefix (s3)
    prepare: str = "auto"  # auto: write the dataset unless it is there and matches | always | never
    prepare_workers: int = 4
    clients: int = 1  # reader processes (simulated accelerators), each on its own files
    workload: StorageWorkloadConfig = field(default_factory=StorageWorkloadConfig)


@dataclass
class TrainConfig:
    epochs: int = 1
    steps_per_epoch: int = 200


@dataclass
class BenchmarkConfig:
    warmup_steps: int = 10  # run before the measured window, never counted
    measure_steps: Optional[int] = None  # cap on measured steps (default: epochs x steps_per_epoch)
    measure_seconds: Optional[float] = None  # end the measured window after this long
    sync: bool = False  # synchronise the device after every step (strict, slower)
    log_every: int = 50  # steps between progress lines (the only host syncs)
    progress: bool = True  # tqdm bar on a terminal; silent otherwise


@dataclass
class TrackingConfig:
    enabled: bool = True
    experiment: str = "bench"
    uri: Optional[str] = None  # MLFLOW_TRACKING_URI wins; default sqlite:///<launch dir>/mlflow.db
    run_name: Optional[str] = None
    log_step_metrics: bool = True


@dataclass
class BenchConfig:
    defaults: List[Any] = field(default_factory=list)
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    precision: PrecisionConfig = field(default_factory=PrecisionConfig)
    optimizer: OptimizerConfig = field(default_factory=OptimizerConfig)
    scheduler: SchedulerConfig = field(default_factory=SchedulerConfig)
    distributed: DistributedConfig = field(default_factory=DistributedConfig)
    storage: StorageConfig = field(default_factory=StorageConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    benchmark: BenchmarkConfig = field(default_factory=BenchmarkConfig)
    tracking: TrackingConfig = field(default_factory=TrackingConfig)
    mode: str = "train"
    allow_cpu: bool = False
    seed: int = 0
    cudnn_benchmark: bool = True
    compile: bool = False
    compile_mode: Optional[str] = None  # passed to torch.compile(mode=...)
    cpu_threads: Optional[int] = None  # torch.set_num_threads; null keeps torch's default


def register_configs() -> None:
    """Store the schema; conf/config.yaml lists it first in its defaults so every group
    option below is merged into (and type-checked by) these dataclasses."""
    ConfigStore.instance().store(name="bench_schema", node=BenchConfig)
