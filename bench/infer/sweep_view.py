"""How an inference run shows in a sweep: its table columns and its plots (the per-batch latency
where a training sweep plots step times)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, List

from bench.report_view import Sample
from bench.runtime.sweep_view import model_view

if TYPE_CHECKING:
    import pandas as pd

INFERENCE_COLUMNS = [  # a sweep of mode=inference runs
    ("job", "job", "{}"),
    ("status", "status", "{}"),
    ("overrides", "overrides", "{}"),
    ("model", "model", "{}"),
    ("precision", "precision", "{}"),
    ("batch", "batch_size", "{}"),
    ("images/s", "images_per_second", "{:.1f}"),
    ("latency p50 ms", "latency_ms_p50", "{:.2f}"),
    ("latency p95 ms", "latency_ms_p95", "{:.2f}"),
    ("latency p99 ms", "latency_ms_p99", "{:.2f}"),
    ("GFLOPs/image", "gflops_per_image_forward", "{:.2f}"),
    ("error", "error", "{}"),
]


def inference_plots(frame: "pd.DataFrame", out: Path, title: str) -> List[Path]:
    from bench.runtime.plots import plot_training

    return plot_training(frame, out, title, ("Per-batch latency", "Latency per batch (ms)", "latency_distribution.png"))


TIMELINE_METRIC = "latency_ms"  # the MLflow series of the per-batch latencies

# compare: the per-batch latency (ms, its median; lower is better), else the run's p50
SAMPLE = Sample("latency_ms_p50", "ms", timeline_is_figure=True, lower_is_better=True, from_repeats=False)
VIEW = model_view(SAMPLE, INFERENCE_COLUMNS, inference_plots, TIMELINE_METRIC)
