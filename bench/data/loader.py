"""What the real data options share: batch-fetching datasets, the DataLoader around them, and
the endless device-side iterator that the trainer times.

Workers return whole batches (uint8 NHWC images, int64 labels, failures) built in place by
the dataset's __getitems__, so there is no per-sample collate. A sample that fails to decode is
replaced by the next one in the worker and reported back as a failure; the main process
counts it, or stops the run when data.strict=true. Errors are raised in the main process as
one-sentence DataErrors, never as a worker's wrapped traceback.
"""

from __future__ import annotations

import functools
import math
import multiprocessing
import os
import random
import select
import sys
import threading
import zlib
from typing import Any, Dict, List, Optional, Tuple

import torch
from torch.utils.data import BatchSampler, DataLoader, Dataset, DistributedSampler, get_worker_info

from bench.config.data import DataConfig
from bench.errors import DataError
from bench.machine.children import make_multiprocessing_temp_dir

Failure = Tuple[str, str, bool]  # (path, reason, fatal): fatal = unreadable, else a corrupt image skipped
Release = Optional[Tuple[torch.Tensor, int]]  # (a worker's shared slot flags, slot) to clear once consumed
HostBatch = Tuple[torch.Tensor, torch.Tensor, List[Failure], Release]
MAX_WARNINGS = 10  # skipped-image warnings logged per run (all are counted)
OUTPUT_RING = 3  # float32 output batches kept for reuse on the CPU


