"""The storage benchmark's report: simulated accelerators merged, files written, MLflow fed.

Merging (MLPerf Storage / sai3-bench conventions): throughput is summed over accelerators
(each over its own measured window), latency percentiles are taken over all requests of all of
them, AU is reported per accelerator and epoch, as a mean and as the minimum (the slowest
accelerator decides whether the storage keeps up). A figure with no samples behind it (no
request measured, no compute emulated) is left out, with a warning, never reported as 0.
"""

from __future__ import annotations

import csv
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence

import psutil

from bench.analysis.stats import mean, percentile, present, rate
from bench.config.storage import StorageConfig
from bench.iobench.reader import EpochStats, ReaderResult, Request
from bench.results import read_column, read_summary, write_csv, write_json

log = logging.getLogger(__name__)

# MLPerf Storage asks for a dataset of at least 5x the client's RAM so the page cache cannot hold it.
CACHE_SAFE_RAM_MULTIPLE = 5


def _total_rate(results: Sequence[ReaderResult], amount: str) -> Optional[float]:
    rates = [rate(r.total(amount) if amount != "requests" else len(r.requests), r.total("wall_s")) for r in results]
    measured = [r for r in rates if r is not None]
    return sum(measured) if measured else None


def read_metrics(results: Sequence[ReaderResult], storage: StorageConfig) -> Dict[str, Any]:
    workload = storage.workload
    latencies = [r.latency_ms for result in results for r in result.requests]
    step_times = [t for result in results for t in result.step_times_ms]
    computing = workload.computation_time > 0
    per_accelerator_au = [rate(r.total("compute_s"), r.total("wall_s")) for r in results]
    epoch_aus = [e.au for result in results for e in result.epochs if e.steps]
    read_bytes = sum(result.total("bytes") for result in results)
    wall = max((result.total("wall_s") for result in results), default=0.0)
    cpu_s = sum(result.cpu_s for result in results)
    read_mb = _total_rate(results, "bytes")
    metrics: Dict[str, Any] = present({
        "samples_per_second": _total_rate(results, "samples"),
        "read_mb_per_second": read_mb / 1e6 if read_mb is not None else None,
        "requests_per_second": _total_rate(results, "requests"),
        "read_samples": sum(result.total("samples") for result in results),
        "read_bytes": int(read_bytes),
        "read_requests": len(latencies),
        "read_steps": sum(result.total("steps") for result in results),
        "read_seconds": wall,
        "latency_ms_mean": mean(latencies),
        "latency_ms_p50": percentile(latencies, 50),
        "latency_ms_p90": percentile(latencies, 90),
        "latency_ms_p99": percentile(latencies, 99),
        "latency_ms_max": max(latencies, default=None),
        "step_time_ms_p50": percentile(step_times, 50),
        "step_time_ms_p99": percentile(step_times, 99),
        "data_wait_fraction": rate(sum(r.total("wait_s") for r in results), sum(r.total("wall_s") for r in results)),
        # AU only means something when there is compute to keep busy (computation_time > 0)
        "au_percent_mean": 100.0 * mean([a for a in per_accelerator_au if a is not None]) if computing and any(
            a is not None for a in per_accelerator_au) else None,
        "au_percent_min": 100.0 * min(epoch_aus) if computing and epoch_aus else None,
        "au_threshold_percent": 100.0 * workload.au_threshold,
        "client_cpu_seconds": cpu_s,
        "client_cpu_percent": 100.0 * cpu_s / wall if wall > 0 else None,  # of one core, all accelerators
        "client_cpu_seconds_per_gb": cpu_s / (read_bytes / 1e9) if read_bytes else None,
    })
    metrics["au_pass"] = bool(computing and epoch_aus and metrics["au_percent_min"] >= metrics["au_threshold_percent"])
    if not latencies or metrics["read_steps"] < 2 * len(results):
        log.warning("read: only %d measured steps and %d requests after the warm-up step: too few for stable "
                    "figures (raise storage.workload.num_files or epochs); figures without samples are left out",
                    metrics["read_steps"], len(latencies))
    return metrics


def caching_metrics(dataset_bytes: int) -> Dict[str, Any]:
    ram = psutil.virtual_memory().total
    return {"dataset_bytes": dataset_bytes, "client_ram_bytes": ram,
            "potential_caching": dataset_bytes < CACHE_SAFE_RAM_MULTIPLE * ram}


def epoch_rows(results: Sequence[ReaderResult]) -> List[Dict[str, Any]]:
    return [{"client": r.client, "epoch": e.epoch, "steps": e.steps, "samples": e.samples, "bytes": int(e.bytes),
             "wall_s": round(e.wall_s, 6), "compute_s": round(e.compute_s, 6), "wait_s": round(e.wait_s, 6),
             "au_percent": round(100.0 * e.au, 3)}
            for r in results for e in r.epochs]


