"""Sweeps: one MLflow parent run per Hydra multirun, every job of it a child run.

Hydra calls the callback around the sweep (configured under hydra.callbacks in
conf/config.yaml). Jobs read the parent run id from here (same process: Hydra's basic
launcher runs the job functions one after another, and each job starts its training in
processes of its own). A failed job is a FAILED child and the sweep goes on; the multirun
exits with the number of failed jobs. At the end the sweep report (bench.analysis) is
written into the sweep dir and logged to the parent run.
"""

from __future__ import annotations

import atexit
import logging
import os
import time
from pathlib import Path
from typing import Any, Dict, Optional

from hydra.experimental.callback import Callback

log = logging.getLogger("bench")

_state: Dict[str, Any] = {"tracker": None, "jobs": 0, "failed": 0, "tracking_down": None}


def current_job(hydra_cfg: Any) -> Dict[str, Any]:
    """What a sweep job needs to log as a child of the sweep (or to skip tracking when the
    server did not answer the sweep's one probe)."""
    tracker = _state["tracker"]
    return {"parent_run_id": tracker.run_id if tracker is not None and tracker.active else None,
            "job": hydra_cfg.job.num, "dir": hydra_cfg.sweep.dir, "tracking_down": _state["tracking_down"]}


def failed_jobs() -> int:
    return _state["failed"]


def _sweep_params(overrides: Any) -> Dict[str, str]:
    """['data.batch_size=16,32', 'precision=fp32,bf16'] -> {'data.batch_size': '16,32', ...}"""
    params = {}
    for override in overrides:
        key, _, value = str(override).partition("=")
        params[key.lstrip("+~")] = value
    return params


class MlflowSweepCallback(Callback):
    def on_multirun_start(self, config: Any, **kwargs: Any) -> None:
        _state.update(tracker=None, jobs=0, failed=0, tracking_down=None)
        if not config.tracking.enabled:
            return
        from bench.tracking.probe import bound_mlflow_retries, probe, unreachable_line
        from bench.tracking.tracker import Tracker, process_tags, resolve_tracking_uri  # mlflow: when a sweep starts

        sweep_dir = Path(config.hydra.sweep.dir).resolve()
        overrides = list(config.hydra.overrides.task)
        uri = resolve_tracking_uri(config.tracking.uri, Path(os.getcwd()))
        bound_mlflow_retries()
        problem = probe(uri, config.tracking.probe_timeout_s)  # once for the whole sweep
        if problem:
            log.warning(unreachable_line(uri, problem, config.tracking.probe_timeout_s))
            _state["tracking_down"] = f"the MLflow server did not answer at the sweep's start ({problem})"
            return
        name = config.tracking.run_name or f"sweep-{time.strftime('%Y%m%d-%H%M%S')}"
        tracker = Tracker.start(uri, config.tracking.experiment, name,
                                {"sweep": "parent", "sweep.dir": str(sweep_dir), "overrides": " ".join(overrides),
                                 **process_tags()})
        tracker.log_params(_sweep_params(overrides))
        _state["tracker"] = tracker
        atexit.register(_end_interrupted_sweep, tracker)

    def on_job_end(self, config: Any, job_return: Any, **kwargs: Any) -> None:
        from hydra.core.utils import JobStatus

        _state["jobs"] += 1
        failed = job_return.status != JobStatus.COMPLETED or bool(job_return._return_value)
        if failed:
            _state["failed"] += 1
            log.warning("sweep job %s failed; going on with the next one", config.hydra.job.num)

    def on_multirun_end(self, config: Any, **kwargs: Any) -> None:
        tracker: Optional[Any] = _state["tracker"]
        sweep_dir = Path(config.hydra.sweep.dir)
        files = []
        try:
            from bench.analysis import build_report, log_scaling_to_runs

            files, frame = build_report(sweep_dir, sweep_dir / "report")
            if tracker is not None and tracker.active:
                log_scaling_to_runs(frame, tracker.client)
        except Exception as exc:  # noqa: BLE001 - a report problem must not hide the sweep's results
            log.warning("the sweep report could not be built (%s: %s); run python -m bench.report --sweep %s",
                        type(exc).__name__, exc, sweep_dir)
        jobs, failed = _state["jobs"], _state["failed"]
        log.info("sweep done: %d jobs, %d failed; report in %s", jobs, failed, sweep_dir / "report")
        if tracker is not None:
            tracker.set_tags({"sweep.jobs": jobs, "sweep.failed_jobs": failed})
            tracker.log_artifacts(files, artifact_path="report")
            tracker.finish("FINISHED")
            _state["tracker"] = None


def _end_interrupted_sweep(tracker: Any) -> None:
    """A sweep stopped by Ctrl-C/SIGTERM never reaches on_multirun_end: end its parent KILLED."""
    if _state["tracker"] is tracker and tracker.active:
        tracker.finish("KILLED", error="the sweep was interrupted")
