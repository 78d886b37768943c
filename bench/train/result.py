"""What a training rank measured, as plain data (torch-free: it crosses process boundaries
and is read back by the report)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional


@dataclass
class EpochRecord:
    epoch: int
    steps: int
    images: int
    seconds: float
    images_per_second: float
    loss: float
    lr: float
    step_time_ms_p50: float
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
    gpu: Dict[str, float] = field(default_factory=dict)  # NVML samples from the window
    extra: Dict[str, Any] = field(default_factory=dict)  # dataset facts, checkpoint write figures
    accuracy: Dict[str, Any] = field(default_factory=dict)  # val top-1/top-5, time-to-target (bench.train.epochs)

    measured_images: int = 0  # images of the measured steps (the batch changes with data.progressive)
    repeat_images: List[int] = field(default_factory=list)  # per measured window (benchmark.repeats)
    repeat_seconds: List[float] = field(default_factory=list)
    files: List[str] = field(default_factory=list)  # written by the rank after the window (profiler trace, table)
    interrupted: Optional[str] = None  # the signal (SIGTERM, SIGINT) that cut the passes after the window short

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
