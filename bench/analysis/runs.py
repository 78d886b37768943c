"""A sweep as a DataFrame: one row per job, read from a Hydra multirun dir or from MLflow.

The frame's columns:
- the run fields `job`, `status` (FINISHED / FAILED / ...), `overrides`, `error`, `run_id`
  and `timeline` (the per-step times in ms as a list: step_time_ms of a training run, the
  per-batch latency of an inference run, the per-request read latency of a storage run),
  `repeat_rates` (images/s of each measured window of a run with benchmark.repeats > 1, else
  empty) and `val_curve` (the evaluated epochs of a training
  run with evaluation, from its metrics_epoch.jsonl: a list of (wall_seconds, val_top1) pairs,
  wall seconds counted from the job's first training step; empty without evaluation, and for
  runs read back from MLflow);
- one column per reported figure, named as in the run's results (`images_per_second`, ...);
- one `config.<flat.key>` column per config value, as a string (as MLflow params are).

Every column holds Python objects (dtype object): results mix numbers, strings and bools, and
a run keeps the types it reported (a process count read from a job dir prints as 2, one read
back from MLflow as 2.0, as before). A figure a run does not have is missing (None/NaN) and is
shown as an empty cell, never as 0.
"""

from __future__ import annotations

import json
import math
import os
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

import pandas as pd
import yaml

from bench.errors import ReportError
from bench.runtime.fitness import REASONS
from bench.scenarios import report_class
from bench.secrets import flatten

RUN_FIELDS = ("job", "status", "overrides", "error", "run_id", "timeline", "repeat_rates", "val_curve")
CONFIG_PREFIX = "config."
# which code and packages a run ran (bench.tracking.environment.code_provenance), as frame columns
# "env.<name>": compare says when two runs differ in them
ENV_PREFIX = "env."
PROVENANCE = ("bench_version", "git_commit", "git_dirty", "packages_sha256")

# Read back from MLflow, a run's names live in its params (metrics are numbers only): these
# config keys give the columns a job dir's results carry under the short name.
NAMED_IN_CONFIG = {"model.arch": "model", "precision.name": "precision", "distributed.scaling": "scaling",
                   "distributed.name": "distributed", "data.name": "data"}


@dataclass
class RunRecord:
    """One job of a sweep, as read from wherever it was recorded."""

    job: str
    status: str
    overrides: str
    config: Dict[str, str]  # flattened config, values as strings
    metrics: Dict[str, Any]
    timeline: List[float] = field(default_factory=list)
    error: str = ""
    run_id: Optional[str] = None  # its MLflow run, when known
    val_curve: List[Tuple[float, float]] = field(default_factory=list)  # (wall_seconds, val_top1) per evaluation
    repeat_rates: List[float] = field(default_factory=list)  # images/s per measured window (benchmark.repeats)
    provenance: Dict[str, Any] = field(default_factory=dict)  # PROVENANCE of its environment, where recorded


def absent(value: Any) -> bool:
    """No figure behind this cell: None, NaN (pandas' missing) or an empty string."""
    return value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value)) or value == ""


def shown(value: Any, default: Any = "") -> Any:
    """A cell's value for a label: `default` when the run has no figure there."""
    return default if absent(value) else value


def frame_from_records(records: Sequence[RunRecord]) -> pd.DataFrame:
    """The sweep frame (see the module docstring) of these runs, in their order."""
    rows = []
    for record in records:
        row: Dict[str, Any] = dict(record.metrics)
        row.update({CONFIG_PREFIX + key: value for key, value in record.config.items()})
        row.update({ENV_PREFIX + key: value for key, value in record.provenance.items()})
        # the run fields last: they win over a figure of the same name (none is named so today)
        row.update(job=record.job, status=record.status, overrides=record.overrides, error=record.error,
                   run_id=record.run_id, timeline=list(record.timeline), repeat_rates=list(record.repeat_rates),
                   val_curve=list(record.val_curve))
        rows.append(row)
    frame = pd.DataFrame(rows, dtype=object)
    return frame.reindex(columns=_ordered(frame.columns))


