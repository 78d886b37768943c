"""Device policy: CUDA when present; the CPU only when the user says so (allow_cpu=true). And
what a run of a model sets on its process before building anything (seed, threads, cuDNN)."""

from __future__ import annotations

import os
import resource
from typing import Optional

import torch

from bench.config import BenchConfig
from bench.errors import ConfigError, DeviceError
from bench.rank_context import RankContext
from bench.runtime.malloc import keep_freed_memory


def resolve_device(allow_cpu: bool) -> torch.device:
    if torch.cuda.is_available():
        # One GPU per process: LOCAL_RANK is set by torchrun / the DDP launcher, 0 otherwise.
        index = int(os.environ.get("LOCAL_RANK", "0"))
        torch.cuda.set_device(index)
        return torch.device("cuda", index)
    if not allow_cpu:
        raise DeviceError(
            "CUDA not available and allow_cpu=false: pass allow_cpu=true "
            "(or use +experiment=cpu_smoke) to run on the CPU.",
            "allow_cpu",
            False,
            "true where no CUDA GPU is visible",
        )
    return torch.device("cpu")


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return "cpu"


def check_gpu_count(nproc_per_node: int, device: torch.device) -> None:
    if device.type == "cuda" and nproc_per_node > torch.cuda.device_count():
        raise ConfigError(
            "distributed.nproc_per_node",
            nproc_per_node,
            f"at most {torch.cuda.device_count()} (the GPUs visible on this node; one per process)",
        )


def peak_memory_bytes(device: torch.device) -> int:
    if device.type == "cuda":
        return int(torch.cuda.max_memory_allocated(device))
    # ru_maxrss is in KiB on Linux: the process's resident-set high-water mark.
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


def prepare_process(config: BenchConfig, device: torch.device, ctx: RankContext) -> None:
    """The seed, the CPU threads, the allocator, cuDNN's autotuner and a fresh peak-memory count,
    before the model is built."""
    torch.manual_seed(config.seed)
    threads = cpu_threads(config, device, ctx)
    if threads:
        torch.set_num_threads(threads)
    if device.type == "cpu" and config.cpu_malloc_reuse:
        keep_freed_memory()
    torch.backends.cudnn.benchmark = bool(config.cudnn_benchmark)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def cpu_threads(config: BenchConfig, device: torch.device, ctx: RankContext) -> Optional[int]:
    """CPU ranks share the cores: without a split each would start one thread per core and
    oversubscribe (torchrun sets OMP_NUM_THREADS=1 for the same reason). One process: cpu_threads."""
    if config.cpu_threads or device.type != "cpu" or not ctx.distributed:
        return config.cpu_threads
    return max(1, (os.cpu_count() or 1) // config.distributed.nproc_per_node)
