"""`python -m bench.tools.stale [--tracking-uri URI] [--mark]`: MLflow runs left RUNNING by a
bench process that is gone (killed with SIGKILL, a machine that went down).

Every run bench opens is tagged with the host, pid and start time of its process. A RUNNING run
whose process on this host is no longer there (no such pid, or a pid reused by a process that
started at another time) is stale; `--mark` ends it KILLED with the reason as its `error` tag.
Runs of other hosts are listed but left alone: only their own host can tell. Exit 0.

Every run whose store answers does the same for its own experiment when it opens (close_stale):
a run a store error left RUNNING (a full disk mid-run) is closed once the store is writable again,
its `error` tag naming the run directory that `python -m bench.tools.upload` completes it from.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
from pathlib import Path
from typing import Any, List, Optional, Sequence, Tuple

from bench.launch.watchdog import process_identity
from bench.output_redaction import install as redact_output
from bench.tracking.probe import store_problem


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


def running_runs(client: Any) -> List[Any]:
    experiments = [e.experiment_id for e in client.search_experiments()]
    return (
        client.search_runs(experiments, filter_string="attributes.status = 'RUNNING'", max_results=10000)
        if experiments
        else []
    )


def kill_reason(tags: Any, by: str) -> str:
    where = tags.get("bench.out_dir")
    kept = f"; its results stay in {where} (python -m bench.tools.upload {where} completes it)" if where else ""
    return (
        f"the process that ran it (pid {tags['bench.pid']} on {tags['bench.host']}) is gone; marked KILLED by {by}"
        + kept
    )


def close_stale(client: Any, experiment_id: Optional[str], by: str) -> int:
    """End KILLED the runs of `experiment_id` that a process of this host that is gone left
    RUNNING (a store that failed mid-run, a SIGKILL): each with the reason as its `error` tag.
    Called by every run whose store answers; never raises (it is housekeeping). The count."""
    import logging

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

    client = MlflowClient(tracking_uri=uri)
    host = socket.gethostname()
    return client, [(run, state_of(run, host)) for run in running_runs(client)]


def main(argv: Optional[Sequence[str]] = None) -> int:
    redact_output()  # a tracking URI or an endpoint read from the environment may carry a password
    parser = argparse.ArgumentParser(prog="python -m bench.tools.stale", description=__doc__.split("\n\n")[0])
    parser.add_argument("--tracking-uri", help="MLflow store (default: MLFLOW_TRACKING_URI, else sqlite:///mlflow.db)")
    parser.add_argument("--mark", action="store_true", help="end the stale runs KILLED")
    args = parser.parse_args(argv)
    uri = (
        args.tracking_uri
        or os.environ.get("MLFLOW_TRACKING_URI")
        or f"sqlite:///{(Path.cwd() / 'mlflow.db').resolve()}"
    )
    problem = store_problem(uri)
    if problem:
        print(f"[ERROR] {problem}", file=sys.stderr, flush=True)
        return 2
    client, found = find_stale(uri)
    for run, state in found:
        tags = run.data.tags
        print(
            f"{run.info.run_id}  {run.info.run_name or '':<28}  {state:<10}  "
            f"pid {tags.get('bench.pid', '?')} on {tags.get('bench.host', '?')}"
        )
        if args.mark and state == "gone":
            client.set_tag(run.info.run_id, "error", kill_reason(tags, "python -m bench.tools.stale"))
            client.set_terminated(run.info.run_id, "KILLED")
    gone = sum(state == "gone" for _, state in found)
    print(f"{len(found)} RUNNING, {gone} stale" + (" (marked KILLED)" if args.mark and gone else ""), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