@dataclass
class StorageReport:
    # what the sweep report plots per run: the per-request file and column, and the MLflow series
    TIMELINE_FILE, TIMELINE_COLUMN, TIMELINE_METRIC = "read_latency.csv", "latency_ms", "read_latency_ms"

    results: List[ReaderResult]  # one per simulated accelerator
    metrics: Dict[str, Any]
    prepare: Dict[str, Any] = field(default_factory=dict)  # why the dataset was (re)written or reused

    def headline(self) -> str:
        m = self.metrics

        def figure(key: str, unit: str = "", digits: int = 1) -> str:
            return f"{m[key]:.{digits}f}{unit}" if key in m else "n/a"

        au = (f"AU {figure('au_percent_mean', '%')} (min {figure('au_percent_min', '%')}, "
              f"{'PASS' if m['au_pass'] else 'FAIL'} at {m['au_threshold_percent']:.0f}%)"
              if m["computation_time"] > 0 else "I/O ceiling (computation_time=0)")
        return (f"storage {m['workload']} on {m['storage_url']} x{m['clients']} accelerators: "
                f"{figure('samples_per_second')} samples/s, {figure('read_mb_per_second')} MB/s, request p50 "
                f"{figure('latency_ms_p50', ' ms', 2)} p99 {figure('latency_ms_p99', ' ms', 2)}, {au}")

    def write(self, out_dir: Path, config: Mapping[str, Any], environment: Mapping[str, Any],
              run_id: Optional[str]) -> List[Path]:
        """run_summary.json, summary.csv (one row), epochs.csv (accelerator x epoch),
        read_latency.csv (one row per measured request)."""
        out_dir.mkdir(parents=True, exist_ok=True)
        epochs = epoch_rows(self.results)
        requests = [{"client": r.client, "epoch": q.epoch, "key": q.key, "bytes": q.bytes,
                     "latency_ms": round(q.latency_ms, 4)} for r in self.results for q in r.requests]
        summary = {"results": self.metrics, "epochs": epochs, "prepare": self.prepare,
                   "environment": dict(environment), "config": dict(config), "mlflow_run_id": run_id}
        return [write_json(out_dir / "run_summary.json", summary),
                write_csv(out_dir / "summary.csv", list(self.metrics), [self.metrics]),
                write_csv(out_dir / "epochs.csv", list(epochs[0]) if epochs else ["client", "epoch"], epochs),
                write_csv(out_dir / "read_latency.csv", ["client", "epoch", "key", "bytes", "latency_ms"], requests)]

    @property
    def problems(self) -> List[str]:
        """What failed after the read phase was measured (the checkpoint phase)."""
        return [f"the checkpoint phase failed: {self.metrics['checkpoint_error']}"] \
            if "checkpoint_error" in self.metrics else []

    def log_to(self, tracker: Any, files: List[Path], out_dir: Path, log_series: bool) -> None:
        """Everything but the metrics (logged first, on their own): series, tags, artifacts."""
        if not tracker.active:
            return
        for row in epoch_rows(self.results):
            if row["client"] == 0:
                tracker.log_metrics({"epoch_au_percent": row["au_percent"], "epoch_samples": row["samples"]},
                                    step=row["epoch"])
        if log_series:
            requests = sorted((q for r in self.results for q in r.requests), key=lambda q: q.finished)
            tracker.log_series(self.TIMELINE_METRIC, [q.latency_ms for q in requests])
        tracker.set_tags({key: self.metrics[key] for key in ("mode", "workload", "storage", "storage_client",
                                                             "storage_url", "au_pass", "potential_caching")})
        tracker.log_artifacts([*files, *sorted(out_dir.glob("*.log")), out_dir / ".hydra"])

    @classmethod
    def from_files(cls, job_dir: Path) -> "StorageReport":
        """The report of a finished run, read back from its directory (to upload it later)."""
        summary = read_summary(job_dir)
        clients: Dict[int, ReaderResult] = {}
        for row in summary["epochs"]:
            result = clients.setdefault(int(row["client"]), ReaderResult(int(row["client"]), []))
            result.epochs.append(EpochStats(int(row["epoch"]), int(row["steps"]), int(row["samples"]), float(row["bytes"]),
                                            float(row["wall_s"]), float(row["compute_s"]), float(row["wait_s"])))
        with (job_dir / cls.TIMELINE_FILE).open() as fh:
            for order, row in enumerate(csv.DictReader(fh)):
                result = clients.setdefault(int(row["client"]), ReaderResult(int(row["client"]), []))
                result.requests.append(Request(row["key"], int(row["epoch"]), int(row["bytes"]),
                                               float(row["latency_ms"]), float(order)))
        return cls([clients[c] for c in sorted(clients)], summary["results"], summary.get("prepare", {}))

    @classmethod
    def timeline(cls, job_dir: Path) -> List[float]:
        """The per-request latencies a finished run wrote (for the sweep report)."""
        return read_column(job_dir / cls.TIMELINE_FILE, cls.TIMELINE_COLUMN)
