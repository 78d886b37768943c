"""The `precision` group: autocast dtype, loss scaling, TF32 and memory format.

Whether the device can do it (fp16 needs CUDA, bf16 needs Ampere+ or a CPU) is checked
against the device before the run starts (bench.train.precision)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from bench.config.fields import Checks, Choice


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
    KEY = "precision"
    name: PrecisionName = PrecisionName.fp32
    autocast_dtype: Optional[AutocastDtype] = None
    grad_scaler: bool = False
    tf32: bool = False
    channels_last: bool = False

    def __post_init__(self) -> None:
        if self.grad_scaler and self.autocast_dtype != AutocastDtype.float16:
            self._fail("grad_scaler", "true only with precision.autocast_dtype=float16")
