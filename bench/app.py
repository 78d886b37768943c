"""One run, from a composed config to the report: load -> preflight -> tracker -> the launcher
runs the scenario -> files and MLflow -> the final stdout line.

Order matters: the config is checked (schema, then the scenario's preflight: data on disk, the
device) before an MLflow run is opened, so a bad config never leaves a run behind. Once the run
is open, every way out (success, error, Ctrl-C, SIGTERM) ends it with a final status. Nothing
here depends on the scenario: the config holds it (`config.scenario`, the class its conf/scenario/
option names), bench.launch picks how its ranks start.
"""

from __future__ import annotations

import logging
import sys
import traceback
from contextlib import suppress
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, List, Mapping, Optional

from omegaconf import DictConfig, OmegaConf

from bench.config import BenchConfig, as_plain, load
from bench.config.optimizer import chosen_optimizers_values
from bench.errors import EXIT_FAILED, EXIT_SIGINT, EXIT_SIGTERM, BenchError, Interrupted, print_error, stopped_by
from bench.machine.children import STOPS_HELD, sigterm_raises
from bench.results import final_line, note_run, room_kept, write_error
from bench.secrets import redact_output, scrub
from bench.tracking.store import checked_uri
from bench.tracking.tracker import SweepJob, Tracker, open_run

if TYPE_CHECKING:
    from bench.launch.launchers import Launcher
    from bench.scenario_base import BaseReport as Report
    from bench.scenario_base import BaseScenario as Scenario

log = logging.getLogger("bench")


