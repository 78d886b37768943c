"""What an inference run measured, as plain data (torch-free: it crosses a process boundary and
is read back by the report and the tools)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Dict, List, Optional

from bench.machine.gpu_monitor import GpuFigures
from bench.results import SPREAD, Record

if TYPE_CHECKING:
    from bench.machine.fitness import Verdict


@dataclass
class InferResult:
    """What an inference run measured, as plain data (it crosses a process boundary)."""

    batch_size: int
    warmup_steps: int
    measured_steps: int  # batches
    window_seconds: float
    latency_ms: List[float]  # per measured batch
    data_wait_ms: List[float]
    peak_memory_bytes: int
    parameters: int
    precision: Dict[str, Any]
    compile: Dict[str, Any]
    repeat_images: List[int] = field(default_factory=list)
    repeat_seconds: List[float] = field(default_factory=list)
    gpu: GpuFigures = field(default_factory=GpuFigures)  # NVML samples and energy from the window
    extra: Dict[str, Any] = field(default_factory=dict)  # FLOPs per image, dataset facts
    files: List[str] = field(default_factory=list)  # the profiler's
    interrupted: Optional[str] = None  # the signal that cut the profiled batches short: the window stands, KILLED
    fit: Optional[Verdict] = None  # this rank's fit-to-measure verdict (bench.runtime.fit_watch; None: not watched)

    @property
    def images(self) -> int:
        return self.measured_steps * self.batch_size


@dataclass
class InferOutcome:
    """What the inference rank hands the reporting process."""

    result: InferResult
    device: str  # cpu | cuda
    device_name: str


@dataclass(kw_only=True)
class InferMetrics(Record):
    """An inference run's figures: the `radix_metrics` contract, field by field in the order they
    are written; None fields are left out."""

    mode: str = "inference"
    images_per_second: float
    total_images: int
    elapsed_seconds: float
    batch_size: int
    global_batch_size: int
    measured_steps: int  # batches
    warmup_steps: int
    world_size: int = 1
    images_per_second_per_device: float
    latency_ms_mean: Optional[float] = None  # per-batch latency (none without a measured batch)
    latency_ms_p50: Optional[float] = None
    latency_ms_p95: Optional[float] = None
    latency_ms_p99: Optional[float] = None
    latency_ms_min: Optional[float] = None
    latency_ms_max: Optional[float] = None
    data_wait_seconds: float
    data_wait_fraction: float
    peak_memory_mb: float
    parameters: int
    model: str
    data: str
    image_size: int
    precision: Optional[str] = None  # the precision policy (describe())
    autocast_dtype: Optional[str] = None
    grad_scaler: Optional[bool] = None
    tf32: Optional[bool] = None
    channels_last: Optional[bool] = None
    compile: bool
    cudnn_benchmark: bool
    cpu_malloc_reuse: Optional[bool] = None  # on a CPU: freed memory kept for reuse (bench.runtime.malloc)
    device: str
    device_name: str
    au: float
    input_bound: bool
    compile_fallback: Optional[str] = None
    gpu: Dict[str, Any] = field(default_factory=dict, metadata=SPREAD)  # NVML samples and energy
    extra: Dict[str, Any] = field(default_factory=dict, metadata=SPREAD)  # FLOPs per image, dataset facts
    repeats: Optional[int] = None  # benchmark.repeats > 1
    images_per_second_median: Optional[float] = None
    images_per_second_min: Optional[float] = None
    images_per_second_max: Optional[float] = None
    images_per_second_iqr: Optional[float] = None
    images_per_second_ci95_low: Optional[float] = None
    images_per_second_ci95_high: Optional[float] = None
    images_per_second_ci95_halfwidth_pct: Optional[float] = None
    images_per_second_cv: Optional[float] = None
    stable: Optional[bool] = None
    efficiency: Dict[str, Any] = field(default_factory=dict, metadata=SPREAD)  # achieved TFLOP/s, MFU, images per joule
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
