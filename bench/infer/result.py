"""What an inference run measured, as plain data (torch-free: it crosses a process boundary and
is read back by the report and the tools)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional


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
    gpu: Dict[str, float] = field(default_factory=dict)
    extra: Dict[str, Any] = field(default_factory=dict)  # FLOPs per image, dataset facts
    files: List[str] = field(default_factory=list)  # the profiler's
    interrupted: Optional[str] = None  # the signal that cut the profiled batches short: the window stands, KILLED

    @property
    def images(self) -> int:
        return self.measured_steps * self.batch_size
