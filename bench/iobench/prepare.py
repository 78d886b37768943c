"""Prepare phase: write the emulated dataset to the store, in parallel, unless it is already there.

The dataset: `num_files` files of `samples_per_file` records of one size; with
`record_size_stdev` each file draws its own record size from N(record_size, stdev) (seeded, so
every client and every run agrees without reading anything). The bytes are seeded random records
(incompressible, like decoded-then-encoded media), written in one of the formats of
bench.iobench.formats. Evaluation files (`eval_num_files`) live under eval/ beside the training files.

A dataset is "there" when its manifest (written last, so an interrupted prepare never looks
complete) describes the same workload and every listed file exists with its recorded size.
storage.prepare: auto (reuse a matching dataset, else write) | always | never (a missing or
different dataset is an error). With several hosts each client writes its 1/N of the files
(bench.iobench.session) and the first one writes the manifest.

A prepare that fails (a full disk, a store error) deletes the files it wrote before it raises:
without a manifest they could not be reused anyway, and they would leave the disk full. An
interrupted one (Ctrl-C, SIGTERM) stops after the writes in flight and leaves its whole files.
Whether the dataset fits on a local disk is checked before any write (bench.iobench.preflight).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from bench.config.storage import PrepareMode, StorageWorkloadConfig
from bench.iobench.formats.base import FileSpec, format_for
from bench.iobench.freespace import DiskFull, no_space, write_error
from bench.iobench.result import PrepareFigures
from bench.maths.stats import percentile
from bench.storage.base import ObjectStore

log = logging.getLogger(__name__)

MANIFEST = "_manifest.json"
# The workload keys that change the dataset's bytes: a prepared dataset is reused only when
# all of them match.
DATASET_KEYS = ("num_files", "samples_per_file", "record_size", "record_size_stdev", "format", "seed", "eval_num_files")
EVAL_DIR = "eval"
EVAL_INDEX = 1_000_000  # eval files draw their bytes and sizes from indices of their own


def dataset_spec(workload: StorageWorkloadConfig) -> Dict[str, Any]:
    spec = {key: getattr(workload, key) for key in DATASET_KEYS}
    if not spec["eval_num_files"]:
        del spec["eval_num_files"]  # so a dataset prepared before eval files existed still matches
    return {key: str(value) if key == "format" else value for key, value in spec.items()}


def _record_size(workload: StorageWorkloadConfig, index: int) -> int:
    if not workload.record_size_stdev:
        return workload.record_size
    rng = np.random.default_rng([workload.seed, index])
    return max(1, int(np.rint(rng.normal(workload.record_size, workload.record_size_stdev))))


def plan_files(workload: StorageWorkloadConfig, evaluation: bool = False) -> List[FileSpec]:
    """The training files (or, with evaluation=True, the eval files), not yet written (size 0)."""
    extension = format_for(workload.format).extension
    count = workload.eval_num_files if evaluation else workload.num_files
    width = max(5, len(str(count)))
    prefix, first = (f"{EVAL_DIR}/", EVAL_INDEX) if evaluation else ("", 0)
    return [
        FileSpec(
            f"{prefix}file_{i - first:0{width}d}.{extension}", i, workload.samples_per_file, _record_size(workload, i)
        )
        for i in range(first, first + count)
    ]


def encode_file(spec: FileSpec, fmt: str, seed: int) -> Tuple[bytes, FileSpec]:
    """The file's bytes and its spec as written (size, where its samples lie)."""
    payload = np.random.default_rng([seed, spec.index, 1]).bytes(spec.samples * spec.record_size)
    return format_for(fmt).encode(spec, payload)


class DatasetMissing(RuntimeError):
    """storage.prepare=never and no matching dataset: str() is the sentence shown."""


@dataclass
class Prepared:
    files: List[FileSpec]
    skipped: bool
    seconds: float = 0.0
    written_bytes: int = 0
    reason: str = ""  # why it was (re)written or skipped
    put_latencies_ms: List[float] = field(default_factory=list)
    eval_files: List[FileSpec] = field(default_factory=list)
    written_by_client: List[int] = field(default_factory=list)  # files each client wrote (several hosts)


def existing_dataset(store: ObjectStore, workload: StorageWorkloadConfig) -> Tuple[Optional[Prepared], str]:
    """(the dataset, why) when a matching one is on the store, else (None, why not)."""
    if not store.exists(MANIFEST):
        return None, f"no dataset manifest at {store.url}/{MANIFEST}"
    manifest = json.loads(store.get(MANIFEST))
    if manifest.get("spec") != dataset_spec(workload):
        return None, f"the dataset at {store.url} was made for {manifest.get('spec')}"
    files = [FileSpec(**entry) for entry in manifest["files"]]
    eval_files = [FileSpec(**entry) for entry in manifest.get("eval_files", [])]
    sizes = dict(store.list())
    if damaged := [f.key for f in files + eval_files if sizes.get(f.key) != f.size]:
        return None, f"{len(damaged)} dataset files missing or resized at {store.url} (first: {damaged[0]})"
    why = f"reusing the dataset at {store.url}"
    return Prepared(files, skipped=True, reason=why, eval_files=eval_files), why


