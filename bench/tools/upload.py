"""`python -m bench.tools.upload <run dir> [--tracking-uri URI]`: send a finished run's results
to MLflow after the fact — a run made while the tracking server could not be reached, or one
whose server went away mid-run (left RUNNING there).

The run directory holds everything: run_summary.json (results, config, environment), the
per-step files and the logs. If the MLflow run named in run_summary.json is in the store and
not FINISHED, it is completed there (its partly logged series are not logged twice); if it is
not in the store, a new run is made in the run's experiment. A run keeps one MLflow run per store:
run_summary.json's `mlflow_run_id` stays the first store's, `mlflow_run_ids` maps each store an
upload sent it to (its URI, redacted) to its run there, and an upload looks for each of them in the
store it is given, so uploading to a second store and back to the first makes no duplicate.
A run that failed after its measurement was reported (its directory holds error.txt) ends FAILED
with its `error` tag, as it would have had the store been up.
A run the store has FINISHED, or FAILED as this one, is left alone.
Exit 0 uploaded or already there, 1 the upload failed, 2 not a run directory or a store that cannot
be used (a server that does not answer within 5 s, a scheme MLflow has no store for).
"""

from __future__ import annotations

import argparse
import fcntl
import logging
import sys
from pathlib import Path
from typing import Any, List, Optional, Sequence, Tuple

from bench.errors import EXIT_FAILED, print_error
from bench.machine.children import exit_without_teardown
from bench.results import read_summary, write_json
from bench.scenarios import report_class
from bench.secrets import flatten, redact, redact_output
from bench.tracking.store import open_client, resolve_tracking_uri, store_problem
from bench.tracking.tracker import Tracker

# what a run's summary names as its files (bench.results.note_run), else, for a run recorded before
# it did, these; error.txt whenever it is there (written after the summary, when the run fails late)
RESULT_FILES: Tuple[str, ...] = ("run_summary.json", "summary.csv", "metrics_epoch.jsonl", "step_times.csv")
RESULT_FILES += ("epochs.csv", "read_latency.csv", "packages.txt")


def _existing_run(client: Any, run_ids: Sequence[Optional[str]]) -> Any:
    """The first of `run_ids` this store holds (each id is one store's), else None."""
    for run_id in dict.fromkeys(filter(None, run_ids)):
        try:
            return client.get_run(run_id)
        except Exception:  # not in this store (each store raises its own type)
            continue
    return None


def run_error(run_dir: Path) -> Optional[str]:
    """Why the run failed: error.txt's last line (the reason bench gave; a traceback ends with it),
    written after run_summary.json when a run fails late; None for a run that finished."""
    try:
        lines = (run_dir / "error.txt").read_text(errors="replace").strip().splitlines()
    except FileNotFoundError:
        return None
    return lines[-1] if lines else "error.txt is empty"


def upload(run_dir: Path, uri: str) -> str:
    """Upload the run in `run_dir` to `uri`; returns what was done, in a few words."""
    summary = read_summary(run_dir)
    error = run_error(run_dir)
    status = "FAILED" if error else "FINISHED"
    config = summary["config"]
    reports = report_class(config.get("mode", "train"))
    report = reports.from_files(run_dir)
    client = open_client(uri)
    stores = summary.get("mlflow_run_ids") or {}  # {redacted store URI: its run of this directory}
    existing = _existing_run(client, [stores.get(redact(uri)), summary.get("mlflow_run_id"), *stores.values()])
    # the name the run had (or would have had, untracked); a run recorded before bench kept it: its directory's
    run_name = summary.get("run_name") or config.get("tracking", {}).get("run_name") or run_dir.name
    if existing is not None and existing.info.status in ("FINISHED", status):  # KILLED by close_stale: completed
        return f"already in MLflow: run {existing.info.run_id} ({existing.info.status})"
    if existing is not None:
        tracker = Tracker(client, existing.info.run_id, uri)
        partly_logged = bool(client.get_metric_history(existing.info.run_id, reports.view.timeline_metric or ""))
    else:
        tracking = config.get("tracking", {})
        tags = {f"env.{k}": v for k, v in flatten(summary.get("environment", {})).items()}
        tags["uploaded_from"] = str(run_dir.resolve())
        tracker = Tracker.start(uri, tracking.get("experiment") or "bench", run_name, tags)
        if not tracker.active:
            raise RuntimeError(f"the MLflow store at {redact(uri)} could not be reached")
        tracker.log_params(config)
        partly_logged = False
    names = dict.fromkeys([*summary.get("files", RESULT_FILES), "error.txt"])
    files: List[Path] = [run_dir / name for name in names if (run_dir / name).is_file()]
    tracker.log_metrics(report.metrics)
    if partly_logged:  # its series and epochs reached the server before it went away
        tracker.log_artifacts([*files, *sorted(run_dir.glob("*.log")), run_dir / ".hydra"])
    else:
        report.log_to(tracker, files, run_dir, log_series=True)
    tracker.finish(status, error=error)  # the tag redacted, as every tag is
    if not tracker.active:
        raise RuntimeError(f"the MLflow store at {redact(uri)} stopped answering during the upload")
    if existing is None:  # a second upload (to this store or another) finds this run instead of making another
        stores = {**stores, redact(uri): tracker.run_id}
        first = summary.get("mlflow_run_id") or tracker.run_id  # the id the run's own store gave it stays
        write_json(run_dir / "run_summary.json", {**summary, "mlflow_run_id": first, "mlflow_run_ids": stores})
    return f"{'completed' if existing is not None else 'uploaded as'} run {tracker.run_id} {run_name!r} ({status})"


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.tools.upload", description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir", type=Path, help="a run's output directory (holding run_summary.json)")
    parser.add_argument("--tracking-uri", help="MLflow store (default: MLFLOW_TRACKING_URI, else sqlite:///mlflow.db)")
    args = parser.parse_args(argv)
    redact_output()  # what MLflow or an error message says may carry the URI's user:password
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    if not (args.run_dir / "run_summary.json").is_file():
        return print_error(f"{args.run_dir} holds no run_summary.json: pass the output directory of a finished run")
    uri = args.tracking_uri or resolve_tracking_uri(None, Path.cwd())
    if problem := store_problem(uri):  # a server that takes the connection and never answers: 5 s, not MLflow's minutes
        return print_error(problem)
    try:
        with open(args.run_dir / "run_summary.json", "rb") as held:
            # one upload of a run at a time: a second one started together waits, then finds the run this
            # one made (its id written into run_summary.json) instead of making another
            fcntl.flock(held, fcntl.LOCK_EX)
            done = upload(args.run_dir, uri)
    except Exception as exc:  # one line, no traceback
        return print_error(f"upload of {args.run_dir} failed: {type(exc).__name__}: {exc}", EXIT_FAILED)
    print(f"{args.run_dir}: {done} at {redact(uri)}")
    return 0


if __name__ == "__main__":
    exit_without_teardown(main)
