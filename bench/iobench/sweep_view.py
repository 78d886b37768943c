"""How a storage-benchmark run shows in a sweep and in `compare`: its table columns, its plots
(throughput and accelerator utilization vs client count, per-request read latency) and what compare
samples (the run's own samples/s: per measured run when storage.runs > 1)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, List

from bench.report_view import Sample, View
from bench.runtime.sweep_view import FIT_COLUMNS

if TYPE_CHECKING:
    import pandas as pd

STORAGE_COLUMNS = [  # a sweep of mode=storage runs (the storage benchmark)
    ("job", "job", "{}"),
    ("status", "status", "{}"),
    ("overrides", "overrides", "{}"),
    ("workload", "workload", "{}"),
    ("storage", "storage", "{}"),
    ("client", "storage_client", "{}"),
    ("clients", "clients", "{}"),
    ("MLPerf samples/s", "mlperf_samples_per_second", "{:.1f}"),
    ("MLPerf MiB/s", "mlperf_mib_per_second", "{:.1f}"),
    ("MLPerf AU %", "mlperf_au_percent", "{:.1f}"),
    ("MLPerf pass", "mlperf_au_pass", "{}"),
    ("samples/s", "samples_per_second", "{:.1f}"),
    ("read MB/s", "read_mb_per_second", "{:.1f}"),
    ("latency p50 ms", "latency_ms_p50", "{:.2f}"),
    ("latency p99 ms", "latency_ms_p99", "{:.2f}"),
    ("AU mean %", "au_percent_mean", "{:.1f}"),
    ("AU min %", "au_percent_min", "{:.1f}"),
    ("AU pass", "au_pass", "{}"),
    ("caching?", "potential_caching", "{}"),
    ("ckpt write GB/s", "checkpoint_write_gbps", "{:.2f}"),
    ("error", "error", "{}"),
]

# what names a single run in `compare` (prefix, figure, format)
LABEL_COLUMNS = [("", "workload", "{}"), ("", "storage", "{}"), ("x", "clients", "int")]
COMPARE_FIGURE = "samples_per_second"  # bench's strict samples/s (warm-up step out), the final line's
TIMELINE_METRIC = "read_latency_ms"  # the MLflow series of the per-request read latencies
REPEATS_METRIC = "run_samples_per_second"  # the MLflow series of each measured run's samples/s (storage.runs > 1)


def storage_plots(frame: "pd.DataFrame", out: Path, title: str) -> List[Path]:
    from bench.iobench.plots import plot_storage

    return plot_storage(frame, out, title)


VIEW = View(
    # compare: samples/s of each measured run (storage.runs > 1, runs.csv), else the run's own figure;
    # the per-request latencies overlap across readers and accelerators: not a rate, not sampled
    sample=Sample(COMPARE_FIGURE, "samples/s"),
    columns=STORAGE_COLUMNS,
    optional_columns=FIT_COLUMNS,  # the fit column, when judged
    plots=storage_plots,
    label_columns=LABEL_COLUMNS,
    timeline_metric=TIMELINE_METRIC,
    repeats_metric=REPEATS_METRIC,
    named_in_config={"storage.workload.name": "workload", "storage.name": "storage"},
    shown_config=("mode",),
)
