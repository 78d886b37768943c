"""A sweep as a DataFrame: one row per job, read from a Hydra multirun dir or from MLflow.

The frame's columns:
- the run fields `job`, `status` (FINISHED / FAILED / ...), `overrides`, `error`, `run_id`
  and `timeline` (the per-step times in ms as a list: step_time_ms of a training run, the
  per-batch latency of an inference run, the per-request read latency of a storage run),
  `repeat_rates` (the figure its scenario's compare samples, per measured window: images/s of each
  window of a training run with benchmark.repeats > 1, samples/s of each storage.runs run; else empty);
- one column per reported figure, named as in the run's results (`images_per_second`, ...), and
  the columns a scenario reads back of its own (`BaseReport.read_back`: a training run's
  `val_curve`, its (wall_seconds, val_top1) per evaluated epoch);
- one `config.<flat.key>` column per config value, as a string (as MLflow params are).

Every column holds Python objects (dtype object): results mix numbers, strings and bools, and
a run keeps the types it reported (a process count read from a job dir prints as 2, one read
back from MLflow as 2.0, as before). A figure a run does not have is missing (None/NaN) and is
shown as an empty cell, never as 0.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Type

import pandas as pd
import yaml
from hydra.core.override_parser.overrides_parser import OverridesParser

from bench.analysis.cells import absent
from bench.config.scenario import without_target
from bench.errors import ReportError
from bench.machine.fitness import REASONS
from bench.report_view import DISPLAY
from bench.results import running
from bench.scenario_base import BaseReport
from bench.scenarios import report_class, report_class_of_modes
from bench.secrets import flatten

RUN_FIELDS = ("job", "status", "overrides", "error", "run_id", "timeline", "repeat_rates")
CONFIG_PREFIX = "config."
# which code and packages a run ran (bench.tracking.environment.code_provenance), as frame columns
# "env.<name>": compare says when two runs differ in them
ENV_PREFIX = "env."
PROVENANCE = ("bench_version", "git_commit", "git_dirty", "packages_sha256")
NOISE_KEYS = ("tracking.", "hydra.", "seed", "storage.root", "benchmark.progress")  # never a configuration


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
    repeat_rates: List[float] = field(default_factory=list)  # the sampled figure per measured window
    provenance: Dict[str, Any] = field(default_factory=dict)  # PROVENANCE of its environment, where recorded
    own: Dict[str, Any] = field(default_factory=dict)  # the columns its report class reads back (read_back)


def frame_from_records(records: Sequence[RunRecord]) -> pd.DataFrame:
    """The sweep frame (see the module docstring) of these runs, in their order."""
    rows = []
    for record in records:
        row: Dict[str, Any] = dict(record.metrics)
        row.update(record.own)
        row.update({CONFIG_PREFIX + key: value for key, value in record.config.items()})
        row.update({ENV_PREFIX + key: value for key, value in record.provenance.items()})
        # the run fields last: they win over a figure of the same name (none is named so today)
        row.update({name: getattr(record, name) for name in RUN_FIELDS})
        rows.append(row)
    frame = pd.DataFrame(rows, dtype=object)
    # run fields first, then the figures, then the config, then the provenance: a frame reads left to right
    rest = [c for c in frame.columns if c not in RUN_FIELDS]
    figures, config = [c for c in rest if _is_figure(c)], [c for c in rest if c.startswith(CONFIG_PREFIX)]
    return frame.reindex(columns=[*RUN_FIELDS, *figures, *config, *[c for c in rest if c.startswith(ENV_PREFIX)]])


def _is_figure(column: str) -> bool:
    """A figure's column: not a run field, the config or the provenance."""
    return column not in RUN_FIELDS and not column.startswith((CONFIG_PREFIX, ENV_PREFIX))


def metric_columns(frame: pd.DataFrame) -> List[str]:
    """The figures (not run fields, not config) that at least one run has."""
    return [c for c in frame.columns if _is_figure(c) and not all(absent(v) for v in frame[c])]


def sweep_report_class(frame: pd.DataFrame) -> Type[BaseReport]:
    """The report class of the sweep's runs (bench.scenarios decides; recorded without a mode: training)."""
    modes = frame.get(CONFIG_PREFIX + "mode")
    return report_class_of_modes(list(modes) if modes is not None and len(frame) else [])


