"""The storage benchmark (mode=storage): MLPerf-Storage-style emulation of training I/O.

Phases, each in its own module: prepare (write the dataset, or reuse it), read (simulated
accelerators: reader threads + emulated compute, one process per client), checkpoint (torch.save
to the store and back), report (merge, files, MLflow).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Dict, Mapping

log = logging.getLogger(__name__)

CHECKPOINT_DIR = "iobench-checkpoints"


def run_storage_benchmark(cfg: Dict[str, Any], out_dir: Path, environment: Mapping[str, Any],
                          tracker: Any) -> Dict[str, Any]:
    """Prepare, read and checkpoint phases; writes the output files, logs to `tracker`, returns
    the radix_metrics dict."""
    from bench.iobench.clients import run_clients
    from bench.iobench.prepare import prepare_dataset, prepare_summary
    from bench.iobench.report import caching_metrics, log_to_tracker, read_metrics, write_outputs
    from bench.storage import storage_location
    from bench.storage.objects import open_store

    storage, workload = cfg["storage"], cfg["storage"]["workload"]
    dataset = storage_location(storage, out_dir, storage["dataset_dir"])
    store = open_store(dataset, storage)  # S3: one LIST, so a bad bucket/endpoint/credential fails here
    prepared = prepare_dataset(store, workload, storage["prepare"], storage["prepare_workers"])
    log.info("read: %d files, %d clients x %d reader threads, batch %d, computation_time %gs",
             len(prepared.files), storage["clients"], workload["read_threads"], workload["batch_size"],
             workload["computation_time"])
    results = run_clients(dataset, storage, prepared.files, workload, storage["clients"])

    metrics: Dict[str, Any] = {
        "mode": "storage", "workload": workload["name"], "storage": storage["name"],
        "storage_client": storage["client"] if storage["name"] == "s3" else getattr(store, "mode", "posix"),
        "storage_url": store.url, "clients": storage["clients"], "format": workload["format"],
        "num_files": len(prepared.files), "samples_per_file": workload["samples_per_file"],
        "record_size": workload["record_size"], "batch_size": workload["batch_size"],
        "read_threads": workload["read_threads"], "prefetch": workload["prefetch"],
        "computation_time": workload["computation_time"], "epochs": workload["epochs"],
        **prepare_summary(prepared), **read_metrics(results, workload), **caching_metrics(prepared.total_bytes),
    }
    if workload["checkpoint_size_mb"] > 0:
        metrics.update(_checkpoint_phase(storage, out_dir, workload["checkpoint_size_mb"]))
    files = write_outputs(out_dir, cfg, environment, metrics, results,
                          {"prepare": {"reason": prepared.reason, "files": len(prepared.files)}})
    log_to_tracker(tracker, metrics, results, files, out_dir)
    return metrics


def _checkpoint_phase(storage: Mapping[str, Any], out_dir: Path, size_mb: float) -> Dict[str, Any]:
    from bench.iobench.checkpoint import run_checkpoint
    from bench.storage import checkpoint_store

    store = checkpoint_store(storage, out_dir, CHECKPOINT_DIR)
    log.info("checkpoint: %.1f MB to %s", size_mb, store.url)
    return run_checkpoint(store, storage["checkpoint_name"], size_mb)
