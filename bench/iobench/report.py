"""The storage benchmark's numbers: clients merged, files written, MLflow fed.

Merging clients (MLPerf Storage / sai3-bench conventions): throughput is summed over clients
(each over its own measured window), latency percentiles are taken over all requests of all
clients, AU is reported per client and epoch, as a mean and as the minimum (the slowest
accelerator decides whether the storage keeps up).
"""

from __future__ import annotations

import csv
import json
import logging
from pathlib import Path
from typing import Any, Dict, List, Mapping, Sequence

import psutil

from bench.iobench.reader import ReaderResult
from bench.results import percentile

log = logging.getLogger(__name__)

# MLPerf Storage asks for a dataset of at least 5x the client's RAM so the page cache cannot hold it.
CACHE_SAFE_RAM_MULTIPLE = 5


def read_metrics(results: Sequence[ReaderResult], workload: Mapping[str, Any]) -> Dict[str, Any]:
    latencies = [r.latency_ms for result in results for r in result.requests]
    step_times = [t for result in results for t in result.step_times_ms]
    per_client_au = [_au(result) for result in results]
    epoch_aus = [e.au for result in results for e in result.epochs if e.steps]
    computing = workload["computation_time"] > 0
    samples = sum(result.total("samples") for result in results)
    read_bytes = sum(result.total("bytes") for result in results)
    wall = max((result.total("wall_s") for result in results), default=0.0)
    cpu_s = sum(result.cpu_s for result in results)
    metrics: Dict[str, Any] = {
        "samples_per_second": sum(_rate(r.total("samples"), r.total("wall_s")) for r in results),
        "read_mb_per_second": sum(_rate(r.total("bytes"), r.total("wall_s")) for r in results) / 1e6,
        "requests_per_second": sum(_rate(len(r.requests), r.total("wall_s")) for r in results),
        "read_samples": samples,
        "read_bytes": int(read_bytes),
        "read_requests": len(latencies),
        "read_steps": sum(result.total("steps") for result in results),
        "read_seconds": wall,
        "latency_ms_mean": sum(latencies) / len(latencies) if latencies else 0.0,
        "latency_ms_p50": percentile(latencies, 50) if latencies else 0.0,
        "latency_ms_p90": percentile(latencies, 90) if latencies else 0.0,
        "latency_ms_p99": percentile(latencies, 99) if latencies else 0.0,
        "latency_ms_max": max(latencies, default=0.0),
        "step_time_ms_p50": percentile(step_times, 50) if step_times else 0.0,
        "step_time_ms_p99": percentile(step_times, 99) if step_times else 0.0,
        "data_wait_fraction": _rate(sum(r.total("wait_s") for r in results), sum(r.total("wall_s") for r in results)),
        # AU only means something when there is compute to keep busy (computation_time > 0)
        "au_percent_mean": 100.0 * sum(per_client_au) / len(per_client_au) if computing and per_client_au else 0.0,
        "au_percent_min": 100.0 * min(epoch_aus, default=0.0) if computing else 0.0,
        "au_threshold_percent": 100.0 * workload["au_threshold"],
        "client_cpu_seconds": cpu_s,
        "client_cpu_percent": 100.0 * cpu_s / wall if wall > 0 else 0.0,  # of one core, all clients
        "client_cpu_seconds_per_gb": cpu_s / (read_bytes / 1e9) if read_bytes else 0.0,
    }
    metrics["au_pass"] = bool(computing and epoch_aus and metrics["au_percent_min"] >= metrics["au_threshold_percent"])
    if not latencies or metrics["read_steps"] < 2 * len(results):
        log.warning("read: only %d measured steps and %d requests after the warm-up step: too few for stable "
                    "figures (raise storage.workload.num_files or epochs)", metrics["read_steps"], len(latencies))
    return metrics


def _au(result: ReaderResult) -> float:
    wall = result.total("wall_s")
    return result.total("compute_s") / wall if wall > 0 else 0.0