def swept_keys(*frames: pd.DataFrame) -> List[str]:
    """Config columns whose value differs between the rows of one of the frames (what was swept)."""
    keys = set()
    for frame in frames:
        for column in (c for c in frame.columns if c.startswith(CONFIG_PREFIX)):
            if not column[len(CONFIG_PREFIX) :].startswith(NOISE_KEYS) and frame[column].map(str).nunique() > 1:
                keys.add(column)
    return sorted(keys)


def config_of(row: Mapping[str, Any]) -> Dict[str, str]:
    """The flattened config of one frame row, without the keys this run does not have."""
    return {k[len(CONFIG_PREFIX) :]: v for k, v in row.items() if k.startswith(CONFIG_PREFIX) and not absent(v)}


# ---- a multirun directory ---------------------------------------------------------------------


def flatten_config(tree: Mapping[str, Any]) -> Dict[str, str]:
    """{"a": {"b": 1}} -> {"a.b": "1"} (bench.secrets.flatten, values as strings, as MLflow params are)."""
    return {name: str(value) for name, value in flatten(tree).items()}


def read_job_dir(job_dir: Path) -> RunRecord:
    """One Hydra job dir (or a run's directory): FINISHED with its results when it wrote
    run_summary.json (its `error` saying where that differs from the job's overrides), else RUNNING
    while its run runs, else FAILED with the reason it gave (error.txt, or the last [ERROR] line of bench.log)."""
    overrides_file = job_dir / ".hydra" / "overrides.yaml"
    overrides = " ".join(yaml.safe_load(overrides_file.read_text()) or []) if overrides_file.is_file() else ""
    summary_path = job_dir / "run_summary.json"
    if summary_path.is_file():
        summary, config = read_summary(summary_path)
        reports = report_class(config.get("mode"))
        flat = flatten_config(config)
        return RunRecord(
            job_dir.name,
            "FINISHED",
            overrides,
            flat,
            dict(summary["results"]),
            reports.timeline(job_dir),
            error=not_as_launched(overrides, flat),
            run_id=summary.get("mlflow_run_id"),
            repeat_rates=reports.repeats(job_dir) if reports.view.sample.from_repeats else [],
            provenance={k: v for k, v in summary.get("environment", {}).items() if k in PROVENANCE},
            own=reports.read_back(job_dir),
        )
    composed = without_target(yaml.safe_load((job_dir / ".hydra" / "config.yaml").read_text()) or {})
    status, error = (RUNNING, "") if running(job_dir) else ("FAILED", failure_reason(job_dir))
    return RunRecord(job_dir.name, status, overrides, flatten_config(composed), {}, error=error)


def not_as_launched(overrides: str, config: Mapping[str, str]) -> str:
    """Where a job's run_summary.json says other than the overrides it was launched with (a summary
    copied from another run): "run_summary.json does not match the job's overrides: data.batch_size 4
    in its overrides, 32 in the file"; "" when it agrees. A group's choice (precision=bf16) is its `name`."""
    try:
        parsed = OverridesParser.create().parse_overrides(overrides.split())
    except Exception:  # overrides Hydra cannot read back: nothing to hold the summary to
        return ""
    differ = []
    for o in parsed:
        key, value = o.key_or_group, o.value()
        key = key if key in config else f"{key}.name"
        if o.is_delete() or key not in config or isinstance(value, dict) or "${" in str(value):
            continue
        if str(value) != config[key]:
            differ.append(f"{key} {o.get_value_element_as_str()} in its overrides, {config[key]} in the file")
    return f"run_summary.json does not match the job's overrides: {'; '.join(differ)}" if differ else ""


def read_summary(path: Path) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    """(run_summary.json, its config); ReportError naming the file when it is not one (cut short, damaged)."""
    try:
        summary = json.loads(path.read_text(errors="replace"))  # bytes that are not text: a JSON error
        why = "it is not a JSON object holding config and results"
    except json.JSONDecodeError as exc:
        summary, why = None, f"it is not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno}: cut short?)"
    if isinstance(summary, dict) and all(isinstance(summary.get(k), dict) for k in ("config", "results")):
        return summary, summary["config"]
    raise ReportError(f"{path} cannot be read: {why}; accepted a run_summary.json as bench writes it (run it again)")


def failure_reason(job_dir: Path) -> str:
    """The last line of error.txt (the exception), else the last [ERROR] line the job logged."""
    if (error_txt := job_dir / "error.txt").is_file():
        lines = [line for line in error_txt.read_text().splitlines() if line.strip()]
        return lines[-1] if lines else "failed"
    log_file = job_dir / "bench.log"
    if log_file.is_file() and (errors := [line for line in log_file.read_text().splitlines() if "][ERROR]" in line]):
        return errors[-1].split("] ", 3)[-1]
    return "failed before writing results"


