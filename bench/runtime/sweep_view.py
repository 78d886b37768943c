"""What the model scenarios (training, inference) share in a sweep report and in `compare`: the
optional columns, how a single run is named, the config keys named as columns and the scaling
figures, a run's label in the timeline plot; `model_view` builds a scenario's View on them."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, List, Sequence, Tuple

from bench.analysis.cells import shown
from bench.report_view import Scaling, View
from bench.runtime.reporting import REPEATS_METRIC

if TYPE_CHECKING:
    import pandas as pd

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

# fit to measure (bench.machine.fitness): shown before "error" when some job recorded it; a job that
# was not fit is also named in a warning under the table (bench.analysis.render.unfit_warning)
FIT_COLUMNS = [("fit", "fit_to_measure", "bool")]

# what names a single run in `compare` (prefix, figure, format)
LABEL_COLUMNS = [("", "model", "{}"), ("", "precision", "{}"), ("bs=", "batch_size", "int")]

# a model run read back from MLflow has its names in its params only: these config keys give the
# columns a job dir's results carry under the short name
NAMED_IN_CONFIG = {
    "model.arch": "model",
    "precision.name": "precision",
    "distributed.scaling": "scaling",
    "distributed.name": "distributed",
    "data.name": "data",
}
# a model sweep's speedup over process counts, and its data-wait percentage (bench.analysis.scaling)
SCALING = Scaling("world_size", "images_per_second", "data_wait_fraction")
# config keys the sweep table shows under a column of its own already (model, precision, procs, batch)
SHOWN_CONFIG = ("model.arch", "precision.name", "distributed.nproc_per_node", "data.batch_size", "mode")


def plot_model_sweep(timeline: Tuple[str, str, str], frame: "pd.DataFrame", out: Path, title: str) -> List[Path]:
    """A model sweep's plots (bench.runtime.plots, imported when they are drawn: pandas and matplotlib)."""
    from bench.runtime.plots import plot_training

    return plot_training(frame, out, title, timeline, run_label)


def model_view(
    record: Any, timeline: Tuple[str, str, str], timeline_metric: str, more: Sequence[Tuple[str, str, str, int]] = ()
) -> View:
    """A model scenario's View: what its record declares (table columns, compare's sample) and `more`
    columns, its plots (`timeline`: what its timeline is, its unit, the plot's file name) and the MLflow
    series of its timeline; the rest is what training and inference share."""
    return View.of(
        record,
        more,
        plots=functools.partial(plot_model_sweep, timeline),
        optional_columns=ACCURACY_COLUMNS + REPEAT_COLUMNS + FIT_COLUMNS,
        label_columns=LABEL_COLUMNS,
        timeline_metric=timeline_metric,
        repeats_metric=REPEATS_METRIC,
        named_in_config=NAMED_IN_CONFIG,
        shown_config=SHOWN_CONFIG,
        scaling=SCALING,
    )


def run_label(row: Dict[str, Any]) -> str:
    """A run under its box in the timeline plot."""
    return (
        f"job {row['job']}\n{shown(row.get('precision'))} x{shown(row.get('world_size'))}"
        f"\nbs {shown(row.get('batch_size'))}"
    )
