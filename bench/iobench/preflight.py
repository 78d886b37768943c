"""What the schema cannot know about a storage run: how many clients the launcher brings, the
machine's memory (the dataset's plan, the accelerator processes, their buffers), the free space
of a local disk, and the dataset size an MLPerf result needs (a warning, not a refusal). The store
itself is checked when it is opened (one LIST).

Free space (`check_disk_space`): what the run will write on a local disk, before any write.
Planned bytes: the dataset's files (when the prepare phase will write them: not when a matching
dataset is reused, nor with storage.prepare=never; a file of the same name already there is
replaced, so its bytes count as room) and the checkpoints (checkpoint_count of them, plus the
periodic ones: one at a time, or all of them with checkpoint_keep). Both are summed when they
share a filesystem, and must leave the margin of bench.iobench.freespace free. The files must
also fit in the filesystem's free inodes. Storage on S3 has no free-space figure: not checked.
First, each directory the run writes into can be one (a file there, or a read-only mount, is
refused naming its key: bench.machine.writable). Leftovers of a killed write (`<name>.tmp<pid>`)
in the dataset's and the checkpoints' directories are deleted first, so their bytes count as free.
"""

from __future__ import annotations

import contextlib
import logging
import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Dict, List, Optional

import psutil

from bench.config import BenchConfig
from bench.config.storage import CheckpointWriters, PrepareMode, ReadMode, StorageConfig
from bench.errors import ConfigError, ConfigProblem
from bench.iobench.checkpoint import CHECKPOINT_DIR, OVERHEAD, final_keys
from bench.iobench.figures import dataset_size, host_memory
from bench.iobench.formats.base import format_for
from bench.iobench.freespace import free_inodes, nearest_existing, shortfall
from bench.iobench.prepare import existing_dataset, planned
from bench.machine.writable import check_writable_dir
from bench.registries import import_own
from bench.storage.base import backend
from bench.storage.local import LocalStore, check_local_dirs, remove_stale_temporaries

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
    _check_memory(config, clients, ranked)
    if run_dir is not None or storage.root is not None:  # where the run writes is known
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


def _check_memory(config: BenchConfig, clients: int, ranked: bool) -> None:
    """What this machine's memory must hold: the files' plans and the accelerator processes (checked
    before anything is planned), each reader's buffer (a thread's or a process's own, as large as its
    largest read), and this host's clients' checkpoint shares, each held twice while it is written
    (the tensors and their bytes)."""
    storage, workload = config.storage, config.storage.workload
    ram = psutil.virtual_memory().total
    local_clients = config.distributed.nproc_per_node if ranked else storage.accelerators
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
    largest = workload.record_size + 3 * workload.record_size_stdev
    whole = workload.read_mode != ReadMode.sample
    buffers = largest * (workload.samples_per_file if whole else 1) * workload.read_threads * local_clients
    if not workload.checkpoint_only and buffers > ram:
        raise ConfigError(
            "storage.workload.record_size",
            workload.record_size,
            f"records whose files fit in memory: each reader reads a whole "
            f"{'file' if whole else 'record'} into a buffer of its own, {buffers / 2**30:.1f} GiB in all, "
            f"and this machine has {ram / 2**30:.1f} GiB (lower record_size, samples_per_file or "
            "read_threads)",
        )
    shared = workload.checkpoint_writers == CheckpointWriters.all
    shares = 2 * workload.checkpoint_size_mb * 2**20 * (local_clients / clients if shared else 1)
    if shares > ram:  # none without checkpoints (checkpoint_size_mb=0)
        raise ConfigError(
            "storage.workload.checkpoint_size_mb",
            workload.checkpoint_size_mb,
            f"a checkpoint this host can hold: its clients keep their share twice (tensors and "
            f"serialised bytes), {shares / 2**30:.1f} GiB, and this machine has {ram / 2**30:.1f} GiB",
        )


BLOCK = 4096  # a file takes whole blocks
MANIFEST_PER_FILE = 256  # bytes of the manifest's JSON per file


@dataclass
class Need:
    what: str  # the keys behind it, as the user set them
    bytes: int
    files: int  # new files (inodes)
    where: Path