def job_dirs(sweep_dir: Path) -> List[Path]:
    """The job dirs of a multirun (those holding .hydra/), in job order (2 before 10)."""
    if not sweep_dir.is_dir():
        raise ReportError(
            f"--sweep {sweep_dir} is not a directory nor an MLflow run id: pass a multirun "
            f"directory (multirun/<date>/<time>) or the id of a sweep's parent run"
        )
    found = sorted((p.parent for p in sweep_dir.glob("*/.hydra")), key=lambda p: (len(p.name), p.name))
    if not found:
        raise ReportError(f"--sweep {sweep_dir} holds no job directories (no */.hydra): pass a multirun directory")
    return found


MISSING = "MISSING"  # the status of a job multirun.yaml lists whose directory is gone
RUNNING = "RUNNING"  # a job dir whose run still runs (bench.results.running)
PENDING = "PENDING"  # a job multirun.yaml lists, after a running one, that has not started yet


def read_sweep_dir(sweep_dir: Path) -> pd.DataFrame:
    """The frame of a multirun dir: one row per job, successful or not (RUNNING while it runs), one
    (status MISSING) per job the sweep launched whose directory is gone (deleted, or on a node whose disk
    was lost), and, while a job runs, one (PENDING) per job after it."""
    found = {_job_number(job_dir): read_job_dir(job_dir) for job_dir in job_dirs(sweep_dir)}
    last = max((n for n in found if isinstance(n, int)), default=-1)
    for number, overrides in enumerate(launched_jobs(sweep_dir) or []):
        if number > last and any(r.status == RUNNING for r in found.values()):  # the sweep runs: not its turn yet
            found[number] = RunRecord(str(number), PENDING, overrides, {}, {}, error="not started yet")
        elif number not in found:  # after the last job that ran, it may not have run at all (a stopped sweep)
            why = "its directory is gone" if number < last else "it has no directory (not run, or removed)"
            found[number] = RunRecord(str(number), MISSING, overrides, {}, {}, error=why)
    order = sorted(found, key=lambda n: (isinstance(n, str), len(str(n)), str(n)))  # 2 before 10
    return frame_from_records([found[n] for n in order])


def _job_number(job_dir: Path) -> Any:
    """hydra.job.num of a job dir (what multirun.yaml's order numbers), else its name."""
    try:
        return int(yaml.safe_load((job_dir / ".hydra" / "hydra.yaml").read_text())["hydra"]["job"]["num"])
    except (OSError, ValueError, TypeError, KeyError, yaml.YAMLError):
        return job_dir.name


def launched_jobs(sweep_dir: Path) -> Optional[List[str]]:
    """The overrides of each job the sweep launched, in job order, from its multirun.yaml (what Hydra's
    basic sweeper runs: the product of the swept values, in the order given); None when it cannot tell
    (no multirun.yaml, or another sweeper)."""
    try:
        hydra = yaml.safe_load((sweep_dir / "multirun.yaml").read_text())["hydra"]
        if not str(hydra["sweeper"]["_target_"]).endswith(".BasicSweeper"):
            return None
        swept = hydra["sweeper"].get("params") or {}
        given = [*(f"{k}={v}" for k, v in swept.items()), *hydra["overrides"]["task"]]
        parsed = OverridesParser.create().parse_overrides(given)
    except Exception:  # unreadable, or written by another Hydra: the report reads the job dirs alone
        return None
    choices: Dict[str, List[str]] = {}  # by key, as BasicSweeper.split_arguments: a later value replaces one
    for o in parsed:
        key = o.get_key_element()
        values = list(o.sweep_string_iterator()) if o.is_sweep_override() else [o.get_value_element_as_str()]
        choices[key] = [f"{key}={value}" for value in values]
    return [" ".join(job) for job in itertools.product(*choices.values())]


# ---- A sweep read back from MLflow: a parent run's children as the frame bench.analysis.runs
# describes (their metrics the figures, their params the config, tags the run fields), one
# RunRecord each, as a multirun directory's jobs are; a single run too.
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
    if "bench.fit_reasons" in tags:  # a string: a tag, not a metric (bench.runtime.reporting.fit_tags)
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