def _rate(amount: float, seconds: float) -> float:
    return amount / seconds if seconds > 0 else 0.0


def caching_metrics(dataset_bytes: int) -> Dict[str, Any]:
    ram = psutil.virtual_memory().total
    return {"dataset_bytes": dataset_bytes, "client_ram_bytes": ram,
            "potential_caching": dataset_bytes < CACHE_SAFE_RAM_MULTIPLE * ram}


def epoch_rows(results: Sequence[ReaderResult]) -> List[Dict[str, Any]]:
    return [{"client": r.client, "epoch": e.epoch, "steps": e.steps, "samples": e.samples, "bytes": int(e.bytes),
             "wall_s": round(e.wall_s, 6), "compute_s": round(e.compute_s, 6), "wait_s": round(e.wait_s, 6),
             "au_percent": round(100.0 * e.au, 3)}
            for r in results for e in r.epochs]


def _write_csv(path: Path, rows: Sequence[Mapping[str, Any]], fields: Sequence[str]) -> Path:
    with path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(fields))
        writer.writeheader()
        writer.writerows(rows)
    return path


def write_outputs(out_dir: Path, cfg: Mapping[str, Any], environment: Mapping[str, Any], metrics: Mapping[str, Any],
                  results: Sequence[ReaderResult], extra: Mapping[str, Any]) -> List[Path]:
    """run_summary.json, summary.csv (one row), epochs.csv (client x epoch), read_latency.csv
    (one row per measured request)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    epochs = epoch_rows(results)
    files = [
        _write_csv(out_dir / "summary.csv", [metrics], list(metrics)),
        _write_csv(out_dir / "epochs.csv", epochs, list(epochs[0]) if epochs else ["client", "epoch"]),
        _write_csv(out_dir / "read_latency.csv",
                   [{"client": r.client, "epoch": q.epoch, "key": q.key, "bytes": q.bytes,
                     "latency_ms": round(q.latency_ms, 4)} for r in results for q in r.requests],
                   ["client", "epoch", "key", "bytes", "latency_ms"]),
    ]
    summary = {"results": dict(metrics), "epochs": epochs, **extra,
               "environment": dict(environment), "config": dict(cfg)}
    summary_path = out_dir / "run_summary.json"
    summary_path.write_text(json.dumps(summary, indent=2, default=str) + "\n")
    return [summary_path, *files]


def log_to_tracker(tracker: Any, metrics: Mapping[str, Any], results: Sequence[ReaderResult], files: List[Path],
                   out_dir: Path) -> None:
    if not tracker.active:
        return
    for row in epoch_rows(results):
        if row["client"] == 0:
            tracker.log_metrics({"epoch_au_percent": row["au_percent"], "epoch_samples": row["samples"]},
                                step=row["epoch"])
    requests = sorted((q for r in results for q in r.requests), key=lambda q: q.finished)
    tracker.log_series("read_latency_ms", [q.latency_ms for q in requests])
    tracker.log_metrics(metrics)
    tracker.set_tags({key: metrics[key] for key in ("mode", "workload", "storage", "storage_client", "storage_url",
                                                    "au_pass", "potential_caching")})
    tracker.log_artifacts([*files, *sorted(out_dir.glob("*.log")), out_dir / ".hydra"])


def headline(metrics: Mapping[str, Any]) -> str:
    au = (f"AU {metrics['au_percent_mean']:.1f}% (min {metrics['au_percent_min']:.1f}%, "
          f"{'PASS' if metrics['au_pass'] else 'FAIL'} at {metrics['au_threshold_percent']:.0f}%)"
          if metrics["computation_time"] > 0 else "I/O ceiling (computation_time=0)")
    return (f"storage {metrics['workload']} on {metrics['storage_url']} x{metrics['clients']} clients: "
            f"{metrics['samples_per_second']:.1f} samples/s, {metrics['read_mb_per_second']:.1f} MB/s, "
            f"request p50 {metrics['latency_ms_p50']:.2f} ms p99 {metrics['latency_ms_p99']:.2f} ms, {au}")
