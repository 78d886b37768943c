"""A sweep read back from MLflow: a parent run's children as the frame bench.analysis.runs
describes (metrics.* the figures, params.* the config, tags the run fields); a single run too."""

from __future__ import annotations

import os
from contextlib import contextmanager
from typing import Any, Iterator, List, Optional, Tuple

import pandas as pd

from bench.analysis.runs import CONFIG_PREFIX, ENV_PREFIX, NAMED_IN_CONFIG, PROVENANCE, absent, ordered_columns
from bench.errors import ReportError
from bench.runtime.fitness import REASONS
from bench.scenarios import report_class
from bench.tracking.store import DISPLAY


@contextmanager
def _tracking_uri(uri: str) -> Iterator[None]:
    """mlflow.search_runs reads the global tracking URI (and set_tracking_uri exports it as
    MLFLOW_TRACKING_URI): point both at `uri` for the call only, then put back what was there."""
    import mlflow

    env_before = os.environ.get("MLFLOW_TRACKING_URI")
    set_before = mlflow.get_tracking_uri() if mlflow.is_tracking_uri_set() else None
    if set_before == env_before:
        set_before = None  # it is the environment's, which comes back below
    mlflow.set_tracking_uri(uri)
    try:
        yield
    finally:
        mlflow.set_tracking_uri(set_before)  # type: ignore[arg-type]  # None: back to "not set" (mlflow's code takes it)
        if env_before is None:
            os.environ.pop("MLFLOW_TRACKING_URI", None)
        else:
            os.environ["MLFLOW_TRACKING_URI"] = env_before


def read_mlflow_sweep(
    parent_run_id: str, tracking_uri: str, single: bool = False, argument: str = "--sweep"
) -> pd.DataFrame:
    """The frame of a sweep's child runs (oldest first): metrics.* become the figures,
    params.* the config, the sweep.job / overrides / error tags the run fields. `single`: a run
    without children is a frame of its own one row (bench.tools.compare takes either)."""
    import mlflow

    client = mlflow.MlflowClient(tracking_uri=tracking_uri)
    try:
        parent = client.get_run(parent_run_id)
    except Exception as exc:  # mlflow raises its own exception types per store
        raise ReportError(
            f"{argument} {parent_run_id} is neither a directory nor a run in the MLflow store at "
            f"{tracking_uri} ({type(exc).__name__})"
        ) from None
    with _tracking_uri(tracking_uri):
        runs = mlflow.search_runs(
            experiment_ids=[parent.info.experiment_id],
            filter_string=f"tags.mlflow.parentRunId = '{parent_run_id}'",
            order_by=["attributes.start_time ASC"],
            max_results=10000,
            output_format="pandas",
        )
        if runs.empty and single:
            runs = mlflow.search_runs(
                experiment_ids=[parent.info.experiment_id],
                output_format="pandas",
                filter_string=f"attributes.run_id = '{parent_run_id}'",
            )
    if runs.empty:
        raise ReportError(f"MLflow run {parent_run_id} has no child runs: pass the parent run of a sweep")
    modes = runs["params.mode"] if "params.mode" in runs else [None] * len(runs)  # None: recorded before modes

    def series(run_id: str, name: Optional[str]) -> List[float]:
        return [m.value for m in sorted(client.get_metric_history(run_id, name), key=lambda m: m.step)] if name else []

    timelines = [
        series(run_id, report_class(mode).TIMELINE_METRIC) for run_id, mode in zip(runs["run_id"], modes, strict=True)
    ]
    repeats = [
        series(run_id, report_class(mode).REPEATS_METRIC) for run_id, mode in zip(runs["run_id"], modes, strict=True)
    ]
    curves = [_mlflow_val_curve(client, run_id) for run_id in runs["run_id"]]
    return _frame_from_search(runs.astype(object).reset_index(drop=True), timelines, curves, repeats)


def _mlflow_val_curve(client: Any, run_id: str) -> List[Tuple[float, float]]:
    """(wall seconds, val top-1) per evaluated epoch, from the per-epoch series the training
    report logs (step = epoch; step 0 is the final figure)."""

    def by_epoch(name: str) -> dict:
        return {m.step: m.value for m in client.get_metric_history(run_id, name) if m.step > 0}

    walls, top1 = by_epoch("epoch_wall_seconds"), by_epoch("val_top1")
    return [(walls[e], top1[e]) for e in sorted(walls) if e in top1]


def _frame_from_search(
    runs: pd.DataFrame,
    timelines: List[List[float]],
    curves: List[List[Tuple[float, float]]],
    repeats: List[List[float]],
) -> pd.DataFrame:
    def column(name: str) -> pd.Series:
        return runs[name] if name in runs else pd.Series([None] * len(runs), index=runs.index, dtype=object)

    def text(name: str) -> pd.Series:
        return column(name).map(lambda v: "" if absent(v) else v)

    metrics = runs.filter(regex=r"^metrics\.").rename(columns=lambda c: c[len("metrics.") :])
    metrics = metrics.drop(columns=[c for c in DISPLAY.values() if c in metrics])  # the UI's rounded copies
    config = runs.filter(regex=r"^params\.").rename(columns=lambda c: CONFIG_PREFIX + c[len("params.") :])
    for key, name in NAMED_IN_CONFIG.items():
        if name not in metrics:
            metrics[name] = text("params." + key)
    if "tags.bench.fit_reasons" in runs:  # a string: a tag, not a metric (bench.runtime.fit_watch)
        metrics[REASONS] = text("tags.bench.fit_reasons")
    job = column("tags.sweep.job").where(~column("tags.sweep.job").map(absent), column("tags.mlflow.runName"))
    fields = pd.DataFrame(
        {
            "job": job,
            "status": runs["status"],
            "overrides": text("tags.overrides"),
            "error": text("tags.error"),
            "run_id": runs["run_id"],
            "timeline": timelines,
            "repeat_rates": repeats,
            "val_curve": curves,
        },
        index=runs.index,
        dtype=object,
    )
    provenance = pd.DataFrame(
        {ENV_PREFIX + k: text("tags.env." + k) for k in PROVENANCE}, index=runs.index, dtype=object
    )
    frame = pd.concat([fields, metrics, config, provenance], axis=1).astype(object)
    return frame.reindex(columns=ordered_columns(frame.columns))
