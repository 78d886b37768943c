"""Device policy: CUDA when present; the CPU only when the user says so (allow_cpu=true). And
what a run of a model sets on its process before building anything (seed, threads, cuDNN)."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import resource
from typing import Iterator, Optional, Tuple

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
    if config.cpu_threads:
        torch.set_num_threads(config.cpu_threads)
    if device.type == "cpu" and config.cpu_malloc_reuse:
        keep_freed_memory()
    torch.backends.cudnn.benchmark = bool(config.cudnn_benchmark)
    if device.type == "cuda":
        # reset_peak_memory_stats does not start CUDA itself: first in a process (bench.api.run, a
        # test), it raised "Invalid device argument" on the H200 of 2026-11-30
        torch.cuda.init()
        torch.cuda.reset_peak_memory_stats(device)


def fit_cpu(config: BenchConfig, device_type: str) -> Tuple[BenchConfig, str]:
    """On the CPU, the cpu_threads and data.num_workers left unset (null; the threads also where
    OMP_NUM_THREADS sets them, as torch reads it) become a split of the usable cores
    (bench.machine.fitness.cpu_split): torch's default (a thread per core) beside a worker per
    core would oversubscribe them, and CPU ranks would each start a thread per core. (The config
    to run, both keys set; the sentence naming what bench chose, "" when it chose nothing.) On a
    GPU the torch threads idle and fewer workers would starve it: the config is left as it is."""
    data, given = config.data, config.cpu_threads or omp_threads()
    if device_type != "cpu":
        return config, ""
    from bench.machine.fitness import affinity, cpu_split, usable_cores

    usable = usable_cores(affinity())
    ranks = config.distributed.nproc_per_node if config.distributed.world_size > 1 else 1
    threads, workers = cpu_split(usable, ranks, given, data.num_workers, not data.synthetic)
    chosen = [f"cpu_threads={threads}"] if given is None else []
    if not data.synthetic and data.num_workers is None:
        chosen.append(f"data.num_workers={workers}")
        data = dataclasses.replace(data, num_workers=workers)
    per_rank = " per rank" if ranks > 1 else ""
    beside = f" beside OMP_NUM_THREADS={given}" if given and config.cpu_threads is None else ""
    said = f"{' and '.join(chosen)}{per_rank}: bench's choice on the CPU, to fit the {usable:g} usable cores"
    said += f"{beside} (set them to choose)"
    return dataclasses.replace(config, cpu_threads=threads, data=data), said if chosen else ""


def omp_threads() -> Optional[int]:
    """OMP_NUM_THREADS when set to a count: torch's threads, as the user (or a launcher) chose them."""
    text = os.environ.get("OMP_NUM_THREADS", "").strip()
    return int(text) if text.isdigit() and int(text) > 0 else None


@contextlib.contextmanager
def process_restored() -> Iterator[None]:
    """The caller's process state as it was, after a run that sets it: os.environ (MLflow's retry
    and print settings), torch's thread count, global RNGs, cuDNN and TF32 flags. (glibc's mallopt,
    cpu_malloc_reuse, cannot be undone: docs/training.md.)"""
    cudnn, matmul = torch.backends.cudnn, torch.backends.cuda.matmul
    environ, threads = dict(os.environ), torch.get_num_threads()
    flags = cudnn.benchmark, cudnn.allow_tf32, matmul.allow_tf32
    devices = range(torch.cuda.device_count()) if torch.cuda.is_initialized() else []
    with torch.random.fork_rng(devices):  # the global RNGs (CPU, and the GPUs' once CUDA is up)
        try:
            yield
        finally:
            for key in set(os.environ) - set(environ):
                del os.environ[key]
            os.environ.update({key: value for key, value in environ.items() if os.environ.get(key) != value})
            torch.set_num_threads(threads)
            cudnn.benchmark, cudnn.allow_tf32, matmul.allow_tf32 = flags
