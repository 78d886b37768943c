"""Device policy: CUDA when present; the CPU only when the user says so (allow_cpu=true)."""

from __future__ import annotations

import os
import resource

import torch

from bench.errors import ConfigError, DeviceError


def resolve_device(allow_cpu: bool) -> torch.device:
    if torch.cuda.is_available():
        # One GPU per process: LOCAL_RANK is set by torchrun / the DDP launcher, 0 otherwise.
        index = int(os.environ.get("LOCAL_RANK", "0"))
        torch.cuda.set_device(index)
        return torch.device("cuda", index)
    if not allow_cpu:
        raise DeviceError("CUDA not available and allow_cpu=false: pass allow_cpu=true "
                          "(or use +experiment=cpu_smoke) to run on the CPU.")
    return torch.device("cpu")


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return "cpu"


def check_gpu_count(nproc_per_node: int, device: torch.device) -> None:
    if device.type == "cuda" and nproc_per_node > torch.cuda.device_count():
        raise ConfigError("distributed.nproc_per_node", nproc_per_node,
                          f"at most {torch.cuda.device_count()} (the GPUs visible on this node; one per process)")


def peak_memory_bytes(device: torch.device) -> int:
    if device.type == "cuda":
        return int(torch.cuda.max_memory_allocated(device))
    # ru_maxrss is in KiB on Linux: the process's resident-set high-water mark.
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024
