"""A sweep read back from MLflow: a parent run's children as the frame bench.analysis.runs
describes (their metrics the figures, their params the config, tags the run fields), one
RunRecord each, as a multirun directory's jobs are; a single run too."""

from __future__ import annotations

from typing import Any, List, Optional

import pandas as pd

from bench.analysis.runs import PROVENANCE, RunRecord, frame_from_records
from bench.errors import ReportError
from bench.machine.fitness import REASONS
from bench.report_view import DISPLAY
from bench.scenarios import report_class


def read_mlflow_sweep(
    parent_run_id: str, tracking_uri: str, single: bool = False, argument: str = "--sweep"
) -> pd.DataFrame:
    """The frame of a sweep's child runs (oldest first): their metrics become the figures, their
    params the config, the sweep.job / overrides / error tags the run fields. `single`: a run
    without children is a frame of its own one row (bench.tools.compare takes either)."""
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=tracking_uri)  # never the global URI: a caller's stays as it was
    try:
        parent = client.get_run(parent_run_id)
    except Exception as exc:  # mlflow raises its own exception types per store
        raise ReportError(
            f"{argument} {parent_run_id} is neither a directory nor a run in the MLflow store at "
            f"{tracking_uri} ({type(exc).__name__})"
        ) from None
    children = client.search_runs(
        experiment_ids=[parent.info.experiment_id],
        filter_string=f"tags.mlflow.parentRunId = '{parent_run_id}'",
        order_by=["attributes.start_time ASC"],
        max_results=10000,
    )
    runs = list(children) or ([parent] if single else [])
    if not runs:
        raise ReportError(f"MLflow run {parent_run_id} has no child runs: pass the parent run of a sweep")
    return frame_from_records([_record(client, run) for run in runs])


def _record(client: Any, run: Any) -> RunRecord:
    """One run as a sweep's job: what its scenario's report class reads back of it, too."""
    tags, params, run_id = run.data.tags, run.data.params, run.info.run_id
    reports = report_class(params.get("mode"))  # None: recorded before modes (training)
    view = reports.view

    def series(name: Optional[str]) -> List[float]:
        return [m.value for m in sorted(client.get_metric_history(run_id, name), key=lambda m: m.step)] if name else []

    metrics = {k: v for k, v in run.data.metrics.items() if k not in DISPLAY.values()}  # not the UI's rounded copies
    for key, name in view.named_in_config.items():  # figures its scenario names by a config key
        metrics.setdefault(name, params.get(key, ""))
    if "bench.fit_reasons" in tags:  # a string: a tag, not a metric (bench.runtime.fit_watch)
        metrics[REASONS] = tags["bench.fit_reasons"]
    return RunRecord(
        tags.get("sweep.job") or tags.get("mlflow.runName", ""),
        run.info.status,
        tags.get("overrides", ""),
        dict(params),
        metrics,
        series(view.timeline_metric),
        error=tags.get("error", ""),
        run_id=run_id,
        repeat_rates=series(view.repeats_metric if view.sample.from_repeats else None),
        provenance={k: tags.get("env." + k, "") for k in PROVENANCE},
        own=reports.read_back_mlflow(client, run_id),
    )
