"""The ladder's storage rung: the files under data.root read alone, in the loader's order (a
shuffled pass, whole files: a JPEG folder's images, a shard set's shards), by as many threads as
the loader has workers, with no decoding. MB/s, and the images/s that rate can feed.

Two passes name their cache state: cold (each file's pages dropped first with posix_fadvise
DONTNEED, what an epoch over a dataset larger than memory sees) and warm (the same files again,
from the page cache). The verdict uses warm when the whole dataset fits in half the free memory
(after the first epoch it is read from memory), cold otherwise."""

from __future__ import annotations

import os
import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import List, Tuple

import psutil

from bench.config import BenchConfig
from bench.doctor.figures import STORAGE, Rung
from bench.storage.local import LocalStore

CHUNK = 4 << 20  # bytes per read call, into a buffer each thread reuses


def dataset_files(config: BenchConfig) -> List[str]:
    """The files the loader reads: a JPEG/PNG folder's images, or every file under data.root."""
    data = config.data
    if data.name == "imagefolder":
        from bench.data.layout import imagefolder_base, scan_image_folder

        return scan_image_folder(imagefolder_base(data.dataset_root, data.split))[1]
    found: List[str] = []
    for folder, _dirs, files in os.walk(data.dataset_root):
        found.extend(os.path.join(folder, name) for name in files)
    return sorted(found)


def read_pass(paths: List[str], threads: int, window_s: float, cold: bool) -> Tuple[int, int, float]:
    """(files read, bytes read, seconds): `paths` in order by `threads` threads until all are read
    or the window ends."""
    if cold:  # the storage benchmark's own eviction (flushes, then POSIX_FADV_DONTNEED); paths are absolute
        LocalStore(Path("/")).drop_cache(paths)
    local = threading.local()
    deadline = time.perf_counter() + window_s

    def read(path: str) -> int:
        if time.perf_counter() > deadline:
            return -1
        if not hasattr(local, "buffer"):
            local.buffer = bytearray(CHUNK)
        view, total = memoryview(local.buffer), 0
        with open(path, "rb", buffering=0) as fh:
            while True:
                got = fh.readinto(view)
                if not got:
                    return total
                total += got

    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=threads) as pool:
        sizes = [size for size in pool.map(read, paths) if size >= 0]
    return len(sizes), sum(sizes), time.perf_counter() - started


def passes(paths: List[str], threads: int, window_s: float, cold: bool) -> Tuple[int, int, float]:
    """read_pass again and again until the window is spent (a small dataset is read in milliseconds):
    the files, bytes and seconds of all of them."""
    files = size = 0
    seconds = 0.0
    while not files or seconds < window_s:
        got = read_pass(paths, threads, window_s - seconds, cold)
        files, size, seconds = files + got[0], size + got[1], seconds + got[2]
        if not got[0]:
            break
    return files, size, seconds


def storage_rung(config: BenchConfig, window_s: float, images_in_dataset: int) -> Rung:
    from bench.data.loader import resolve_workers

    rung = Rung(name=STORAGE)
    data = config.data
    if data.synthetic:
        rung.skipped = "synthetic data: nothing is read from storage"
        return rung
    if (data.root or "").startswith("s3://"):
        rung.skipped = "data.root is on S3: measure it with the storage benchmark (docs/storage.md)"
        return rung
    started = time.perf_counter()
    files = dataset_files(config)
    sizes = [os.path.getsize(path) for path in files]
    total = sum(sizes)
    if not files or not total:
        rung.skipped = f"no file with data under data.root={data.root}"
        return rung
    order = random.Random(config.seed).sample(files, len(files))
    threads = max(1, resolve_workers(data))
    cold = passes(order, threads, window_s / 2, cold=True)
    warm = passes(order[: cold[0]] or order, threads, window_s / 2, cold=False)
    images_per_byte = (images_in_dataset or len(files)) / total
    fits = total < psutil.virtual_memory().available / 2
    files_read, read_bytes, seconds = warm if fits else cold
    rung.images_per_second = read_bytes * images_per_byte / seconds if seconds else None
    rung.figures = {
        "cache": "warm" if fits else "cold",
        "megabytes_per_second": read_bytes / seconds / 1e6 if seconds else None,
        "cold_megabytes_per_second": cold[1] / cold[2] / 1e6 if cold[2] else None,
        "warm_megabytes_per_second": warm[1] / warm[2] / 1e6 if warm[2] else None,
        "files_read": files_read,
        "dataset_files": len(files),
        "dataset_megabytes": total / 1e6,
        "threads": threads,
    }
    rung.seconds = time.perf_counter() - started
    return rung
