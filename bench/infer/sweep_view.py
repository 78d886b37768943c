"""How an inference run shows in a sweep: its table columns and its plots (the per-batch latency
where a training sweep plots step times)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, List

from bench.runtime.sweep_view import COMPARE_FIGURE, LABEL_COLUMNS, run_label

if TYPE_CHECKING:
    import pandas as pd

# the label columns and the compare figure are the runtime's (shared with training)
__all__ = ["COMPARE_FIGURE", "INFERENCE_COLUMNS", "LABEL_COLUMNS", "inference_plots"]

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
    from bench.analysis.plots import plot_training

    return plot_training(
        frame, out, title, ("Per-batch latency", "Latency per batch (ms)", "latency_distribution.png"), run_label
    )
