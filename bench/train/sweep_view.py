"""How a training run shows in a sweep: its table columns and its plots (bench.analysis asks the
report class, TrainReport, and branches on no mode name)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, List

from bench.runtime.sweep_view import (
    ACCURACY_COLUMNS,
    COMPARE_FIGURE,
    FIT_COLUMNS,
    LABEL_COLUMNS,
    REPEAT_COLUMNS,
    run_label,
)

if TYPE_CHECKING:
    import pandas as pd

# the label columns, compare figure, accuracy and repeat columns are the runtime's (shared with inference)
__all__ = [
    "ACCURACY_COLUMNS",
    "COMPARE_FIGURE",
    "FIT_COLUMNS",
    "LABEL_COLUMNS",
    "REPEAT_COLUMNS",
    "TRAINING_COLUMNS",
    "training_plots",
]

TRAINING_COLUMNS = [  # (header, frame column = a radix_metrics key, format)
    ("job", "job", "{}"),
    ("status", "status", "{}"),
    ("overrides", "overrides", "{}"),
    ("model", "model", "{}"),
    ("precision", "precision", "{}"),
    ("procs", "world_size", "{}"),
    ("batch/proc", "batch_size", "{}"),
    ("global batch", "global_batch_size", "{}"),
    ("images/s", "images_per_second", "{:.1f}"),
    ("images/s/proc", "images_per_second_per_device", "{:.1f}"),
    ("step p50 ms", "step_time_ms_p50", "{:.2f}"),
    ("step p99 ms", "step_time_ms_p99", "{:.2f}"),
    ("data wait %", "data_wait_percent", "{:.1f}"),
    ("speedup", "speedup", "{:.2f}"),
    ("scaling eff %", "scaling_efficiency_percent", "{:.1f}"),
    ("scaling", "scaling", "{}"),
    ("error", "error", "{}"),
]


def training_plots(frame: "pd.DataFrame", out: Path, title: str) -> List[Path]:
    """Throughput and scaling efficiency vs process count, throughput vs batch, step times, accuracy."""
    from bench.analysis.plots import plot_training

    return plot_training(
        frame, out, title, ("Step-time distribution", "Step time (ms)", "step_time_distribution.png"), run_label
    )
