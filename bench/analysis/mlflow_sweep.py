"""A sweep read back from MLflow: a parent run's children as the frame bench.analysis.runs
describes (metrics.* the figures, params.* the config, tags the run fields); a single run too."""

from __future__ import annotations

import os
from contextlib import contextmanager
from typing import Any, Dict, Iterator, List, Optional, cast

import pandas as pd

from bench.analysis.runs import CONFIG_PREFIX, ENV_PREFIX, PROVENANCE, absent, ordered_columns
from bench.errors import ReportError
from bench.machine.fitness import REASONS
from bench.report_view import DISPLAY
from bench.scenarios import report_class


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
        mlflow.set_tracking_uri(cast(Any, set_before))  # None: back to "not set" (typed str in some releases)
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

    reports = [report_class(mode) for mode in modes]  # each run's scenario says what it reads back
    ids = list(runs["run_id"])
    timelines = [series(run_id, r.view.timeline_metric) for run_id, r in zip(ids, reports, strict=True)]
    repeats = [
        series(run_id, r.view.repeats_metric if r.view.sample.from_repeats else None)
        for run_id, r in zip(ids, reports, strict=True)
    ]
    own = [r.read_back_mlflow(client, run_id) for run_id, r in zip(ids, reports, strict=True)]
    named: Dict[str, str] = {}
    for r in reports:
        named.update(r.view.named_in_config)
    return _frame_from_search(runs.astype(object).reset_index(drop=True), timelines, own, repeats, named)


def _frame_from_search(
    runs: pd.DataFrame,
    timelines: List[List[float]],
    own: List[Dict[str, Any]],
    repeats: List[List[float]],
    named: Dict[str, str],
) -> pd.DataFrame:
    def column(name: str) -> pd.Series:
        return runs[name] if name in runs else pd.Series([None] * len(runs), index=runs.index, dtype=object)

    def text(name: str) -> pd.Series:
        return column(name).map(lambda v: "" if absent(v) else v)

    metrics = runs.filter(regex=r"^metrics\.").rename(columns=lambda c: c[len("metrics.") :])
    metrics = metrics.drop(columns=[c for c in DISPLAY.values() if c in metrics])  # the UI's rounded copies
    config = runs.filter(regex=r"^params\.").rename(columns=lambda c: CONFIG_PREFIX + c[len("params.") :])
    for key, name in named.items():  # the runs' scenarios name them
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
        },
        index=runs.index,
        dtype=object,
    )
    provenance = pd.DataFrame(
        {ENV_PREFIX + k: text("tags.env." + k) for k in PROVENANCE}, index=runs.index, dtype=object
    )
    columns = sorted({name for row in own for name in row})
    extra = pd.DataFrame({c: [row.get(c, []) for row in own] for c in columns}, index=runs.index, dtype=object)
    frame = pd.concat([fields, extra, metrics, config, provenance], axis=1).astype(object)
    return frame.reindex(columns=ordered_columns(frame.columns))
