"""Runs left RUNNING by a bench process that is gone: told apart by the host, pid and start time
each run is tagged with (`python -m bench.tools.stale` lists and marks them; every run whose store
answers closes those of its own experiment when it opens, close_stale)."""

from __future__ import annotations

import socket
from typing import Any, List, Optional, Tuple

from bench.machine.children import process_identity


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