def resolve_workers(cfg: DataConfig, ranks: Optional[int] = None) -> int:
    """data.num_workers, or (null: a GPU run; a CPU run has it set by bench.runtime.device.fit_cpu)
    this process's share of the CPUs it may run on, at most 8: the CPUs are split between the
    `ranks` of this node (by default LOCAL_WORLD_SIZE, set by torch's launcher)."""
    if cfg.num_workers is not None:
        return int(cfg.num_workers)
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(1, min(8, cpus // max(1, ranks or int(os.environ.get("LOCAL_WORLD_SIZE", "1")))))


RING_SLOTS = 8  # shared-memory batches one worker may have in flight before it allocates untracked ones


def _shared_uint8(shape: Tuple[int, ...]) -> torch.Tensor:
    """A uint8 tensor in shared memory (as torch's default_collate allocates in a worker), so
    handing it to the main process copies nothing."""
    storage = torch.UntypedStorage._new_shared(math.prod(shape))
    return torch.tensor([], dtype=torch.uint8).set_(storage).view(shape)  # contiguous


class _SharedBatchRing:
    """A worker's uint8 batches in shared memory, reused once the main process has consumed them:
    a fresh 9.6 MB shared batch costs ~5 ms of page faults, a reused one none. The main process
    clears a slot's flag (shared too) after normalising the batch: an explicit release, so reuse
    does not depend on how the DataLoader schedules; with no free slot, a fresh batch is used."""

    def __init__(self, shape: Tuple[int, ...]):
        self.shape = shape
        self.flags = _shared_uint8((RING_SLOTS,))
        self.flags.zero_()
        self.busy = self.flags.numpy()  # the same shared bytes, read without making tensors
        self.slots: List[torch.Tensor] = []

    def take(self) -> Tuple[torch.Tensor, Release]:
        slot = next((slot for slot in range(len(self.slots)) if not self.busy[slot]), len(self.slots))
        if slot == RING_SLOTS:  # every slot in flight
            return _shared_uint8(self.shape), None
        if slot == len(self.slots):
            self.slots.append(_shared_uint8(self.shape))
        self.busy[slot] = 1
        return self.slots[slot], (self.flags, slot)


_rings: Dict[Tuple[int, ...], _SharedBatchRing] = {}  # per process: only workers create them


def empty_batch(count: int, size: int) -> Tuple[torch.Tensor, torch.Tensor, Release]:
    """A uint8 NHWC batch to fill in place, its int64 labels, and its release handle: in a
    worker, a reused shared-memory slot; in the main process (num_workers=0), plain memory."""
    shape = (count, size, size, 3)
    labels = torch.empty(count, dtype=torch.int64)
    if get_worker_info() is None:
        return torch.empty(shape, dtype=torch.uint8), labels, None
    if shape not in _rings:
        _rings[shape] = _SharedBatchRing(shape)
    images, release = _rings[shape].take()
    return images, labels, release


def release_batch(release: Release) -> None:
    if release is not None:
        flags, slot = release
        flags[slot] = 0


class BatchDataset(Dataset):
    """A map-style dataset the DataLoader asks for whole batches (torch calls __getitems__)."""

    def __init__(self, size: int, train: bool, seed: int, rank: int):
        self.size, self.train, self.rank = size, train, rank
        self.rng = random.Random(seed + rank)

    def reseed(self, worker_seed: int) -> None:
        self.rng.seed(worker_seed + 7919 * self.rank)

    def __len__(self) -> int:
        raise NotImplementedError

    def __getitems__(self, indices: List[int]) -> HostBatch:
        raise NotImplementedError


def _start_worker(loader_pid: int, _worker_id: int) -> None:
    info = get_worker_info()
    assert info is not None, "worker_init_fn runs in a DataLoader worker"
    if hasattr(info.dataset, "reseed"):
        info.dataset.reseed(torch.initial_seed() % 2**32)  # torch gives each worker its own base seed + id
    sys.excepthook = functools.partial(_quiet_when_the_fetch_broke, sys.excepthook)
    threading.Thread(target=_exit_with, args=(loader_pid,), daemon=True).start()


def _quiet_when_the_fetch_broke(default: Any, kind: type, value: BaseException, tb: Any) -> None:
    """A batch reaches the loader's process as file descriptors it fetches from this worker's
    multiprocessing resource-sharer thread; a loader's process stopped mid-fetch (a signal to a
    rank) broke the handshake, and that thread printed it as a traceback. Only that is quiet."""
    frame = tb.tb_frame if tb is not None else None
    in_sharer = frame is not None and frame.f_globals.get("__name__") == "multiprocessing.resource_sharer"
    if not (in_sharer and issubclass(kind, (EOFError, OSError, multiprocessing.AuthenticationError))):
        default(kind, value, tb)


def _exit_with(pid: int) -> None:
    """Ends this worker at once, without multiprocessing's finalizers, when the process that made its
    loader ends (a rank stopped by a signal to it alone). torch's own watchdog watches the worker's
    parent (under a forkserver, the forkserver, which then outlives the rank with its workers), looks
    every 5 s, and exits through finalizers that print a traceback each for the temp dir the ended
    process removed."""
    try:
        select.select([os.pidfd_open(pid)], [], [])  # readable once it has ended
    except (AttributeError, OSError) as error:  # no pidfd (not Linux, or Linux before 5.3): torch's watchdog only
        if not isinstance(error, ProcessLookupError):  # (that one: it had ended already)
            return
    os._exit(1)


def _as_is(batch: Any) -> Any:  # the dataset already returns a collated batch (a HostBatch)
    return batch


def make_loader(
    dataset: Any, cfg: DataConfig, device: torch.device, batch_sampler: Optional[BatchSampler] = None
) -> DataLoader:
    """batch_sampler for map-style datasets; None for iterable ones that yield whole batches.
    Workers of a loader that reads s3:// start from a fresh interpreter (forkserver): this process's
    S3 client has an async runtime whose threads do not survive fork (the worker would hang). Else
    they fork, named: a rank that the elastic launcher started from its forkserver inherits that as
    the default, and a stopped rank left its workers and their forkserver behind."""
    workers = resolve_workers(cfg)
    options: Dict[str, Any] = {"batch_sampler": batch_sampler} if batch_sampler is not None else {"batch_size": None}
    if workers:
        options.update(prefetch_factor=cfg.prefetch_factor, persistent_workers=bool(cfg.persistent_workers))
        options["multiprocessing_context"] = "forkserver" if (cfg.root or "").startswith("s3://") else "fork"
        if options["multiprocessing_context"] == "forkserver":  # its socket's folder: bench's, owned
            make_multiprocessing_temp_dir()
    pin = bool(cfg.pin_memory) and device.type == "cuda"
    init = functools.partial(_start_worker, os.getpid())
    return DataLoader(dataset, num_workers=workers, collate_fn=_as_is, worker_init_fn=init, pin_memory=pin, **options)


def order_seed(cfg: DataConfig) -> int:
    """The seed of the epoch order, identical on every rank by construction: ranks are free to get
    different run seeds (for their augmentations), but samplers seeded differently would overlap."""
    return zlib.crc32(f"{cfg.name}|{cfg.root}|{cfg.split}".encode())


def epoch_batch_sampler(
    dataset_len: int, cfg: DataConfig, train: bool, rank: int, world_size: int, where: str
) -> BatchSampler:
    """DistributedSampler (also at world size 1: one code path) under full batches only, so every
    batch has data.batch_size images; set_epoch reshuffles each pass."""
    # the sampler only takes len() of its dataset: a range stands for it (torch's stub asks for a Dataset)
    indices: Any = range(dataset_len)
    sampler: DistributedSampler[int] = DistributedSampler(
        indices, num_replicas=world_size, rank=rank, shuffle=train, seed=order_seed(cfg), drop_last=True
    )
    batches = BatchSampler(sampler, cfg.batch_size, drop_last=True)
    if len(batches) == 0:
        raise DataError(
            f"{where} has {dataset_len} images, fewer than one batch per process "
            f"(data.batch_size={cfg.batch_size} x {world_size} processes)"
        )
    return batches


def eval_batch_sampler(dataset_len: int, batch_size: int, rank: int, world_size: int) -> BatchSampler:
    """Validation: rank r reads samples r, r + world_size, ... in order, the last batch partial:
    every sample is read by exactly one rank, once (DistributedSampler would pad or drop)."""
    return BatchSampler(range(rank, dataset_len, world_size), batch_size, drop_last=False)
