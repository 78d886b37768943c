"""What a training rank measured, as plain data (torch-free: it crosses process boundaries
and is read back by the report)."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, Dict, List, Optional

from bench.machine.gpu_monitor import GpuFigures
from bench.results import KEPT, SPREAD, Record
from bench.train.extras import RunExtras

if TYPE_CHECKING:
    from bench.machine.fitness import Verdict


@dataclass
class EpochRecord:
    epoch: int
    steps: int
    images: int
    seconds: float
    images_per_second: float
    loss: float
    lr: float
    step_time_ms_p50: Optional[float]  # None for an epoch without a measured step
    # the epoch's seconds split (seed 003's C2 table): waiting for the next batch on the host, and the rest
    data_wait_seconds: Optional[float] = None
    compute_seconds: Optional[float] = None
    # evaluated epochs (train.eval_every): accuracy, and seconds since the first training step
    val_top1: Optional[float] = None
    val_top5: Optional[float] = None
    eval_seconds: Optional[float] = None
    wall_seconds: Optional[float] = None
    # progressive resizing (data.progressive): the phase this epoch trained in
    image_size: Optional[int] = None
    batch_size: Optional[int] = None
    # benchmark.repeats > 1: the repeat (from 1) this epoch was measured in
    repeat: Optional[int] = None


@dataclass
class Accuracy:
    """A run's accuracy figures from its evaluated epochs (bench.train.evaluate.accuracy_figures): the
    last evaluation, the best, what evaluating cost; time to target where train.target_accuracy is set."""

    val_top1: Optional[float]
    val_top5: Optional[float]
    val_top1_best: float
    eval_seconds: float
    evaluations: int
    train_wall_seconds: float
    val_images: Optional[int] = None  # every val image counted once, over all ranks
    target_accuracy: Optional[float] = None  # train.target_accuracy; the three below only with one
    reached_target: Optional[bool] = None
    time_to_target_seconds: Optional[float] = None  # None (null) when the target was not reached
    epochs_to_target: Optional[int] = None

    def figures(self) -> Dict[str, Any]:
        """The record's accuracy figures, in field order: val_images only when counted, the target's
        four only with a target (its time and epochs null when it was not reached)."""
        targets = ("target_accuracy", "reached_target", "time_to_target_seconds", "epochs_to_target")
        return {
            f.name: getattr(self, f.name)
            for f in fields(self)
            if not (f.name == "val_images" and self.val_images is None)
            and not (f.name in targets and self.target_accuracy is None)
        }


@dataclass
class Window:
    """One measured window's figures (bench.train.epochs), or several windows pooled into one
    (bench.train.repeats: benchmark.repeats > 1); what the run's TrainResult is built from."""

    measured_steps: int
    measured_images: int  # images of the measured steps (the batch changes with data.progressive)
    window_seconds: float
    step_times_ms: List[float]
    data_wait_ms: List[float]
    epochs: List[EpochRecord]
    final_lr: float
    final_loss: float
    accuracy: Optional[Accuracy]  # val top-1/top-5, time-to-target (None: nothing evaluated)
    repeat_images: List[int] = field(default_factory=list)  # per measured window (benchmark.repeats)
    repeat_seconds: List[float] = field(default_factory=list)


@dataclass
class TrainResult:
    batch_size: int  # per process
    warmup_steps: int
    measured_steps: int
    window_seconds: float
    step_times_ms: List[float]
    data_wait_ms: List[float]
    epochs: List[EpochRecord]
    base_lr: float
    final_lr: float
    final_loss: float
    peak_memory_bytes: int
    parameters: int
    precision: Dict[str, Any]
    compile: Dict[str, Any] = field(default_factory=dict)
    fused_optimizer: bool = False
    param_checksum: float = 0.0  # sum of all weights after training: equal on every rank when DDP synced them
    gpu: GpuFigures = field(default_factory=GpuFigures)  # NVML samples and energy from the window
    extra: RunExtras = field(default_factory=RunExtras)  # dataset facts, checkpoint write figures, ...
    accuracy: Optional[Accuracy] = None  # val top-1/top-5, time-to-target (None: nothing evaluated)

    measured_images: int = 0  # images of the measured steps (the batch changes with data.progressive)
    repeat_images: List[int] = field(default_factory=list)  # per measured window (benchmark.repeats)
    repeat_seconds: List[float] = field(default_factory=list)
    files: List[str] = field(default_factory=list)  # written by the rank after the window (profiler trace, table)
    interrupted: Optional[str] = None  # the signal (SIGTERM, SIGINT) that cut the passes after the window short
    fit: Optional[Verdict] = None  # this rank's fit-to-measure verdict (bench.runtime.fit_watch; None: not watched)

    @property
    def images(self) -> int:
        return self.measured_images or self.measured_steps * self.batch_size


@dataclass
class RankSummary:
    """One rank's timing, exchanged once after the window."""

    rank: int
    host: str
    images: int
    window_seconds: float
    step_times_ms: List[float]
    data_wait_ms: List[float]
    peak_memory_bytes: int
    param_checksum: float
    repeat_images: List[int] = field(default_factory=list)
    repeat_seconds: List[float] = field(default_factory=list)
    fit: Optional[Verdict] = None  # this rank's fit-to-measure verdict (bench.runtime.fit_watch; None: not watched)

    @property
    def images_per_second(self) -> float:
        return self.images / self.window_seconds if self.window_seconds > 0 else 0.0


