"""What the schema cannot know about a storage run: how many clients the launcher brings, the
machine's memory (the dataset's plan, the accelerator processes, their buffers), the free space
of a local disk (bench.iobench.diskplan), and the dataset size an MLPerf result needs (a warning,
not a refusal). The store itself is checked when it is opened (one LIST)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Optional

import psutil

from bench.config import BenchConfig
from bench.config.storage import CheckpointWriters, ReadMode
from bench.errors import ConfigError
from bench.iobench.formats.registry import format_for
from bench.iobench.qualify import dataset_size, host_memory
from bench.registries import import_own

log = logging.getLogger(__name__)


# Memory bench holds per dataset file (its plan, the manifest, each accelerator's shard; measured
# about 0.6 KiB for the plan and the manifest) and per accelerator process (Python, numpy and
# torch for the checkpoints: about 290 MiB unshared, measured).
BYTES_PER_FILE = 2048
BYTES_PER_ACCELERATOR = 300 * 2**20


def check_storage_run(config: BenchConfig, clients: int, ranked: bool, run_dir: Optional[Path] = None) -> None:
    storage, workload = config.storage, config.storage.workload
    format_for(workload.format)  # a Format of the user's own (module:Class) imported now: one line if it fails
    import_own({"storage.name": storage.name, "storage.client": storage.client})
    if ranked:
        if storage.accelerators != 1:
            raise ConfigError(
                "storage.accelerators",
                storage.accelerators,
                "1 with distributed=ddp: each rank is one simulated accelerator "
                "(distributed.nproc_per_node per host x distributed.nnodes hosts)",
            )
        if config.distributed.nnodes > 1 and storage.name == "local" and storage.root is None:
            raise ConfigError(
                "storage.root",
                None,
                "a directory every host sees (a shared file system), or storage=s3, with several hosts",
            )
        if not workload.checkpoint_only:
            storage.check_clients(clients, "distributed.nproc_per_node")
    local_clients = config.distributed.nproc_per_node if ranked else storage.accelerators
    ram = psutil.virtual_memory().total
    _check_counts(config, ranked, ram)
    _check_read_buffers(config, local_clients, ram)
    _check_checkpoint_memory(config, clients, local_clients, ram)
    if run_dir is not None or storage.root is not None:  # where the run writes is known
        from bench.iobench.diskplan import check_disk_space

        check_disk_space(storage, run_dir or Path.cwd(), clients)
    hosts = config.distributed.nnodes if ranked else 1
    size = dataset_size(storage, clients, hosts, host_memory(storage))
    if not workload.checkpoint_only and workload.num_files < size.min_files:
        log.warning(
            "storage.workload.num_files=%d is below MLPerf's dataset size for %d host(s): %s "
            "(python -m bench.tools.storage_size prints it for other hosts)",
            workload.num_files,
            hosts,
            size.explain(hosts, host_memory(storage), clients),
        )


def _check_counts(config: BenchConfig, ranked: bool, ram: int) -> None:
    """Files and accelerator processes bounded by this machine's memory (before anything is planned)."""
    storage, workload = config.storage, config.storage.workload
    most_files = ram // BYTES_PER_FILE
    if not workload.checkpoint_only and workload.num_files + workload.eval_num_files > most_files:
        raise ConfigError(
            "storage.workload.num_files",
            workload.num_files,
            f"an integer in [1, {most_files - workload.eval_num_files}] on this machine (bench keeps "
            f"about {BYTES_PER_FILE // 1024} KiB per file in memory: its plan, manifest and shards; "
            f"{ram / 2**30:.1f} GiB here)",
        )
    most_processes = max(1, ram // BYTES_PER_ACCELERATOR)
    if not ranked and storage.accelerators > most_processes:
        raise ConfigError(
            "storage.accelerators",
            storage.accelerators,
            f"an integer in [1, {most_processes}] on this machine (each simulated accelerator is a "
            f"process of about {BYTES_PER_ACCELERATOR // 2**20} MiB; {ram / 2**30:.1f} GiB here)",
        )


def _check_read_buffers(config: BenchConfig, local_clients: int, ram: int) -> None:
    """Each reader (a thread or a process) reads into a buffer of its own, as large as its largest read."""
    workload = config.storage.workload
    if workload.checkpoint_only:
        return
    largest = workload.record_size + 3 * workload.record_size_stdev
    whole = workload.read_mode != ReadMode.sample
    held = largest * (workload.samples_per_file if whole else 1) * workload.read_threads * local_clients
    if held > ram:
        raise ConfigError(
            "storage.workload.record_size",
            workload.record_size,
            f"records whose files fit in memory: each reader reads a whole "
            f"{'file' if whole else 'record'} into a buffer of its own, {held / 2**30:.1f} GiB in all, "
            f"and this machine has {ram / 2**30:.1f} GiB (lower record_size, samples_per_file or "
            "read_threads)",
        )


def _check_checkpoint_memory(config: BenchConfig, clients: int, local_clients: int, ram: int) -> None:
    """A client holds its share of the checkpoint twice while writing: the tensors and their bytes."""
    workload = config.storage.workload
    if not workload.checkpoint_size_mb:
        return
    shared = workload.checkpoint_writers == CheckpointWriters.all
    held = 2 * workload.checkpoint_size_mb * 2**20 * (local_clients / clients if shared else 1)
    if held > ram:
        raise ConfigError(
            "storage.workload.checkpoint_size_mb",
            workload.checkpoint_size_mb,
            f"a checkpoint this host can hold: its clients keep their share twice (tensors and "
            f"serialised bytes), {held / 2**30:.1f} GiB, and this machine has {ram / 2**30:.1f} GiB",
        )
