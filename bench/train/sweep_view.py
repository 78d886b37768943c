"""How a training run shows in a sweep and in `compare`: its table columns, its plots, what compare
samples (per-step images/s), and the accuracy curve it reads back (bench.analysis asks the report
class, TrainReport, for VIEW, and branches on no mode name)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, List, Tuple

from bench.runtime.sweep_view import model_view
from bench.train.result import TrainMetrics

if TYPE_CHECKING:
    import pandas as pd

# the sweep's own figures (bench.analysis.scaling), among the record's columns (header, key, format, at)
SCALING_COLUMNS = [
    ("data wait %", "data_wait_percent", "{:.1f}", 11),
    ("speedup", "speedup", "{:.2f}", 12),
    ("scaling eff %", "scaling_efficiency_percent", "{:.1f}", 13),
]


def training_plots(frame: "pd.DataFrame", out: Path, title: str) -> List[Path]:
    """Throughput and scaling efficiency vs process count, throughput vs batch, step times, accuracy."""
    from bench.runtime.plots import plot_training

    return plot_training(frame, out, title, ("Step-time distribution", "Step time (ms)", "step_time_distribution.png"))


TIMELINE_METRIC = "step_time_ms"  # the MLflow series of the step times
VIEW = model_view(TrainMetrics, training_plots, TIMELINE_METRIC, SCALING_COLUMNS)


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def read_val_curve(job_dir: Path) -> List[Tuple[float, float]]:
    """(wall_seconds, val_top1) of every evaluated epoch in metrics_epoch.jsonl, in time order;
    epochs without an evaluation (no val_top1) and lines that are not JSON objects are skipped."""
    path = job_dir / "metrics_epoch.jsonl"
    if not path.is_file():
        return []
    points = []
    for line in path.read_text().splitlines():
        try:
            epoch = json.loads(line)
        except ValueError:
            continue
        if isinstance(epoch, dict) and _finite(epoch.get("val_top1")) and _finite(epoch.get("wall_seconds")):
            points.append((float(epoch["wall_seconds"]), float(epoch["val_top1"])))
    return sorted(points)


def mlflow_val_curve(client: Any, run_id: str) -> List[Tuple[float, float]]:
    """(wall seconds, val top-1) per evaluated epoch, from the per-epoch series the training
    report logs (step = epoch; step 0 is the final figure)."""

    def by_epoch(name: str) -> Dict[int, float]:
        return {m.step: m.value for m in client.get_metric_history(run_id, name) if m.step > 0}

    walls, top1 = by_epoch("epoch_wall_seconds"), by_epoch("val_top1")
    return [(walls[e], top1[e]) for e in sorted(walls) if e in top1]
