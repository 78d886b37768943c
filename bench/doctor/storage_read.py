"""The ladder's storage rung: the files under data.root read alone by the storage benchmark's
reader (bench.iobench.reader.run_reader: reused page-aligned buffers, os.preadv, the GIL released
in every call), in the loader's access pattern: a shuffled pass over whole files (a JPEG folder's
images, a shard set's shards), as many readers as the loader has workers, a JPEG folder's
files in batches of data.batch_size, no decoding and no compute between steps (the read ceiling).
MB/s, and the images/s that rate can feed.

Two passes name their cache state: cold (each file's pages dropped first: the storage
benchmark's eviction, flushed then POSIX_FADV_DONTNEED, what an epoch over a dataset larger than
memory sees) and warm (the same files again, from the page cache). The verdict uses warm when the
whole dataset fits in half the free memory (after the first epoch it is read from memory), cold
otherwise. Shards on S3 (data.root=s3://..., opened through the storage group's settings as the
loader opens them) give one figure: there is no page cache of ours to drop or warm."""

from __future__ import annotations

import dataclasses
import os
import time
from pathlib import Path
from typing import Any, List, Mapping, Optional, Sequence, Tuple

import psutil

from bench.config import BenchConfig, compose
from bench.config.storage import StorageConfig, StorageWorkloadConfig
from bench.doctor.figures import STORAGE, Rung, StorageFigures
from bench.iobench.formats.base import FileSpec
from bench.iobench.reader import file_order, run_reader, uses_processes
from bench.storage.local import LocalStore

TRANSFER = 4 << 20  # bytes per read call, into a buffer each reader reuses


def dataset_files(config: BenchConfig) -> List[str]:
    """The files the loader reads: a JPEG/PNG folder's images, or every file under data.root."""
    data = config.data
    if data.name == "imagefolder":
        from bench.data.layout import imagefolder_base, scan_image_folder

        return scan_image_folder(imagefolder_base(data.dataset_root, data.split))[1]
    return sorted(os.path.join(folder, name) for folder, _dirs, files in os.walk(data.dataset_root) for name in files)


def ceiling_storage(workload: Mapping[str, Any], *overrides: str) -> StorageConfig:
    """The storage group of a read phase at the I/O ceiling (computation_time=0, no checkpoint), composed as
    the storage benchmark's (mode=storage): `workload` the other storage.workload keys, `overrides` any
    other key. The one builder of a read workload: this rung's, storage_ceiling's, bench.iobench.compare's."""
    values = {"computation_time": 0, "checkpoint_size_mb": 0, **workload}
    return compose("mode=storage", *[f"storage.workload.{k}={v}" for k, v in values.items()], *overrides).storage


