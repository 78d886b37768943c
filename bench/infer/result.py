"""What an inference run measured, as plain data (torch-free: it crosses a process boundary and
is read back by the report and the tools)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Dict, List, Optional

from bench.machine.gpu_monitor import GpuFigures
from bench.results import INLINE, SPREAD, FitFigures, Record, RepeatFigures
from bench.runtime.reporting import Execution

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
    execution: Execution = field(metadata=INLINE)  # precision, compile, device, AU
    gpu: Dict[str, Any] = field(default_factory=dict, metadata=SPREAD)  # NVML samples and energy
    extra: Dict[str, Any] = field(default_factory=dict, metadata=SPREAD)  # FLOPs per image, dataset facts
    repeat: RepeatFigures = field(default_factory=RepeatFigures, metadata=INLINE)  # benchmark.repeats > 1
    efficiency: Dict[str, Any] = field(default_factory=dict, metadata=SPREAD)  # achieved TFLOP/s, MFU, images per joule
    fit: FitFigures = field(default_factory=FitFigures, metadata=INLINE)  # fit to measure, last
