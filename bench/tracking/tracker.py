"""MLflow tracking for one run, through MlflowClient (no global fluent state).

Where: bench.tracking.store (MLFLOW_TRACKING_URI, else tracking.uri, else <launch dir>/mlflow.db).
What: params = the flattened resolved config (secrets dropped), metrics = per-epoch and
per-step figures plus the final summary, tags = the environment, artifacts = the output
files and the composed config. A run always ends: FINISHED, FAILED (error as a tag) or
KILLED. If the tracking server cannot be reached the run goes on without it: results stay
in the output directory and a warning names the URI. Every name, param and tag value goes
through bench.secrets.redact; MLflow's own "View run ... at <URL>" print is switched off.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

from bench.errors import Interrupted
from bench.machine.children import STOPS_HELD, process_identity
from bench.report_view import DISPLAY, Sample, rounded
from bench.secrets import flatten, redact
from bench.tracking import store, ui_view

log = logging.getLogger(__name__)

MAX_PARAM_CHARS = 6000
BATCH_ARGUMENT = {"Param": "params", "Metric": "metrics", "RunTag": "tags"}  # log_batch's, by mlflow.entities class


@dataclass(frozen=True)
class SweepJob:
    """What a sweep job needs to log as a child of its sweep (bench.tracking.sweep.current_job, the
    doctor's training rungs): torch-free and hydra-free, passed from the app to the tracker."""

    job: Union[int, str]  # Hydra's job number (the doctor's: its rung's job name, "1-compute")
    dir: str  # the sweep's directory (the doctor's: its output directory)
    parent_run_id: Optional[str] = None  # the sweep's MLflow parent run (None: not tracked)
    launch_dir: Optional[str] = None  # the directory the sweep started in (a job on another node)
    tracking_down: Optional[str] = None  # why the sweep's one probe found no tracking server
    label: str = ""  # the doctor's: what the run is, named in its run name instead of "-job<N>"
    own_process: bool = False  # submitit started this process for this job alone (hydra/launcher=slurm|slurm_local)


class Tracker:
    """One MLflow run. Methods never raise: a tracking failure is a warning, not a lost result."""

    def __init__(self, client: Any = None, run_id: Optional[str] = None, uri: str = "", lost: str = ""):
        quiet_mlflow()
        self.client, self.run_id, self.uri = client, run_id, uri
        self.experiment_id: Optional[str] = None
        self.out_dir: Optional[Path] = None  # where the results stay when the server goes away
        self.name_suffix = ""  # "-job<N>" for a sweep job (a doctor's run: its label): kept when the run is renamed
        self.name = ""  # the run's name, tracked or not (run_summary.json keeps it: an upload later uses it)
        self._system_metrics: Any = None  # mlflow's SystemMetricsMonitor (tracking.system_metrics)
        self.lost = lost  # why this run is not (or no longer) tracked: tracking.required makes it a failure

    @property
    def active(self) -> bool:
        return self.client is not None and self.run_id is not None

    @classmethod
    def start(
        cls,
        uri: str,
        experiment: str,
        run_name: Optional[str],
        tags: Mapping[str, Any],
        parent_run_id: Optional[str] = None,
        warn: bool = True,
    ) -> "Tracker":
        quiet_mlflow()
        try:
            import mlflow  # noqa: F401 - imported first: mlflow resets its logger to INFO on import

            logging.getLogger("mlflow").setLevel(logging.WARNING)
            # MLflow's sqlite store logs every database error with two SQLAlchemy tracebacks before raising
            # it: bench says it once, in one line (store.store_error)
            logging.getLogger("mlflow.store.db.utils").setLevel(logging.CRITICAL)
            client, experiment_id = store.open_experiment(uri, experiment)
            run_tags = {k: redact(str(v))[:5000] for k, v in tags.items()}
            if parent_run_id:
                run_tags.update({"mlflow.parentRunId": parent_run_id, ui_view.FAMILY_TAG: parent_run_id})
            tracker = None
            try:
                with STOPS_HELD:  # a Ctrl-C or SIGTERM while MLflow makes the run lands once it exists: it ends it
                    run = client.create_run(
                        experiment_id, run_name=redact(run_name) if run_name else run_name, tags=run_tags
                    )
                    tracker = cls(client, run.info.run_id, uri)
                    tracker.experiment_id = experiment_id
                    log.info("MLflow run %s in experiment %r at %s", run.info.run_id, experiment, redact(uri))
            except (KeyboardInterrupt, Interrupted) as stop:
                if tracker is not None:  # a second stop waits for the marking (as bench.app._fail's does)
                    with contextlib.suppress(KeyboardInterrupt, Interrupted), STOPS_HELD:
                        tracker.finish("KILLED", error=str(stop) or type(stop).__name__)
                raise
        except Exception as exc:  # a run that cannot be tracked still runs: said on stderr, in one line
            lost = f"MLflow tracking at {redact(uri)} failed ({store.store_error(exc)})"
            if warn:  # else the caller says it (tracking.required: the run's one [ERROR] line)
                log.warning("%s; this run is not tracked, its results are kept in the output directory only", lost)
            return cls(uri=uri, lost=lost)
        return tracker

    def ui_link(
        self, children: bool = False, params: Sequence[str] = (), sample: Optional[Sample] = None
    ) -> Optional[str]:
        """The MLflow UI command and link for this run's experiment (a sweep parent's: the parent
        and its children), opening a saved view of the headline figure (`sample`'s, else images/s),
        the swept `params` and the failure reason (bench.tracking.ui_view)."""
        if not self.active or self.experiment_id is None:
            return None
        parent = self.run_id if children else None
        return ui_view.runs_link(self.client, self.uri, self.experiment_id, parent, params, sample)

    def compare_link(self, sample: Optional[Sample] = None) -> Optional[str]:
        """MLflow's compare-runs page of this parent run's children (None without any)."""
        if not self.active or self.experiment_id is None:
            return None
        return ui_view.jobs_compare_link(self.client, self.uri, self.experiment_id, str(self.run_id), sample)

    def _call(self, what: str, method: str, *args: Any, **kwargs: Any) -> None:
        if not self.active:
            return
        try:
            getattr(self.client, method)(self.run_id, *args, **kwargs)
        except Exception as exc:
            # One warning, then stop: a server that went away would cost each later call its
            # full retry back-off, and the results are safe in the output directory anyway.
            later = ""
            if self.out_dir:
                later = f"; upload the results later with python -m bench.tools.upload {self.out_dir}"
            self.lost = f"MLflow {what} failed at {redact(self.uri)} ({store.store_error(exc)})"
            log.warning("%s; no further tracking for this run%s", self.lost, later)
            self.client = None

    def _log(self, what: str, entity: str, rows: Iterable[Tuple[Any, ...]], size: int) -> None:
        """log_batch of mlflow.entities.<entity>(*row) for each row, `size` at a time (MLflow's log_batch
        takes at most 1000 metrics, 100 params)."""
        if not self.active:  # tracking off or given up: not even mlflow's import (1-2 s of CPU)
            return
        import mlflow.entities

        items = [getattr(mlflow.entities, entity)(*row) for row in rows]
        for i in range(0, len(items), size):
            self._call(what, "log_batch", **{BATCH_ARGUMENT[entity]: items[i : i + size]})

    def log_params(self, params: Mapping[str, Any]) -> None:
        rows = ((k, redact(str(v))[:MAX_PARAM_CHARS]) for k, v in flatten(params).items())
        self._log("log params", "Param", rows, 100)

    def log_metrics(self, metrics: Mapping[str, Any], step: int = 0) -> None:
        now = int(time.time() * 1000)
        # numbers only (bools become 0/1); strings such as the model name are params/tags
        numbers = {k: float(v) for k, v in metrics.items() if isinstance(v, (int, float))}
        # and a rounded copy of the headline for the UI's table (it cuts a raw float off)
        numbers.update({DISPLAY[k]: rounded(numbers[k]) for k in DISPLAY if k in numbers})
        self._log("log metrics", "Metric", ((k, v, now, step) for k, v in numbers.items()), 1000)

    def log_series(self, name: str, values: Sequence[float], first_step: int = 1) -> None:
        now = int(time.time() * 1000)
        self._log("log metrics", "Metric", ((name, float(v), now, first_step + i) for i, v in enumerate(values)), 1000)

    def set_tags(self, tags: Mapping[str, Any]) -> None:
        rows = ((k, redact(str(v))[:5000]) for k, v in tags.items())
        self._log("set tags", "RunTag", rows, len(tags) or 1)  # all in one batch

    def log_artifacts(self, paths: Iterable[Path], artifact_path: Optional[str] = None) -> None:
        for path in paths:
            if path.is_dir():
                self._call("log artifacts", "log_artifacts", str(path), path.name)
            elif path.is_file():
                self._call("log artifact", "log_artifact", str(path), artifact_path)

    def rename(self, name: str) -> None:
        """A new run name, decided by the run itself (the batch benchmark.find_max_batch found)."""
        self.name = name + self.name_suffix
        self.set_tags({"mlflow.runName": self.name})

    def start_system_metrics(self) -> None:
        """MLflow's own system metrics (system/cpu_utilization_percentage, system/gpu_0_*, ...) for
        this run, sampled every 10 s in a thread of this process (MLFLOW_SYSTEM_METRICS_SAMPLING_INTERVAL
        sets another interval) until finish()."""
        if not self.active:
            return
        try:
            from mlflow.system_metrics.system_metrics_monitor import SystemMetricsMonitor

            monitor = SystemMetricsMonitor(self.run_id, tracking_uri=self.uri)
            monitor.start()
            self._system_metrics = monitor
        except Exception as exc:  # a missing optional piece costs these metrics only
            log.warning("MLflow system metrics could not start (%s: %s)", type(exc).__name__, exc)

    def finish(self, status: str = "FINISHED", error: Optional[str] = None) -> None:
        if status == "KILLED" and self.active:  # a stop may have cut an MLflow write short
            store.free_interrupted_write()
        if self._system_metrics is not None:  # flushed before the run ends: its last samples count
            monitor, self._system_metrics = self._system_metrics, None
            try:
                monitor.finish()
            except Exception as exc:
                log.warning("MLflow system metrics did not stop cleanly (%s: %s)", type(exc).__name__, exc)
        if error:
            self.set_tags({"error": error})
        self._call("end run", "set_terminated", status)


def quiet_mlflow() -> None:
    """MLflow prints "View run ... at <server URL>" on stdout when a run ends against a server:
    stdout carries only the final line, and the URL may carry credentials."""
    os.environ["MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT"] = "true"


def process_tags() -> Dict[str, str]:
    """Which process runs this MLflow run (host, pid, its start time): a run left RUNNING by a
    process that is gone can be told from one still running (python -m bench.tools.stale)."""
    import psutil

    return {
        "bench.host": socket.gethostname(),
        "bench.pid": str(os.getpid()),
        "bench.pid_started": repr(psutil.Process().create_time()),
    }


def open_run(
    tracking: Any,
    launch_dir: Path,
    run_name: str,
    params: Mapping[str, Any],
    environment: Mapping[str, Any],
    overrides: Sequence[str],
    sweep_job: Optional[SweepJob] = None,
    out_dir: Optional[Path] = None,
) -> Tracker:
    """The MLflow run of one bench run (a child of the sweep's parent run in a multirun):
    tags = the environment and the overrides, params = the flattened config (secrets dropped).
    `tracking` is the tracking group (bench.config.run.TrackingConfig). A server that does not
    answer a short probe (made once per sweep) means no tracking, said in one line."""
    suffix = (f" ({sweep_job.label})" if sweep_job.label else f"-job{sweep_job.job}") if sweep_job else ""
    name = (tracking.run_name or run_name) + suffix

    def untracked(uri: str = "", lost: str = "") -> Tracker:
        off = Tracker(uri=uri, lost=lost)
        off.name, off.name_suffix = name, suffix
        return off

    if not tracking.enabled:
        return untracked()
    uri = store.resolve_tracking_uri(tracking.uri, launch_dir)
    if sweep_job and sweep_job.tracking_down:  # the sweep probed once, at its start
        log.info("no MLflow tracking for this job: %s", sweep_job.tracking_down)
        return untracked(uri, sweep_job.tracking_down)
    if problem := store.probe(uri, tracking.probe_timeout_s):
        lost = store.unreachable_line(uri, problem, tracking.probe_timeout_s, out_dir)
        if not tracking.required:  # else the run's [ERROR] line says it
            log.warning(lost)
        return untracked(uri, lost)
    tags = {f"env.{k}": v for k, v in flatten(environment).items()}
    tags["overrides"] = " ".join(overrides)
    tags.update(process_tags())
    if out_dir:
        tags["bench.out_dir"] = str(out_dir)  # where its results stay if the store fails mid-run
    if sweep_job:
        tags.update({"sweep.job": str(sweep_job.job), "sweep.dir": str(sweep_job.dir)})
    parent = sweep_job.parent_run_id if sweep_job else None
    tracker = Tracker(uri=uri)  # until MLflow has made the run
    try:
        tracker = Tracker.start(uri, tracking.experiment, name, tags, parent_run_id=parent, warn=not tracking.required)
        tracker.out_dir, tracker.name, tracker.name_suffix = out_dir, name, suffix
        if tracker.active:  # the store is writable (again): runs its errors left RUNNING here are closed
            close_stale(tracker.client, tracker.experiment_id, by="the next bench run")
        tracker.log_params(params)
        if getattr(tracking, "system_metrics", False):
            tracker.start_system_metrics()
    except BaseException as exc:  # Ctrl-C or SIGTERM while the run is being set up: it is not left RUNNING
        interrupted = isinstance(exc, (KeyboardInterrupt, Interrupted))
        tracker.finish("KILLED" if interrupted else "FAILED", error=str(exc) or type(exc).__name__)
        raise
    return tracker


# ---- Runs left RUNNING by a bench process that is gone: told apart by the host, pid and start time
# each run is tagged with (`python -m bench.tools.stale` lists and marks them; every run whose store
# answers closes those of its own experiment when it opens, close_stale).
def state_of(run: Any, host: str) -> str:
    """alive | gone | other host | untagged."""
    tags = run.data.tags
    if "bench.pid" not in tags:
        return "untagged"
    if tags.get("bench.host") != host:
        return "other host"
    identity = process_identity(int(tags["bench.pid"]))
    if identity is None or repr(identity[1]) != tags.get("bench.pid_started"):
        return "gone"
    return "alive"


def kill_reason(tags: Any, by: str) -> str:
    where = tags.get("bench.out_dir")
    kept = f"; its results stay in {where} (python -m bench.tools.upload {where} completes it)" if where else ""
    gone = f"the process that ran it (pid {tags['bench.pid']} on {tags['bench.host']}) is gone; marked KILLED by {by}"
    return gone + kept


def close_stale(client: Any, experiment_id: Optional[str], by: str) -> int:
    """End KILLED the runs of `experiment_id` that a process of this host that is gone left
    RUNNING (a store that failed mid-run, a SIGKILL): each with the reason as its `error` tag.
    Called by every run whose store answers; never raises (it is housekeeping). The count."""
    log = logging.getLogger("bench")
    try:
        host, closed = socket.gethostname(), 0
        running = client.search_runs([experiment_id], "attributes.status = 'RUNNING'", max_results=1000)
        for run in running:
            if state_of(run, host) == "gone":
                client.set_tag(run.info.run_id, "error", kill_reason(run.data.tags, by))
                client.set_terminated(run.info.run_id, "KILLED")
                closed += 1
    except Exception as exc:
        log.debug("stale runs not closed (%s: %s)", type(exc).__name__, exc)
        return 0
    if closed:
        log.info("closed %d MLflow run(s) left RUNNING by a process that is gone (marked KILLED)", closed)
    return closed


def find_stale(uri: str) -> Tuple[Any, List[Tuple[Any, str]]]:
    from mlflow import MlflowClient

    client, host = MlflowClient(tracking_uri=uri), socket.gethostname()
    experiments = [e.experiment_id for e in client.search_experiments()]
    running = client.search_runs(experiments, "attributes.status = 'RUNNING'", max_results=10000) if experiments else []
    return client, [(run, state_of(run, host)) for run in running]
