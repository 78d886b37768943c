"""The precision group applied to a device: autocast dtype, loss scaling, TF32 and memory format."""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass
from typing import Any, Optional

import torch

from bench.config.schema import AutocastDtype, PrecisionConfig, PrecisionName
from bench.errors import ConfigError

log = logging.getLogger(__name__)

_DTYPES = {AutocastDtype.float16: torch.float16, AutocastDtype.bfloat16: torch.bfloat16}


@dataclass
class PrecisionPolicy:
    name: str
    device_type: str
    autocast_dtype: Optional[torch.dtype]
    scaler: Optional[torch.amp.GradScaler]
    memory_format: torch.memory_format
    tf32: bool  # effective: False where the hardware has no TF32

    def autocast(self) -> Any:
        if self.autocast_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device_type, dtype=self.autocast_dtype)

    def describe(self) -> dict:
        return {
            "precision": self.name,
            "autocast_dtype": str(self.autocast_dtype).replace("torch.", "") if self.autocast_dtype else "none",
            "grad_scaler": self.scaler is not None,
            "tf32": self.tf32,
            "channels_last": self.memory_format == torch.channels_last,
        }


def build_precision(cfg: PrecisionConfig, device: torch.device) -> PrecisionPolicy:
    """Check the precision against the device and switch the backend flags it needs."""
    dtype = _DTYPES[cfg.autocast_dtype] if cfg.autocast_dtype else None
    name = str(cfg.name)
    if device.type == "cpu" and dtype == torch.float16:
        if cfg.name == PrecisionName.amp_fp16:  # the option itself cannot run here
            raise ConfigError("precision", name, "fp32, tf32 or bf16 on a CPU (amp_fp16 needs a CUDA GPU)")
        raise ConfigError(
            "precision.autocast_dtype",
            str(cfg.autocast_dtype),
            "null or bfloat16 on a CPU (float16 autocast needs a CUDA GPU)",
        )
    native_bf16 = device.type != "cuda" or torch.cuda.is_bf16_supported(including_emulation=False)
    if dtype == torch.bfloat16 and not native_bf16:
        gpu = torch.cuda.get_device_name(device)
        raise ConfigError("precision", name, f"fp32, tf32 or amp_fp16 on {gpu}, which has no native bfloat16")

    tf32 = bool(cfg.tf32)
    if tf32 and device.type == "cpu":
        if cfg.name == PrecisionName.tf32:
            log.warning("precision=tf32 has no effect on a CPU: this run computes in plain fp32")
        tf32 = False
    if tf32 and device.type == "cuda" and torch.cuda.get_device_capability(device)[0] < 8:
        log.warning("TF32 needs an Ampere or newer GPU; this one computes in plain fp32")
        tf32 = False
    if device.type == "cuda":
        # PyTorch leaves TF32 on for cuDNN convolutions by default: fp32 here means real fp32.
        torch.backends.cuda.matmul.allow_tf32 = tf32
        torch.backends.cudnn.allow_tf32 = tf32

    scaler = torch.amp.GradScaler(device.type) if cfg.grad_scaler else None
    memory_format = torch.channels_last if cfg.channels_last else torch.contiguous_format
    return PrecisionPolicy(name, device.type, dtype, scaler, memory_format, tf32)