def run_from_hydra(cfg: DictConfig) -> int:
    """The Hydra task. A single run exits with its code; a multirun job returns it instead
    (an exit would end the whole sweep), and the sweep callback counts the failures."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    from bench.tracking.sweep import current_job

    logging.raiseExceptions = False  # a log write that fails (a full disk) must not print tracebacks
    redact_output()  # again: a job run by submitit is a process of its own
    hydra_cfg = HydraConfig.get()
    in_sweep = hydra_cfg.mode == RunMode.MULTIRUN
    sweep_job = current_job(hydra_cfg) if in_sweep else None
    out_dir, launch_dir = Path(hydra_cfg.runtime.output_dir), Path(hydra_cfg.runtime.cwd)
    # what Hydra saved before this task ran (.hydra/*.yaml, a sweep's multirun.yaml) may hold what a config
    # file said: the credentials in it go, before the run's artifacts are logged
    saved = list((out_dir / hydra_cfg.output_subdir).glob("*.yaml")) if hydra_cfg.output_subdir else []
    if in_sweep:
        saved.append(Path(hydra_cfg.sweep.dir) / "multirun.yaml")
    scrub(path for path in saved if path.is_file())
    # a job on another node: the sweep's directory, for the default store
    launch_dir = Path(sweep_job.launch_dir) if sweep_job and sweep_job.launch_dir else launch_dir
    # as typed: list() would resolve them, and data.batch_size=${oops} would fail here, outside `load`
    overrides = [str(o) for o in OmegaConf.to_container(hydra_cfg.overrides.task, resolve=False) or []]
    try:
        chosen_optimizers_values(cfg, overrides)  # optimizer=adam over a preset's sgd values: adam's own
        config = load(cfg)
    except BenchError as exc:
        code = _refuse(exc, out_dir, sweep_job, lambda: _raw_tracker(cfg, launch_dir, overrides, sweep_job))
    else:
        code = run(config, out_dir, launch_dir, overrides, sweep_job)
    # a sweep's job returns its code (the sweep counts it); Ctrl-C / SIGTERM stop the sweep
    if code and (not in_sweep or code in (EXIT_SIGINT, EXIT_SIGTERM)):
        sys.exit(code)
    return code


def run(
    config: BenchConfig,
    out_dir: Path,
    launch_dir: Path,
    overrides: Optional[List[str]] = None,
    sweep_job: Optional[SweepJob] = None,
    *,
    raise_refusals: bool = False,
    echo: bool = True,
) -> int:
    """Run one benchmark; returns the process exit code. `sweep_job`: a multirun's job (one that cannot
    start still leaves a FAILED child run with the reason). bench.api's: raise_refusals, echo=False."""
    overrides = overrides or []
    scenario: Scenario = config.scenario  # the class conf/scenario/<mode>.yaml names, with its own keys

    def open_tracker(environment: Mapping[str, Any], out: Optional[Path] = None) -> "Tracker":
        name, params = scenario.run_name(config), as_plain(config)
        return open_run(config.tracking, launch_dir, name, params, environment, overrides, sweep_job, out)

    try:
        scenario.preflight(config)  # first, and before heavy imports: a refusal comes back fast
        checked_uri(config.tracking, launch_dir)  # a store MLflow has no scheme for: refused before any work
    except BenchError as exc:
        if raise_refusals:
            raise
        return _refuse(exc, out_dir, sweep_job, lambda: open_tracker({}))
    # torch comes with these (the launcher's workers, the environment's versions): not before the config is checked
    from bench.launch.launchers import select_launcher
    from bench.tracking.environment import collect_environment

    launcher = select_launcher(config, scenario.has_ranks(config), bool(sweep_job and not sweep_job.own_process))
    if not launcher.reports:
        return _run_unreported(launcher, scenario, config, out_dir)

    environment = collect_environment()
    # a Tracker with no store does nothing: until the run opens (a signal while the server is probed is said too)
    tracker = Tracker()
    with room_kept(out_dir), sigterm_raises():  # room for error.txt; SIGTERM raises (in the main thread)
        try:
            tracker = open_tracker(environment, out_dir)
        except BaseException as exc:
            return _fail(exc, scenario, config, out_dir, tracker)
        if config.tracking.required and not tracker.active:  # before any work: the record is what was asked for
            untracked = BenchError(f"this run cannot be tracked and tracking.required=true: {tracker.lost}")
            if raise_refusals:
                raise untracked
            return print_error(str(untracked), EXIT_FAILED)
        try:
            report = scenario.report(launcher.run(scenario, config, out_dir), config)
            # first, before any optional file or artifact: the final stdout line and the MLflow
            # metrics, so a full disk or a failed checkpoint cannot cost the measurement
            log.info(report.headline())
            if echo:
                print(final_line(report.metrics), flush=True)
            tracker.log_metrics(report.metrics)
            problems = list(report.problems) + _write_outputs(report, config, environment, tracker, out_dir)
            if stopped := report.interrupted:  # a signal during the passes after the window
                raise Interrupted(stopped)  # the window is reported: the run ends KILLED, as at any signal
            if problems:  # the measurement stands; an output it was to leave behind does not
                reason = "; ".join(problems)
                tracker.finish("FAILED", error=reason)
                print_error(f"run failed after its measurement was reported: {reason}{_kept(out_dir, reason)}")
                return EXIT_FAILED
            tracker.finish("FINISHED")
        except BaseException as exc:  # every way out ends the MLflow run with a status
            return _fail(exc, scenario, config, out_dir, tracker)
    log.info("results in %s", out_dir)
    if config.tracking.required and tracker.lost:  # the files are kept; the record is not complete
        reason = f"run not tracked (tracking.required=true): {tracker.lost}"
        return print_error(f"{reason}; its results are in {out_dir}{_kept(out_dir, reason)}", EXIT_FAILED)
    # a sweep's jobs: the sweep says it once, at its end
    if link := (tracker.ui_link() if sweep_job is None else None):
        log.info(link)
    return 0


def _write_outputs(
    report: "Report", config: BenchConfig, environment: Mapping[str, Any], tracker: "Tracker", out_dir: Path
) -> List[str]:
    """The run's files (each written whole or not at all) and the rest of its MLflow record;
    what could not be written, as problems."""
    from bench.tracking.environment import write_packages

    try:
        files = report.write(out_dir, as_plain(config), environment, tracker.run_id)
        files.append(write_packages(out_dir))
        report.log_to(tracker, files, out_dir, config.tracking.log_step_metrics)  # never raises
        note_run(out_dir, tracker.name, files)  # what an upload sends later, and by which name
    except OSError as exc:
        return [f"the run's files could not be written to {out_dir} ({exc.strerror or exc}: {exc.filename or out_dir})"]
    return []


