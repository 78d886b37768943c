"""How a training run shows in a sweep: its table columns and its plots (bench.analysis asks the
report class, TrainReport, and branches on no mode name)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, List

from bench.analysis.runs import shown

if TYPE_CHECKING:
    import pandas as pd

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

# a training sweep whose jobs evaluated: shown before "error", each only when some job has it
ACCURACY_COLUMNS = [
    ("val_top1", "val_top1", "{:.4f}"),
    ("reached_target", "reached_target", "bool"),  # True/False (MLflow gives it back as 1.0/0.0)
    ("time_to_target_seconds", "time_to_target_seconds", "{:.1f}"),
]

# shown before "error" when some job has them: repeats (benchmark.repeats) and utilisation (a known GPU)
REPEAT_COLUMNS = [
    ("repeats", "repeats", "{}"),
    ("images/s median", "images_per_second_median", "{:.1f}"),
    ("CI95 low", "images_per_second_ci95_low", "{:.1f}"),
    ("CI95 high", "images_per_second_ci95_high", "{:.1f}"),
    ("stable", "stable", "bool"),
    ("MFU", "mfu", "{:.1%}"),
]

# what names a single run in `compare` (prefix, figure, format), and the figure compared without samples
LABEL_COLUMNS = [("", "model", "{}"), ("", "precision", "{}"), ("bs=", "batch_size", "int")]
COMPARE_FIGURE = "images_per_second"


def training_plots(frame: "pd.DataFrame", out: Path, title: str) -> List[Path]:
    """Throughput and scaling efficiency vs process count, throughput vs batch, step times, accuracy."""
    from bench.analysis.plots import plot_training

    return plot_training(frame, out, title, ("Step-time distribution", "Step time (ms)", "step_time_distribution.png"),
                         run_label)


def run_label(row: Dict[str, Any]) -> str:
    """A run under its box in the timeline plot."""
    return f"job {row['job']}\n{shown(row.get('precision'))} x{shown(row.get('world_size'))}" \
           f"\nbs {shown(row.get('batch_size'))}"
