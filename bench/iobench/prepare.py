"""Prepare phase: write the emulated dataset to the store, in parallel, unless it is already there.

A dataset is "there" when its manifest (written last, so an interrupted prepare never looks
complete) describes the same workload and every listed file exists with its recorded size.
storage.prepare: auto (reuse a matching dataset, else write) | always | never (a missing or
different dataset is an error).
"""

from __future__ import annotations

import json
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any, Dict, List, Optional

from bench.analysis.stats import percentile, present
from bench.config.storage import PrepareMode, StorageWorkloadConfig
from bench.iobench.workload import FileSpec, dataset_spec, encode, plan_files
from bench.storage.base import ObjectStore

log = logging.getLogger(__name__)

MANIFEST = "_manifest.json"


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

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.files)


def existing_dataset(store: ObjectStore, workload: StorageWorkloadConfig) -> tuple[Optional[List[FileSpec]], str]:
    """(files, "") when a matching dataset is on the store, else (None, why not)."""
    if not store.exists(MANIFEST):
        return None, f"no dataset manifest at {store.url}/{MANIFEST}"
    manifest = json.loads(store.get(MANIFEST))
    if manifest.get("spec") != dataset_spec(workload):
        return None, f"the dataset at {store.url} was made for {manifest.get('spec')}"
    files = [FileSpec(**entry) for entry in manifest["files"]]
    sizes = dict(store.list())
    damaged = [f.key for f in files if sizes.get(f.key) != f.size]
    if damaged:
        return None, f"{len(damaged)} dataset files missing or resized at {store.url} (first: {damaged[0]})"
    return files, f"reusing the dataset at {store.url}"


def prepare_dataset(store: ObjectStore, workload: StorageWorkloadConfig, mode: PrepareMode, workers: int) -> Prepared:
    if mode != "always":
        files, why = existing_dataset(store, workload)
        if files is not None:
            log.info("prepare: %s (%d files)", why, len(files))
            return Prepared(files, skipped=True, reason=why)
        if mode == "never":
            raise DatasetMissing(f"storage.prepare=never but {why}: run once with storage.prepare=auto "
                                 "to write it")
    else:
        why = "storage.prepare=always"
    log.info("prepare: writing %d files to %s (%s)", workload.num_files, store.url, why)
    fmt, seed = workload.format, workload.seed
    latencies: List[float] = []

    def write(spec: FileSpec) -> FileSpec:
        data = encode(spec, fmt, seed)
        start = time.perf_counter()
        store.put(spec.key, data)
        latencies.append((time.perf_counter() - start) * 1000.0)  # list.append is atomic
        return replace(spec, size=len(data))

    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="prepare") as pool:
        files = list(pool.map(write, plan_files(workload)))
    manifest = {"spec": dataset_spec(workload), "files": [f.to_dict() for f in files]}
    store.put(MANIFEST, json.dumps(manifest).encode())
    seconds = time.perf_counter() - start
    prepared = Prepared(files, skipped=False, seconds=seconds, reason=why, put_latencies_ms=latencies)
    prepared.written_bytes = prepared.total_bytes
    return prepared


def prepare_summary(prepared: Prepared) -> Dict[str, Any]:
    seconds, puts = prepared.seconds, prepared.put_latencies_ms
    return {"prepare_skipped": prepared.skipped, "prepare_seconds": seconds,
            "prepare_written_bytes": prepared.written_bytes,
            **present({"prepare_mb_per_second": prepared.written_bytes / seconds / 1e6 if seconds > 0 else None,
                       "prepare_put_latency_ms_p50": percentile(puts, 50),
                       "prepare_put_latency_ms_p99": percentile(puts, 99)})}