def _ordered(columns: Sequence[str]) -> List[str]:
    """Run fields first, then the figures, then the config: a frame reads left to right."""
    rest = [c for c in columns if c not in RUN_FIELDS]
    return [*RUN_FIELDS, *[c for c in rest if not c.startswith((CONFIG_PREFIX, ENV_PREFIX))],
            *[c for c in rest if c.startswith(CONFIG_PREFIX)], *[c for c in rest if c.startswith(ENV_PREFIX)]]


def metric_columns(frame: pd.DataFrame) -> List[str]:
    """The figures (not run fields, not config) that at least one run has."""
    return [c for c in frame.columns if c not in RUN_FIELDS and not c.startswith((CONFIG_PREFIX, ENV_PREFIX))
            and not all(absent(v) for v in frame[c])]


def config_of(row: Mapping[str, Any]) -> Dict[str, str]:
    """The flattened config of one frame row, without the keys this run does not have."""
    return {k[len(CONFIG_PREFIX):]: v for k, v in row.items() if k.startswith(CONFIG_PREFIX) and not absent(v)}


# ---- a multirun directory ---------------------------------------------------------------------


def flatten_config(tree: Mapping[str, Any]) -> Dict[str, str]:
    """{"a": {"b": 1}} -> {"a.b": "1"} (bench.secrets.flatten, values as strings, as MLflow params are)."""
    return {name: str(value) for name, value in flatten(tree).items()}


def read_job_dir(job_dir: Path) -> RunRecord:
    """One Hydra job dir (or a run's directory): FINISHED with its results when it wrote
    run_summary.json, else FAILED with the reason it gave (error.txt, or the last [ERROR] line of bench.log)."""
    overrides_file = job_dir / ".hydra" / "overrides.yaml"
    overrides = " ".join(yaml.safe_load(overrides_file.read_text()) or []) if overrides_file.is_file() else ""
    summary_path = job_dir / "run_summary.json"
    if summary_path.is_file():
        summary = json.loads(summary_path.read_text())
        config = summary["config"]
        reports = report_class(config.get("mode"))
        return RunRecord(job_dir.name, "FINISHED", overrides, flatten_config(config), dict(summary["results"]),
                         reports.timeline(job_dir), run_id=summary.get("mlflow_run_id"),
                         val_curve=read_val_curve(job_dir), repeat_rates=reports.repeats(job_dir),
                         provenance={k: v for k, v in summary.get("environment", {}).items() if k in PROVENANCE})
    composed = yaml.safe_load((job_dir / ".hydra" / "config.yaml").read_text()) or {}
    return RunRecord(job_dir.name, "FAILED", overrides, flatten_config(composed), {}, error=failure_reason(job_dir))


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


def failure_reason(job_dir: Path) -> str:
    """The last line of error.txt (the exception), else the last [ERROR] line the job logged."""
    error_txt = job_dir / "error.txt"
    if error_txt.is_file():
        lines = [line for line in error_txt.read_text().splitlines() if line.strip()]
        return lines[-1] if lines else "failed"
    log_file = job_dir / "bench.log"
    if log_file.is_file():
        errors = [line for line in log_file.read_text().splitlines() if "][ERROR]" in line]
        if errors:
            return errors[-1].split("] ", 3)[-1]
    return "failed before writing results"


def job_dirs(sweep_dir: Path) -> List[Path]:
    """The job dirs of a multirun (those holding .hydra/), in job order (2 before 10)."""
    if not sweep_dir.is_dir():
        raise ReportError(f"--sweep {sweep_dir} is not a directory nor an MLflow run id: pass a multirun "
                          f"directory (multirun/<date>/<time>) or the id of a sweep's parent run")
    found = sorted((p.parent for p in sweep_dir.glob("*/.hydra")), key=lambda p: (len(p.name), p.name))
    if not found:
        raise ReportError(f"--sweep {sweep_dir} holds no job directories (no */.hydra): pass a multirun directory")
    return found


def read_sweep_dir(sweep_dir: Path) -> pd.DataFrame:
    """The frame of a multirun dir: one row per job, successful or not."""
    return frame_from_records([read_job_dir(job_dir) for job_dir in job_dirs(sweep_dir)])


# ---- an MLflow parent run ---------------------------------------------------------------------


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