def read_workload(files: Sequence[FileSpec], threads: int, batch: int, seed: int) -> StorageWorkloadConfig:
    """The loader's access pattern as a storage workload: one sample per file, read whole, once,
    lengths checked only (these are the user's files, not the benchmark's records)."""
    record = max(1, sum(f.size for f in files) // len(files))
    # the storage benchmark's first step is warm-up: at least two batches a pass (a folder smaller than two
    # batches is read in smaller ones), a one-file dataset read in two passes
    batch = max(1, min(batch, len(files) // 2))
    workload = dict(num_files=len(files), samples_per_file=1, record_size=record, format="raw")
    workload.update(epochs=1 if len(files) >= 2 else 2)
    workload.update(name="doctor", transfer_size=TRANSFER, verify_records="false", shuffle="file", seed=seed)
    return ceiling_storage({**workload, "batch_size": batch, "read_threads": threads}).workload


def read_pass(
    store: Any, files: Sequence[FileSpec], workload: StorageWorkloadConfig, window_s: float, cold: bool
) -> Tuple[int, int, float]:
    """(files read, bytes read, seconds): one epoch over `files` by the storage benchmark's reader,
    ended early when the window is spent."""
    if cold:
        store.drop_cache(f.key for f in files)
    epoch = run_reader(store, files, workload, window_s=window_s).epochs[0]  # its clock starts once the readers run
    return epoch.all_samples, int(epoch.all_bytes), epoch.epoch_s


def passes(
    store: Any, files: Sequence[FileSpec], workload: StorageWorkloadConfig, window_s: float, cold: bool
) -> Tuple[int, int, float]:
    """read_pass again (a new shuffle each time) until the window is spent (a small dataset is read
    in milliseconds): the files, bytes and seconds of all of them. The window is wall time, each pass's
    start-up (its readers forked, the cache dropped) included: counting the reading alone, a folder of
    24 small JPEGs took 202 passes and 16x its window."""
    read, size, seconds = 0, 0, 0.0
    deadline = time.perf_counter() + window_s
    for run in range(10_000):
        if read and (left := deadline - time.perf_counter()) <= 0:
            break
        shuffled = dataclasses.replace(workload, seed=workload.seed + run)
        got = read_pass(store, files, shuffled, left if read else window_s, cold)
        read, size, seconds = read + got[0], size + got[1], seconds + got[2]
        if not got[0]:
            break
    return read, size, seconds


def dataset_specs(config: BenchConfig) -> Tuple[Any, List[FileSpec]]:
    """(the store, its files as the loader reads them): a shard set's shards from its split's
    meta.json (on local disk or S3, through the storage group's settings, as the loader opens it);
    a JPEG/PNG folder's images; otherwise every file under data.root."""
    data = config.data
    if data.name == "shards":
        from bench.data.shardformat import read_meta
        from bench.storage.base import open_store

        store = open_store(data.dataset_root, config.storage)
        entries = [(str(s["key"]), int(s["bytes"])) for s in read_meta(store, str(data.split))["shards"]]
    else:
        root = Path(data.dataset_root)
        store = LocalStore(root)
        entries = [(os.path.relpath(path, root), os.path.getsize(path)) for path in dataset_files(config)]
    return store, [FileSpec(key, index, 1, size, size) for index, (key, size) in enumerate(entries) if size]


def storage_rung(config: BenchConfig, window_s: float, images_in_dataset: int) -> Rung:
    from bench.data.loader import resolve_workers

    data = config.data
    if data.synthetic:
        return Rung(STORAGE, skipped="synthetic data: nothing is read from storage")
    if not data.root:  # a data option of the user's own (data.name=module:function) may name no files
        return Rung(STORAGE, skipped=f"data={data.name} names no data.root: no files to read alone")
    started = time.perf_counter()
    store, specs = dataset_specs(config)
    if not specs:
        return Rung(STORAGE, skipped=f"no file with data under data.root={data.root}")
    total = sum(spec.size for spec in specs)
    threads = max(1, resolve_workers(data))
    # a JPEG folder is read a batch of images at a time; a shard set a shard at a time
    workload = read_workload(specs, threads, data.batch_size if data.name == "imagefolder" else 1, config.seed)
    images_per_byte = (images_in_dataset or len(specs)) / total
    url: Optional[str] = None  # the store, said for a remote read only
    if not isinstance(store, LocalStore):  # S3: no page cache of ours to drop or warm, one figure
        files_read, read_bytes, seconds = passes(store, specs, workload, window_s, cold=False)
        cache, url = "remote", store.url
        cold = warm = (0, 0, 0.0)
    else:
        cold = passes(store, specs, workload, window_s / 2, cold=True)
        # the warm pass reads what the cold one read: a dataset larger than the window, the first files
        # of the cold pass's order (its first pass: the window ended in it)
        seen = specs if cold[0] >= len(specs) else file_order(specs, workload, 0, 1)[: max(1, cold[0])]
        warm_workload = read_workload(seen, threads, workload.batch_size, config.seed)
        warm = passes(store, seen, warm_workload, window_s / 2, cold=False)
        fits = total < psutil.virtual_memory().available / 2
        files_read, read_bytes, seconds = warm if fits else cold
        cache, url = "warm" if fits else "cold", None
    figures = StorageFigures(
        cache=cache,
        store=url,
        megabytes_per_second=read_bytes / seconds / 1e6 if seconds else None,
        cold_megabytes_per_second=cold[1] / cold[2] / 1e6 if cold[2] else None,
        warm_megabytes_per_second=warm[1] / warm[2] / 1e6 if warm[2] else None,
        files_read=files_read,
        dataset_files=len(specs),
        dataset_megabytes=total / 1e6,
        threads=threads,
        readers="processes" if uses_processes(store, specs, workload) else "threads",
    )
    rate = read_bytes * images_per_byte / seconds if seconds else None
    return Rung(STORAGE, rate, time.perf_counter() - started, figures=figures)
