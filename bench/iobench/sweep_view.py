"""How a storage-benchmark run shows in a sweep: its table columns and its plots (throughput and
accelerator utilization vs client count, per-request read latency)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, List

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

# what names a single run in `compare`, and the figure compared without samples (as for model runs)
LABEL_COLUMNS = [("", "model", "{}"), ("", "precision", "{}"), ("bs=", "batch_size", "int")]
COMPARE_FIGURE = "images_per_second"


def storage_plots(frame: "pd.DataFrame", out: Path, title: str) -> List[Path]:
    from bench.analysis.storage_plots import plot_storage

    return plot_storage(frame, out, title)