def read_mlflow_sweep(parent_run_id: str, tracking_uri: str, single: bool = False,
                      argument: str = "--sweep") -> pd.DataFrame:
    """The frame of a sweep's child runs (oldest first): metrics.* become the figures,
    params.* the config, the sweep.job / overrides / error tags the run fields. `single`: a run
    without children is a frame of its own one row (bench.tools.compare takes either)."""
    import mlflow

    client = mlflow.MlflowClient(tracking_uri=tracking_uri)
    try:
        parent = client.get_run(parent_run_id)
    except Exception as exc:  # mlflow raises its own exception types per store
        raise ReportError(f"{argument} {parent_run_id} is neither a directory nor a run in the MLflow store at "
                          f"{tracking_uri} ({type(exc).__name__})") from None
    with _tracking_uri(tracking_uri):
        runs = mlflow.search_runs(experiment_ids=[parent.info.experiment_id],
                                  filter_string=f"tags.mlflow.parentRunId = '{parent_run_id}'",
                                  order_by=["attributes.start_time ASC"], max_results=10000, output_format="pandas")
        if runs.empty and single:
            runs = mlflow.search_runs(experiment_ids=[parent.info.experiment_id], output_format="pandas",
                                      filter_string=f"attributes.run_id = '{parent_run_id}'")
    if runs.empty:
        raise ReportError(f"MLflow run {parent_run_id} has no child runs: pass the parent run of a sweep")
    modes = runs["params.mode"] if "params.mode" in runs else [None] * len(runs)  # None: recorded before modes

    def series(run_id: str, name: Optional[str]) -> List[float]:
        return [m.value for m in sorted(client.get_metric_history(run_id, name), key=lambda m: m.step)] if name else []

    timelines = [series(run_id, report_class(mode).TIMELINE_METRIC)
                 for run_id, mode in zip(runs["run_id"], modes, strict=True)]
    repeats = [series(run_id, report_class(mode).REPEATS_METRIC)
               for run_id, mode in zip(runs["run_id"], modes, strict=True)]
    curves = [_mlflow_val_curve(client, run_id) for run_id in runs["run_id"]]
    return _frame_from_search(runs.astype(object).reset_index(drop=True), timelines, curves, repeats)


def _mlflow_val_curve(client: Any, run_id: str) -> List[Tuple[float, float]]:
    """(wall seconds, val top-1) per evaluated epoch, from the per-epoch series the training
    report logs (step = epoch; step 0 is the final figure)."""
    def by_epoch(name: str) -> dict:
        return {m.step: m.value for m in client.get_metric_history(run_id, name) if m.step > 0}

    walls, top1 = by_epoch("epoch_wall_seconds"), by_epoch("val_top1")
    return [(walls[e], top1[e]) for e in sorted(walls) if e in top1]


def _frame_from_search(runs: pd.DataFrame, timelines: List[List[float]],
                       curves: List[List[Tuple[float, float]]], repeats: List[List[float]]) -> pd.DataFrame:
    def column(name: str) -> pd.Series:
        return runs[name] if name in runs else pd.Series([None] * len(runs), index=runs.index, dtype=object)

    def text(name: str) -> pd.Series:
        return column(name).map(lambda v: "" if absent(v) else v)

    metrics = runs.filter(regex=r"^metrics\.").rename(columns=lambda c: c[len("metrics."):])
    config = runs.filter(regex=r"^params\.").rename(columns=lambda c: CONFIG_PREFIX + c[len("params."):])
    for key, name in NAMED_IN_CONFIG.items():
        if name not in metrics:
            metrics[name] = text("params." + key)
    if "tags.bench.fit_reasons" in runs:  # a string: a tag, not a metric (bench.runtime.fit_watch)
        metrics[REASONS] = text("tags.bench.fit_reasons")
    job = column("tags.sweep.job").where(~column("tags.sweep.job").map(absent), column("tags.mlflow.runName"))
    fields = pd.DataFrame({"job": job, "status": runs["status"], "overrides": text("tags.overrides"),
                           "error": text("tags.error"), "run_id": runs["run_id"], "timeline": timelines,
                           "repeat_rates": repeats, "val_curve": curves},
                          index=runs.index, dtype=object)
    provenance = pd.DataFrame({ENV_PREFIX + k: text("tags.env." + k) for k in PROVENANCE}, index=runs.index,
                              dtype=object)
    frame = pd.concat([fields, metrics, config, provenance], axis=1).astype(object)
    return frame.reindex(columns=_ordered(frame.columns))
