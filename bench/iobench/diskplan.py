"""What a storage run will write on a local disk, against the free space there, before any write.

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

import logging
import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Dict, List, Optional

from bench.config.storage import CheckpointWriters, PrepareMode, StorageConfig
from bench.errors import ConfigProblem
from bench.iobench.checkpoint import CHECKPOINT_DIR, OVERHEAD, checkpoint_key
from bench.iobench.freespace import free_inodes, nearest_existing, remove_stale_temporaries, shortfall
from bench.iobench.prepare import existing_dataset, planned
from bench.machine.writable import check_writable_dir
from bench.storage.local import LocalStore, check_local_dirs
from bench.storage.registry import backend

log = logging.getLogger(__name__)

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
        remove_stale_temporaries(directory)
    needs = [
        need
        for need in (dataset_need(storage, dataset), checkpoint_need(storage, checkpoints, clients))
        if need is not None and (need.bytes or need.files)
    ]
    by_disk: Dict[int, List[Need]] = {}
    for need in needs:
        by_disk.setdefault(os.stat(nearest_existing(need.where)).st_dev, []).append(need)
    for group in by_disk.values():
        common = Path(os.path.commonpath([str(n.where) for n in group]))
        what = " + ".join(n.what for n in group)
        refusal = shortfall(what, sum(n.bytes for n in group), common)
        if refusal:
            raise ConfigProblem(f"{refusal}: lower them, or set storage.root to a larger disk")
        files, inodes = sum(n.files for n in group), free_inodes(common)
        if 0 <= inodes < files:
            raise ConfigProblem(
                f"{what} needs {files} new files on {common}; its filesystem has room for {inodes} more (free inodes)"
            )


def file_bytes(samples: int, record_size: int, fmt: str) -> int:
    from bench.iobench.formats.registry import format_for

    layout = format_for(fmt)  # what the format adds: its own declaration, no table here
    per_file, per_sample = layout.overhead_per_file, layout.overhead_per_sample
    return -(-(samples * (record_size + per_sample) + per_file) // BLOCK) * BLOCK


def dataset_need(storage: StorageConfig, directory: Path) -> Optional[Need]:
    workload = storage.workload
    if workload.checkpoint_only or storage.prepare == PrepareMode.never:
        return None
    store = LocalStore(directory)
    if storage.prepare == PrepareMode.auto:
        try:
            if existing_dataset(store, workload)[0] is not None:
                return None  # reused as it is
        except (OSError, ValueError, TypeError, KeyError):  # a damaged manifest: the prepare rewrites it all
            pass
    there = dict(store.list())
    # sizes at the mean record size: the same file names, without a random draw per file
    mean = replace(workload, record_size_stdev=0)
    need, files, largest_replaced = 0, 0, 0
    for spec in planned(mean):
        size = file_bytes(spec.samples, spec.record_size, workload.format)
        old = there.get(spec.key)
        if old is None:
            need, files = need + size, files + 1
        else:  # replaced in place: the new file sits beside the old one until it is renamed over it
            need += max(0, size - -(-old // BLOCK) * BLOCK)
            largest_replaced = max(largest_replaced, size)
    need += largest_replaced * storage.prepare_workers + MANIFEST_PER_FILE * (
        workload.num_files + workload.eval_num_files
    )
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
    names = [
        checkpoint_key(storage.checkpoint_name, str(i) if count > 1 else "", c if shared else None)
        for i in range(count)
        for c in range(writers)
    ]
    need = sum(max(0, per_file - there.get(name, 0)) for name in names)
    files = sum(name not in there for name in names)
    if files < len(names):  # a kept checkpoint replaced: the new one sits beside it until renamed over it
        need += per_file * writers
    what = f"storage.workload.checkpoint_count={count} x checkpoint_size_mb={workload.checkpoint_size_mb:g}"
    periodic = periodic_checkpoints(storage, clients)
    if periodic:
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
    steps = workload.epochs * -(-samples // workload.batch_size)
    if workload.max_steps is not None:
        steps = min(steps, workload.max_steps)
    return steps // workload.checkpoint_every_steps