def _raw_tracker(cfg: DictConfig, launch_dir: Path, overrides: List[str], sweep_job: Optional[SweepJob]) -> "Tracker":
    """A sweep job whose config does not load: its child run, from what the composed config says."""
    from bench.config.run import TrackingConfig
    from bench.config.scenario import without_target

    try:
        tracking: Any = OmegaConf.to_object(cfg.tracking)
        params: Any = without_target(OmegaConf.to_container(cfg, resolve=False))  # type: ignore[arg-type]
    except Exception:  # the tracking group itself is broken: the defaults
        tracking, params = TrackingConfig(), {}
    return open_run(tracking, launch_dir, "refused", params, {}, overrides, sweep_job)


def _refuse(exc: BenchError, out_dir: Path, sweep_job: Optional[SweepJob], tracker: Callable[[], "Tracker"]) -> int:
    """A run that cannot start: one line, no MLflow run (a sweep job still gets its FAILED
    child and an error.txt, so the sweep report says why)."""
    problem = str(exc)
    print_error(problem + (_kept(out_dir, problem) if sweep_job else ""))
    if sweep_job and sweep_job.parent_run_id:
        tracker().finish("FAILED", error=problem)
    return exc.exit_code


def _run_unreported(launcher: "Launcher", scenario: "Scenario", config: BenchConfig, out_dir: Path) -> int:
    """A process that does not hold rank 0 (a follower node, a non-zero rank under torchrun):
    train, hand the timing to rank 0, report nothing but a failure."""
    try:
        with sigterm_raises():  # a follower waiting for its hosts ends on SIGTERM as on Ctrl-C
            launcher.run(scenario, config, out_dir)
    except BaseException as exc:  # one line here; rank 0 reports the run
        interrupted = stopped_by(exc)
        if not interrupted and not isinstance(exc, Exception):
            raise
        failed = str(exc) if isinstance(exc, BenchError) else f"{type(exc).__name__}: {exc}"
        reason, code = interrupted or (failed, EXIT_FAILED)
        reason = f"{launcher.who} {'interrupted' if interrupted else 'failed'}: {reason}"
        return print_error(reason + ("" if interrupted else _kept(out_dir, reason)), code)
    log.info("%s done; rank 0 reports the run", launcher.who)
    return 0


def _kept(out_dir: Path, reason: str) -> str:
    """error.txt with the one-line reason (in the room reserved for it); "" when it is written,
    else why not, for the [ERROR] line (then this line and the MLflow run's error tag hold it)."""
    try:
        write_error(out_dir, reason)
    except OSError as exc:
        return f" (no error.txt: {exc.strerror or exc})"
    return ""


def _fail(exc: BaseException, scenario: "Scenario", config: BenchConfig, out_dir: Path, tracker: "Tracker") -> int:
    """End the MLflow run with the right status, say what happened in one line, pick the exit code."""
    if interrupted := stopped_by(exc):
        reason, code = interrupted
        # a second stop (a scheduler's SIGTERM after its launcher's) landing in this MLflow write left
        # the run RUNNING: it waits for the marking, then has nothing to add
        with suppress(KeyboardInterrupt, Interrupted), STOPS_HELD:
            tracker.finish("KILLED", error=reason)
        return print_error(f"run interrupted: {reason}", code)
    if not isinstance(exc, Exception):  # SystemExit and friends: not ours to swallow
        tracker.finish("FAILED", error=f"{type(exc).__name__}: {exc}")
        raise exc
    if known := scenario.explain(exc, config):
        tracker.finish("FAILED", error=known)
        return print_error(known + _kept(out_dir, known), EXIT_FAILED)
    reason = f"{type(exc).__name__}: {exc}"
    try:
        where = write_error(out_dir, "".join(traceback.format_exception(exc)))
        tracker.log_artifacts([where])
        saved = f"traceback in {where}"
    except OSError as failed:  # a read-only disk must not hide the reason: it is this line and the MLflow tag
        saved = f"no traceback file: {failed.strerror or failed}"
    tracker.finish("FAILED", error=reason)
    return print_error(f"run failed: {reason} ({saved})", EXIT_FAILED)
