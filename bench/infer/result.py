"""What an inference run measured, as plain data (torch-free: it crosses a process boundary and
is read back by the report and the tools)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from bench.results import INLINE, SPREAD, FitFigures, Record, RepeatFigures, shown
from bench.runtime.reporting import Execution, ModelOutcome, ModelResult


@dataclass(kw_only=True)
class InferResult(ModelResult):
    """What an inference run measured, as plain data (it crosses a process boundary)."""

    latency_ms: List[float] = field(default_factory=list)  # per measured batch
    extra: Dict[str, Any] = field(default_factory=dict)  # FLOPs per image, dataset facts

    @property
    def timeline_ms(self) -> List[float]:
        return self.latency_ms


InferOutcome = ModelOutcome[InferResult]  # one rank's


@dataclass(kw_only=True)
class InferMetrics(Record):
    """An inference run's figures: the `radix_metrics` contract, field by field in the order they
    are written; None fields are left out."""

    mode: str = shown(default="inference", tag=True)
    images_per_second: float = shown("images/s", "{:.1f}", at=4)
    total_images: int
    elapsed_seconds: float
    batch_size: int = shown("batch", at=3)
    global_batch_size: int
    measured_steps: int  # batches
    warmup_steps: int
    world_size: int = 1
    images_per_second_per_device: float
    latency_ms_mean: Optional[float] = None  # per-batch latency (none without a measured batch)
    # compare: the per-batch latency (ms, its median; lower is better), else the run's p50
    latency_ms_p50: Optional[float] = shown(
        "latency p50 ms",
        "{:.2f}",
        at=5,
        default=None,
        sample={"unit": "ms", "timeline_is_figure": True, "lower_is_better": True, "from_repeats": False},
    )
    latency_ms_p95: Optional[float] = shown("latency p95 ms", "{:.2f}", at=6, default=None)
    latency_ms_p99: Optional[float] = shown("latency p99 ms", "{:.2f}", at=7, default=None)
    latency_ms_min: Optional[float] = None
    latency_ms_max: Optional[float] = None
    data_wait_seconds: float
    data_wait_fraction: float
    peak_memory_mb: float
    parameters: int
    model: str = shown("model", at=1, tag=True)
    data: str
    image_size: int
    execution: Execution = field(metadata=INLINE)  # precision, compile, device, AU
    gpu: Dict[str, Any] = field(default_factory=dict, metadata=SPREAD)  # NVML samples and energy
    extra: Dict[str, Any] = field(default_factory=dict, metadata=SPREAD)  # FLOPs per image, dataset facts
    repeat: RepeatFigures = field(default_factory=RepeatFigures, metadata=INLINE)  # benchmark.repeats > 1
    efficiency: Dict[str, Any] = field(default_factory=dict, metadata=SPREAD)  # achieved TFLOP/s, MFU, images per joule
    fit: FitFigures = field(default_factory=FitFigures, metadata=INLINE)  # fit to measure, last