@dataclass
class TrainOutcome:
    """What rank 0 hands the reporting process."""

    result: TrainResult
    ranks: List[RankSummary]
    device: str  # cpu | cuda
    device_name: str


@dataclass(kw_only=True)
class TrainMetrics(Record):
    """A training run's figures: the `radix_metrics` contract (final line, summary.csv, MLflow),
    field by field in the order they are written; None fields are left out."""

    images_per_second: float  # global: the sum over ranks
    total_images: int
    elapsed_seconds: float
    lr: float
    batch_size: int  # per process
    global_batch_size: int
    epochs: int
    steps_per_epoch: Optional[int] = field(default=None, metadata=KEPT)  # null: one pass, before any epoch ran
    measured_steps: int
    warmup_steps: int
    world_size: int
    images_per_second_per_device: float
    distributed: str
    scaling: str
    # world_size > 1: per-rank throughput (a straggler shows) and whether DDP kept the weights equal
    rank_images_per_second_min: Optional[float] = None
    rank_images_per_second_max: Optional[float] = None
    rank_slowest: Optional[int] = None
    rank_spread: Optional[float] = None
    params_in_sync: Optional[bool] = None
    step_time_ms_mean: Optional[float] = None  # the step-time spread (none without measured steps)
    step_time_ms_p50: Optional[float] = None
    step_time_ms_p95: Optional[float] = None
    step_time_ms_p99: Optional[float] = None
    step_time_ms_min: Optional[float] = None
    step_time_ms_max: Optional[float] = None
    step_time_ms_std: Optional[float] = None
    step_time_cv: Optional[float] = None
    unstable: bool = False  # the step times spread more than bench.maths.stats.UNSTABLE_CV
    data_wait_seconds: float
    data_wait_fraction: float
    peak_memory_mb: float
    final_loss: float
    final_lr: float
    parameters: int
    param_checksum: float  # sum of the final weights: equal runs end equal
    model: str
    data: str
    image_size: int
    optimizer: str
    nesterov: Optional[bool] = None  # optimizer=sgd only: Nesterov momentum on or off
    norm: Optional[str] = None  # model.norm: batch (the models' own) or none (normalisation layers removed)
    fused_optimizer: bool
    precision: Optional[str] = None  # the precision policy (bench.train.precision: describe())
    autocast_dtype: Optional[str] = None
    grad_scaler: Optional[bool] = None
    tf32: Optional[bool] = None
    channels_last: Optional[bool] = None
    compile: bool
    cudnn_benchmark: bool
    cpu_malloc_reuse: Optional[bool] = None  # on a CPU: freed memory kept for reuse (bench.runtime.malloc)
    device: str
    device_name: str
    au: float  # accelerator utilization: the share of the window not spent waiting for data
    input_bound: bool
    compile_fallback: Optional[str] = None
    compile_s: Optional[float] = None  # torch.compile's first call (the compile), outside the window
    gpu: Dict[str, Any] = field(default_factory=dict, metadata=SPREAD)  # NVML samples and energy of rank 0's GPU
    # dataset facts, FLOPs per image, the batch find_max_batch found, checkpoint figures, accuracy
    extra: Dict[str, Any] = field(default_factory=dict, metadata=SPREAD)
    repeats: Optional[int] = None  # benchmark.repeats > 1: the windows' spread and the median's interval
    images_per_second_median: Optional[float] = None
    images_per_second_min: Optional[float] = None
    images_per_second_max: Optional[float] = None
    images_per_second_iqr: Optional[float] = None
    images_per_second_ci95_low: Optional[float] = None
    images_per_second_ci95_high: Optional[float] = None
    images_per_second_ci95_halfwidth_pct: Optional[float] = None
    images_per_second_cv: Optional[float] = None
    stable: Optional[bool] = None
    # achieved TFLOP/s, MFU where the peak is known, images per joule
    efficiency: Dict[str, Any] = field(default_factory=dict, metadata=SPREAD)
    # fit to measure (bench.machine.fitness): the verdict on the machine during the window, its
    # reasons ('; '-joined, empty when fit) and notes, and the figures behind them
    fit_to_measure: Optional[bool] = None
    fit_reasons: Optional[str] = None
    fit_notes: Optional[str] = None
    fit_other_cpu_cores: Optional[float] = None  # CPU used by processes outside the run, in cores
    fit_usable_cores: Optional[float] = None  # affinity, capped by the cgroup CPU quota
    fit_cpu_demand: Optional[int] = None  # threads x ranks + loader workers on this host
    fit_load_average: Optional[float] = None  # 1-minute, at the window's start
    fit_swap_in_mb: Optional[float] = None
    fit_gpu_sm_clock_ratio: Optional[float] = None  # mean SM clock over the window / max

    def figure(self, name: str) -> Any:
        """One of the open-ended figures (gpu, extra, efficiency) by name; None when the run has none."""
        for group in (self.gpu, self.extra, self.efficiency):
            if name in group:
                return group[name]
        return None
