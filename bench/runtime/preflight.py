"""What must hold before any run of a model starts (training or inference), beyond the schema:
the dataset is on disk and decodes, the device exists and can do the precision, the model exists,
and the run fits the machine (cores, GPUs, memory). Each failure is one sentence naming the key
(exit 2), before an MLflow run is opened. Cheapest first: the dataset check needs no torch.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from bench.config import BenchConfig
from bench.config.data import Split
from bench.errors import ConfigError, ConfigProblem, DataError
from bench.machine.cpu_facts import affinity
from bench.registries import import_own
from bench.runtime.fit_watch import check_quiet, loader_workers

FLOAT32 = 4


def check_model_run(config: BenchConfig) -> Any:
    """Raise the first problem; return the device the run will use. Last, with benchmark.require_fit:
    a config that oversubscribes the cores, or a machine that stays busy (bench.runtime.fit_watch)."""
    check_dataset(config)
    import_own({"storage.name": config.storage.name, "storage.client": config.storage.client})  # checkpoints' store
    device = check_device_and_model(config)
    check_batch_fits(config, device)
    check_prefetch_fits(config)
    check_quiet(config, device)
    return device


def check_dataset(config: BenchConfig, validation: bool = False) -> None:
    """The data option's files are where it reads them (and the val split's, with `validation`)."""
    from bench.data.registry import check_location

    try:
        check_location(config.data)
        if validation:  # the val split too: its absence is found now, not after an epoch
            check_location(dataclasses.replace(config.data, split=Split.val), validation=True)
        if config.data.root and config.data.name == "shards" and (validation or config.data.root.startswith("s3://")):
            from bench.data.shardformat import check_s3_shards

            check_s3_shards(config.data.root, config.storage, [config.data.split] + ([Split.val] if validation else []))
    except DataError as exc:
        raise ConfigProblem(str(exc), "data.root", config.data.root) from None


def check_device_and_model(config: BenchConfig) -> Any:
    """The device (allow_cpu), its precision, its GPU count and cores, the model's name; the device."""
    from bench.runtime.device import check_gpu_count, resolve_device
    from bench.runtime.models import check_model
    from bench.runtime.precision import build_precision

    device = resolve_device(config.allow_cpu)
    build_precision(config.precision, device)
    check_gpu_count(config.distributed.nproc_per_node, device)
    check_cores(config, device)
    check_model(config.model)
    return device


def check_cores(config: BenchConfig, device: Any) -> None:
    """Thread, worker and CPU-rank counts beyond the cores only oversubscribe them (a thousand
    workers is a thousand processes): bounded by this machine."""
    cores = len(affinity())
    where = f"at most {cores} (the CPU cores this process may use)"
    if config.cpu_threads and config.cpu_threads > cores:
        raise ConfigError("cpu_threads", config.cpu_threads, where)
    if config.data.num_workers and config.data.num_workers > cores:
        raise ConfigError("data.num_workers", config.data.num_workers, where)
    if device.type == "cpu" and config.distributed.nproc_per_node > cores:
        raise ConfigError(
            "distributed.nproc_per_node",
            config.distributed.nproc_per_node,
            f"{where} on a CPU, where each rank needs a core of its own",
        )


def _memory_bytes(device: Any) -> int:
    if device.type == "cuda":
        import torch

        return int(torch.cuda.mem_get_info(device)[1])
    import psutil

    return int(psutil.virtual_memory().total)


def check_batch_fits(config: BenchConfig, device: Any) -> None:
    """One input batch (float32 NCHW) larger than the device's whole memory cannot run: say so
    with the key to change, instead of an allocator error naming no key. (Activations need far
    more; this only catches what can never fit.)"""
    batch = config.distributed.per_process(config.data.batch_size)
    image = 3 * config.data.image_size**2 * FLOAT32
    memory = _memory_bytes(device)
    where = "the GPU" if device.type == "cuda" else "this machine"
    if image > memory // 16:
        raise ConfigError(
            "data.image_size",
            config.data.image_size,
            f"a size whose images fit in memory: one {config.data.image_size}x{config.data.image_size} "
            f"image is {image / 2**30:.1f} GiB of float32 and {where} has {memory / 2**30:.1f} GiB",
        )
    if batch * image > memory:
        raise ConfigError(
            "data.batch_size",
            config.data.batch_size,
            f"a batch that fits in memory: {batch} images of 3x{config.data.image_size}"
            f"x{config.data.image_size} float32 are {batch * image / 2**30:.1f} GiB and {where} has "
            f"{memory / 2**30:.1f} GiB (at most {memory // image} per process)",
        )


def check_prefetch_fits(config: BenchConfig) -> None:
    """Real data: each loader worker of each rank on this node holds prefetch_factor uint8 batches
    ahead; all of them must fit in half of this machine's memory (the rest is the run's)."""
    data = config.data
    if data.synthetic or data.num_workers == 0:
        return
    import psutil

    ranks = config.distributed.nproc_per_node
    workers = loader_workers(config, ranks)
    batch_bytes = config.distributed.per_process(config.data.batch_size) * 3 * data.image_size**2
    budget = int(psutil.virtual_memory().total) // 2
    most = budget // max(1, ranks * workers * batch_bytes)
    if data.prefetch_factor > most:
        raise ConfigError(
            "data.prefetch_factor",
            data.prefetch_factor,
            f"at most {most} here: {ranks} process(es) x {workers} loader workers x prefetch_factor "
            f"batches of {batch_bytes / 2**20:.1f} MiB must fit in half of this machine's "
            f"{2 * budget / 2**30:.1f} GiB",
        )