def reusable(store: ObjectStore, workload: StorageWorkloadConfig, mode: PrepareMode) -> Tuple[Optional[Prepared], str]:
    """The dataset to reuse, or (None, why it is written); raises DatasetMissing with prepare=never."""
    if mode == PrepareMode.always:
        return None, "storage.prepare=always"
    prepared, why = existing_dataset(store, workload)
    if prepared is not None:
        log.info("prepare: %s (%d files)", why, len(prepared.files))
        return prepared, why
    if mode == PrepareMode.never:
        raise DatasetMissing(f"storage.prepare=never but {why}: run once with storage.prepare=auto to write it")
    return None, why


def planned(workload: StorageWorkloadConfig) -> List[FileSpec]:
    """Every file of the dataset: the training files, then the eval files."""
    return plan_files(workload) + plan_files(workload, evaluation=True)


def write_files(
    store: ObjectStore, workload: StorageWorkloadConfig, specs: Sequence[FileSpec], workers: int
) -> Tuple[List[FileSpec], List[float]]:
    """Write `specs` with `workers` threads: (the specs as written, one PUT latency each in ms)."""
    fmt, seed = workload.format, workload.seed
    latencies: List[float] = []
    done: List[str] = []  # keys written whole, to delete if the prepare fails
    failed, broken = threading.Event(), []  # broken: the key whose write failed

    def write(spec: FileSpec) -> FileSpec:
        if failed.is_set():  # another write failed: the rest is not started
            return spec
        data, written = encode_file(spec, fmt, seed)
        start = time.perf_counter()
        try:
            store.put(spec.key, data)
        except BaseException:
            failed.set()
            broken.append(spec.key)
            raise
        latencies.append((time.perf_counter() - start) * 1000.0)  # list.append is atomic
        done.append(spec.key)
        return written

    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="prepare")
    try:
        results = list(pool.map(write, specs))
    except BaseException as exc:
        failed.set()
        pool.shutdown(wait=True, cancel_futures=True)  # the writes in flight end (a failed one leaves no file)
        error = _cleaned_up(store, exc, done, broken, len(specs)) if isinstance(exc, Exception) else exc
        if error is exc:
            raise
        raise error from exc
    pool.shutdown(wait=True)
    return results, latencies


def _cleaned_up(store: ObjectStore, exc: Exception, done: List[str], broken: List[str], planned: int) -> Exception:
    """Delete what this prepare wrote; the error to raise: DiskFull naming the path, or `exc`."""
    removed = 0
    for key in done:
        try:
            store.delete(key)
            removed += 1
        except Exception as error:
            log.warning("prepare: could not delete %s/%s: %s", store.url, key, error)
    if not no_space(exc):
        return exc
    failed = f"{store.url}/{broken[0]}" if broken else store.url
    return DiskFull(
        f"the dataset could not be prepared: {write_error(exc, failed)}, after {len(done)} of "
        f"{planned} files; the {removed} files it wrote were deleted (lower storage.workload.num_files "
        "or record_size, or set storage.root to a larger disk)"
    )


def finish(
    store: ObjectStore,
    workload: StorageWorkloadConfig,
    written: Sequence[FileSpec],
    seconds: float,
    why: str,
    latencies: List[float],
) -> Prepared:
    """The manifest (last: a dataset is complete once it is there) and what was prepared."""
    ordered = sorted(written, key=lambda f: f.index)
    train = [f for f in ordered if not f.key.startswith(EVAL_DIR + "/")]
    evaluation = [f for f in ordered if f.key.startswith(EVAL_DIR + "/")]
    manifest = {
        "spec": dataset_spec(workload),
        "files": [asdict(f) for f in train],
        "eval_files": [asdict(f) for f in evaluation],
    }
    store.put(MANIFEST, json.dumps(manifest).encode())
    written_bytes = sum(f.size for f in ordered)
    return Prepared(train, False, seconds, written_bytes, reason=why, put_latencies_ms=latencies, eval_files=evaluation)


def prepare_dataset(store: ObjectStore, workload: StorageWorkloadConfig, mode: PrepareMode, workers: int) -> Prepared:
    """Reuse the dataset, or write all of it from this process."""
    prepared, why = reusable(store, workload, mode)
    if prepared is not None:
        return prepared
    log.info("prepare: writing %d files to %s (%s)", workload.num_files + workload.eval_num_files, store.url, why)
    start = time.perf_counter()
    written, latencies = write_files(store, workload, planned(workload), workers)
    return finish(store, workload, written, time.perf_counter() - start, why, latencies)


def prepare_figures(prepared: Prepared) -> PrepareFigures:
    seconds, puts = prepared.seconds, prepared.put_latencies_ms
    return PrepareFigures(
        prepare_skipped=prepared.skipped,
        prepare_seconds=seconds,
        prepare_written_bytes=prepared.written_bytes,
        prepare_mb_per_second=prepared.written_bytes / seconds / 1e6 if seconds > 0 else None,
        prepare_put_latency_ms_p50=percentile(puts, 50),
        prepare_put_latency_ms_p99=percentile(puts, 99),
    )
