"""Sweeps: one MLflow parent run per Hydra multirun, every job of it a child run.

Hydra calls the callback around the sweep (hydra.callbacks in conf/config.yaml) in the process
that started the multirun, which owns the sweep: it opens the parent run, counts the jobs and
their failures, and writes the report (bench.analysis) when all jobs are done. A job runs in that
process (Hydra's basic launcher) or in another one (a Slurm node, a process of submitit's local
executor: bench.slurm), so what a job needs from the sweep (the parent run id, the
directory the sweep started in, whether the tracking server answered its one probe) travels in
the environment variable BENCH_SWEEP, set here and handed on by every launcher.

Jobs are counted where their returns arrive: on_job_end when the job ran in this process,
job_returned / job_lost when a launcher collected it from elsewhere. A failed job is a FAILED
child and the sweep goes on: a job that never returned (cancelled, out of time, its node lost)
gets a FAILED child here, and its job dir the reason. The multirun exits with the number of
failed jobs.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

from hydra.core.utils import JobReturn, JobStatus
from hydra.experimental.callback import Callback

from bench.errors import ConfigError, Interrupted, print_error, stopped_by
from bench.run_dirs import stamp_of
from bench.secrets import redact, scrub
from bench.tracking.store import checked_uri, probe, unreachable_line
from bench.tracking.tracker import SweepJob, Tracker, process_tags
from bench.tracking.ui_view import FAMILY_TAG

log = logging.getLogger("bench")

SWEEP_ENV = "BENCH_SWEEP"  # JSON: parent_run_id, launch_dir, tracking_down


@dataclass
class SweepState:
    """The sweep this process owns (set at on_multirun_start): its parent run, the jobs counted so far."""

    tracker: Optional[Tracker] = None  # the parent run (None: not tracked, or closed)
    jobs: int = 0
    failed: int = 0
    owner: Optional[int] = None  # the pid that started the multirun: jobs that ran in it are counted there
    experiment: str = ""
    sweep_dir: Optional[Path] = None
    launch_dir: str = ""  # the directory the sweep started in (a job on another node reads files there)


_state = SweepState()


def current_job(hydra_cfg: Any) -> SweepJob:
    """What a sweep job needs to log as a child of the sweep (or to skip tracking when the
    server did not answer the sweep's one probe), wherever the job runs."""
    # **: _carry's parent_run_id, launch_dir, tracking_down; a submitit job's own_process (bench.slurm)
    return SweepJob(job=hydra_cfg.job.num, dir=hydra_cfg.sweep.dir, **json.loads(os.environ.get(SWEEP_ENV) or "{}"))


def failed_jobs() -> int:
    return _state.failed


def job_returned(num: Any, job_return: JobReturn) -> bool:
    """Count a job that came back (its task's return value is bench's exit code); True if it failed."""
    failed = job_return.status != JobStatus.COMPLETED or bool(job_return.return_value)
    _count(num, failed)
    return failed


def job_lost(num: Any, overrides: Sequence[str], job_dir: Path, reason: str) -> None:
    """A job that never returned: counted failed, its child run FAILED with the reason (made
    when the job never opened one), the reason in its job dir for the report."""
    _count(num, True, reason)
    _record_in_job_dir(job_dir, overrides, reason)
    if (tracker := _state.tracker) is None or not tracker.active:
        return
    try:
        _fail_child(tracker, str(num), list(overrides), reason)
    except Exception as exc:  # tracking must not end the sweep
        log.warning("could not mark sweep job %s FAILED in MLflow (%s: %s)", num, type(exc).__name__, exc)


def _count(num: Any, failed: bool, reason: str = "") -> None:
    _state.jobs += 1
    if failed:
        _state.failed += 1
        log.warning("sweep job %s failed%s; going on with the others", num, f" ({reason})" if reason else "")


def _record_in_job_dir(job_dir: Path, overrides: Sequence[str], reason: str) -> None:
    """The report reads job dirs: one that never started gets its overrides, and one without a
    result the reason as error.txt's last line (naming the job's own last words where they differ)."""
    import yaml

    try:
        if not (hydra_dir := job_dir / ".hydra").is_dir():
            hydra_dir.mkdir(parents=True)
            (hydra_dir / "overrides.yaml").write_text(yaml.safe_dump(list(overrides)))
            (hydra_dir / "config.yaml").write_text("{}\n")
        if not (job_dir / "run_summary.json").exists():
            error_txt = job_dir / "error.txt"
            said = [line for line in error_txt.read_text().splitlines() if line.strip()] if error_txt.exists() else []
            if not said or said[-1] not in reason:  # the report reads the last line: what happened to the job first
                with error_txt.open("a") as out:
                    out.write(redact(f"{reason}; the run said: {said[-1]}" if said else reason) + "\n")
    except OSError as exc:
        log.warning("could not write the reason into %s: %s", job_dir, exc)


def _fail_child(parent: Tracker, num: str, overrides: List[str], reason: str) -> None:
    client, family = parent.client, f"tags.mlflow.parentRunId = '{parent.run_id}'"
    if found := client.search_runs([parent.experiment_id], filter_string=f"{family} and tags.`sweep.job` = '{num}'"):
        child, said = found[0], found[0].data.tags.get("error")
        # a run that failed on its own as its job was cancelled (its rank killed first) said a symptom
        if child.info.status != "FAILED" or not said or said not in reason:
            Tracker(client, child.info.run_id, parent.uri).finish(
                "FAILED", error=f"{reason}; the run said: {said}" if said else reason
            )
        return
    tags = {"sweep.job": num, "sweep.dir": str(_state.sweep_dir), "overrides": " ".join(overrides)}
    child = Tracker.start(parent.uri, _state.experiment, f"job{num}", tags, parent_run_id=parent.run_id)
    child.log_params(_sweep_params(overrides))
    child.finish("FAILED", error=reason)


def _sweep_params(overrides: Any) -> Dict[str, str]:
    """['data.batch_size=16,32', 'precision=fp32,bf16'] -> {'data.batch_size': '16,32', ...}"""
    return {key.lstrip("+~"): value for key, _, value in (str(o).partition("=") for o in overrides)}


def _carry(parent_run_id: Optional[str] = None, tracking_down: Optional[str] = None) -> None:
    """What every job needs from the sweep (current_job reads it), where every launcher hands it on."""
    carried = {"parent_run_id": parent_run_id, "launch_dir": _state.launch_dir, "tracking_down": tracking_down}
    os.environ[SWEEP_ENV] = json.dumps(carried)


def _refuse_a_sweep_that_cannot_start(config: Any) -> Optional[str]:
    """Before the parent run: hydra/launcher=slurm without sbatch/srun, a value no job can take
    (storage.workload.format=raw,xyz), a job its run would refuse, a sweep directory that cannot be
    one, or a tracking URI MLflow has no store for is one line and exit 2 (SystemExit: Hydra turns
    an Exception a callback raises into a warning). Else the sweep's tracking URI (None: off)."""
    from bench.config import sweep_problem
    from bench.launch.preview import cluster_commands_problem, job_problem
    from bench.machine.writable import writable_dir_refusal

    try:
        problem = cluster_commands_problem(config) or sweep_problem(list(config.hydra.overrides.task))
        problem = problem or job_problem(config)
        # Hydra makes the sweep's directory only once the parent run is open: a file there left a store behind
        problem = problem or writable_dir_refusal("hydra.sweep.dir", config.hydra.sweep.dir)
        uri = checked_uri(config.tracking, Path.cwd())
    except ConfigError as exc:
        problem = str(exc)
    if problem:
        raise SystemExit(print_error(problem))
    return uri


class MlflowSweepCallback(Callback):
    def on_multirun_start(self, config: Any, **kwargs: Any) -> None:
        """The checks, the server's probe, the parent run: Ctrl-C / SIGTERM here are one line (130 / 143)."""
        from bench.machine.children import sigterm_raises

        try:
            with sigterm_raises():
                self._start(config)
        except (KeyboardInterrupt, Interrupted) as exc:
            reason, code = stopped_by(exc) or ("interrupted", 1)
            if _state.tracker is not None:
                _end_interrupted_sweep(_state.tracker)
            raise SystemExit(print_error(f"sweep interrupted: {reason}", code)) from None

    def _start(self, config: Any) -> None:
        uri = _refuse_a_sweep_that_cannot_start(config)
        global _state
        sweep_dir, launch_dir = Path(config.hydra.sweep.dir).resolve(), str(Path(os.getcwd()).resolve())
        if (sweep_dir / "multirun.yaml").is_file():  # Hydra writes it after this: an earlier sweep's
            log.warning(
                "hydra.sweep.dir=%s holds an earlier sweep: its job folders this sweep reaches are written over, "
                "the others stay and its report lists them with this sweep's jobs; give each sweep its own folder",
                sweep_dir,
            )
        _state = SweepState(
            owner=os.getpid(), experiment=config.tracking.experiment, sweep_dir=sweep_dir, launch_dir=launch_dir
        )
        _carry()
        if uri is None:  # tracking off
            return
        overrides = list(config.hydra.overrides.task)
        if problem := probe(uri, config.tracking.probe_timeout_s):  # once for the whole sweep
            log.warning(unreachable_line(uri, problem, config.tracking.probe_timeout_s))
            _carry(tracking_down=f"the MLflow server did not answer at the sweep's start ({problem})")
            return
        # as distinct as the sweep's directory: two sweeps started in the same second are -N apart
        name = config.tracking.run_name or f"sweep-{stamp_of(sweep_dir) or time.strftime('%Y%m%d-%H%M%S')}"
        # Opened before any job starts: a fresh sqlite store is created here, once (jobs creating
        # it at the same time would race on its schema)
        tags = {"sweep": "parent", "sweep.dir": str(sweep_dir), "overrides": " ".join(overrides), **process_tags()}
        tracker = Tracker.start(uri, config.tracking.experiment, name, tags)
        tracker.log_params(_sweep_params(overrides))
        tracker.set_tags({FAMILY_TAG: tracker.run_id})  # listed with its children in the UI's view
        _state.tracker = tracker
        _carry(parent_run_id=tracker.run_id if tracker.active else None)
        atexit.register(_end_interrupted_sweep, tracker)

    def on_job_end(self, config: Any, job_return: Any, **kwargs: Any) -> None:
        if _state.owner == os.getpid():  # the job ran here; elsewhere its launcher reports it
            job_returned(config.hydra.job.num, job_return)

    def on_multirun_end(self, config: Any, **kwargs: Any) -> None:
        tracker = _state.tracker
        sweep_dir = Path(config.hydra.sweep.dir)
        scrub([sweep_dir / "multirun.yaml"])  # as each job's .hydra/: what a config file held goes
        files: List[Path] = []
        swept: List[str] = []  # the config keys the jobs differ in: the UI view's columns
        sample = None  # the jobs' headline figure (their report class's): what the UI view charts per job
        try:
            from bench.analysis import build_report, log_scaling_to_runs
            from bench.analysis.runs import CONFIG_PREFIX, sweep_report_class, swept_keys

            files, frame = build_report(sweep_dir, sweep_dir / "report")
            swept = [key[len(CONFIG_PREFIX) :] for key in swept_keys(frame)]
            sample = sweep_report_class(frame).view.sample
            if tracker is not None and tracker.active:
                log_scaling_to_runs(frame, tracker.client)
        except Exception as exc:  # a report problem must not hide the sweep's results
            why = f"{type(exc).__name__}: {exc}"
            log.warning(
                "the sweep report could not be built (%s); run python -m bench.report --sweep %s", why, sweep_dir
            )
        jobs, failed = _state.jobs, _state.failed
        log.info("sweep done: %d jobs, %d failed; report in %s", jobs, failed, sweep_dir / "report")
        os.environ.pop(SWEEP_ENV, None)
        if tracker is not None:
            _close_parent(tracker, jobs, failed, files, config.tracking.run_name)
            # the runs table (a bar per job in its chart mode), then MLflow's compare page of the jobs
            for link in (tracker.ui_link(children=True, params=swept, sample=sample), tracker.compare_link(sample)):
                if link:
                    log.info(link)
            _state.tracker = None


def _close_parent(tracker: Tracker, jobs: int, failed: int, files: List[Path], named: Optional[str]) -> None:
    """FAILED when every job failed (the reason: the first job's), else FINISHED; the failed count
    as tags, a metric, the run's description and (when some failed) its name."""
    reasons: List[str] = []
    if failed and tracker.active:
        try:
            children = tracker.client.search_runs(
                [tracker.experiment_id],
                f"tags.mlflow.parentRunId = '{tracker.run_id}' and attributes.status = 'FAILED'",
                order_by=["attributes.start_time ASC"],
            )
            reasons = [c.data.tags.get("error", "").splitlines()[-1:][0] for c in children if c.data.tags.get("error")]
        except Exception as exc:  # the count is still said
            log.debug("no failure reasons from MLflow (%s: %s)", type(exc).__name__, exc)
    from bench.analysis.render import failure_sentence

    sentence = failure_sentence(jobs, failed, reasons)
    tags = {
        "sweep.jobs": jobs,
        "sweep.failed_jobs": failed,
        "mlflow.note.content": sentence or f"{jobs} jobs, none failed",
    }
    if failed and tracker.active:
        name = named or tracker.client.get_run(tracker.run_id).info.run_name
        tags["mlflow.runName"] = f"{name} ({failed} of {jobs} failed)"
    tracker.set_tags(tags)
    tracker.log_metrics({"sweep_jobs": jobs, "sweep_failed_jobs": failed})
    tracker.log_artifacts(files, artifact_path="report")
    every_job_failed = bool(jobs) and failed == jobs
    tracker.finish("FAILED" if every_job_failed else "FINISHED", error=sentence if every_job_failed else None)


def end_unsubmitted_sweep(reason: str) -> None:
    """The launcher could not hand the jobs over (sbatch refused them): the parent ends FAILED with
    the reason, not KILLED as an interrupted sweep."""
    if (tracker := _state.tracker) is not None and tracker.active:
        tracker.finish("FAILED", error=reason)
    _state.tracker = None


def _end_interrupted_sweep(tracker: Tracker) -> None:
    """A sweep stopped by Ctrl-C/SIGTERM never reaches on_multirun_end: end its parent KILLED."""
    if _state.tracker is tracker and tracker.active:
        tracker.finish("KILLED", error="the sweep was interrupted")