def check_disk_space(storage: StorageConfig, run_dir: Path, clients: int) -> None:
    """Raise ConfigProblem (one line, exit 2) when the run's planned writes do not fit."""
    if storage.name != "local":
        return
    where = backend(storage)
    dataset = Path(where.location(run_dir, storage.dataset_dir))
    checkpoints = Path(where.location(run_dir, CHECKPOINT_DIR))
    writes_dataset = not storage.workload.checkpoint_only and storage.prepare != PrepareMode.never
    check_local_dirs(storage, run_dir, {"storage.dataset_dir": storage.dataset_dir} if writes_dataset else {})
    if storage.workload.checkpoint_size_mb:  # a folder of its own, named by no key: storage.root says where
        check_writable_dir("storage.root", storage.root, checkpoints)
    for directory in (dataset, checkpoints):
        if removed := remove_stale_temporaries(directory):  # whose writer (a pid on this host) is gone
            log.warning(
                "removed %d temporary file(s) left by a killed write under %s (first: %s)",
                len(removed),
                directory,
                removed[0].name,
            )
    by_disk: Dict[int, List[Need]] = {}
    for need in (dataset_need(storage, dataset), checkpoint_need(storage, checkpoints, clients)):
        if need is not None and (need.bytes or need.files):
            by_disk.setdefault(os.stat(nearest_existing(need.where)).st_dev, []).append(need)
    for group in by_disk.values():
        common = Path(os.path.commonpath([str(n.where) for n in group]))
        what = " + ".join(n.what for n in group)
        if refusal := shortfall(what, sum(n.bytes for n in group), common):
            raise ConfigProblem(f"{refusal}: lower them, or set storage.root to a larger disk")
        files, inodes = sum(n.files for n in group), free_inodes(common)
        if 0 <= inodes < files:
            raise ConfigProblem(
                f"{what} needs {files} new files on {common}; its filesystem has room for {inodes} more (free inodes)"
            )


def file_bytes(samples: int, record_size: int, fmt: str) -> int:
    layout = format_for(fmt)  # what the format adds: its own declaration, no table here
    return -(-(samples * (record_size + layout.overhead_per_sample) + layout.overhead_per_file) // BLOCK) * BLOCK


def dataset_need(storage: StorageConfig, directory: Path) -> Optional[Need]:
    workload = storage.workload
    if workload.checkpoint_only or storage.prepare == PrepareMode.never:
        return None
    store = LocalStore(directory)
    if storage.prepare == PrepareMode.auto:
        # a damaged manifest: the prepare rewrites it all
        with contextlib.suppress(OSError, ValueError, TypeError, KeyError):
            if existing_dataset(store, workload)[0] is not None:
                return None  # reused as it is
    there = dict(store.list())
    # sizes at the mean record size: the same file names, without a random draw per file
    mean = replace(workload, record_size_stdev=0)
    need, files, largest_replaced = 0, 0, 0
    for spec in planned(mean):
        size = file_bytes(spec.samples, spec.record_size, workload.format)
        if (old := there.get(spec.key)) is None:
            need, files = need + size, files + 1
        else:  # replaced in place: the new file sits beside the old one until it is renamed over it
            need += max(0, size - -(-old // BLOCK) * BLOCK)
            largest_replaced = max(largest_replaced, size)
    need += largest_replaced * storage.prepare_workers  # each writer may hold a new file beside the old one
    need += MANIFEST_PER_FILE * (workload.num_files + workload.eval_num_files)
    what = (
        f"storage.workload.num_files={workload.num_files} x samples_per_file={workload.samples_per_file} x "
        f"record_size={workload.record_size}"
    )
    if workload.eval_num_files:
        what += f" (+ eval_num_files={workload.eval_num_files})"
    return Need(what, need, files, directory)


def checkpoint_need(storage: StorageConfig, directory: Path, clients: int) -> Optional[Need]:
    workload = storage.workload
    if not workload.checkpoint_size_mb:
        return None
    shared = workload.checkpoint_writers == CheckpointWriters.all and clients > 1
    writers = clients if shared else 1
    per_file = -(-(int(workload.checkpoint_size_mb * 2**20 / writers) + OVERHEAD) // BLOCK) * BLOCK
    count = workload.checkpoint_count
    there = dict(LocalStore(directory).list())
    names = final_keys(storage.checkpoint_name, count, range(writers) if shared else [None])
    need = sum(max(0, per_file - there.get(name, 0)) for name in names)
    files = sum(name not in there for name in names)
    if files < len(names):  # a kept checkpoint replaced: the new one sits beside it until renamed over it
        need += per_file * writers
    what = f"storage.workload.checkpoint_count={count} x checkpoint_size_mb={workload.checkpoint_size_mb:g}"
    if periodic := periodic_checkpoints(storage, clients):
        held = periodic if workload.checkpoint_keep else 1  # without keep, each replaces the one before
        need += held * per_file * writers
        files += held * writers
        what += (
            f" (+ {held} periodic, checkpoint_every_steps={workload.checkpoint_every_steps}"
            f"{', checkpoint_keep=true' if workload.checkpoint_keep else ''})"
        )
    return Need(what, need, files, directory)


def periodic_checkpoints(storage: StorageConfig, clients: int) -> int:
    """At most how many periodic checkpoints one client writes (its share rounded up)."""
    workload = storage.workload
    if not workload.checkpoint_every_steps or workload.checkpoint_only:
        return 0
    samples = -(-workload.num_files // clients) * workload.samples_per_file
    return workload.read_steps(samples) // workload.checkpoint_every_steps
