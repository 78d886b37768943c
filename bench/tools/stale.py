"""`python -m bench.tools.stale [--tracking-uri URI] [--mark]`: MLflow runs left RUNNING by a
bench process that is gone (killed with SIGKILL, a machine that went down).

Every run bench opens is tagged with the host, pid and start time of its process. A RUNNING run
whose process on this host is no longer there (no such pid, or a pid reused by a process that
started at another time) is stale; `--mark` ends it KILLED with the reason as its `error` tag.
Runs of other hosts are listed but left alone: only their own host can tell. Exit 0.

Every run whose store answers does the same for its own experiment when it opens (close_stale):
a run a store error left RUNNING (a full disk mid-run) is closed once the store is writable again,
its `error` tag naming the run directory that `python -m bench.tools.upload` completes it from.

`--move-aside` renames a sqlite store whose creation was interrupted (bench.tracking.store.half_made:
no runs; `mlflow db upgrade` cannot repair it) to <db>.half-made-<time>; the next run makes a new one.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Optional, Sequence

from bench.errors import print_error
from bench.machine.children import exit_without_teardown
from bench.secrets import redact, redact_output
from bench.tracking.store import half_made, missing_sqlite_store, resolve_tracking_uri, sqlite_path, store_problem
from bench.tracking.tracker import find_stale, kill_reason


def main(argv: Optional[Sequence[str]] = None) -> int:
    redact_output()  # a tracking URI or an endpoint read from the environment may carry a password
    parser = argparse.ArgumentParser(prog="python -m bench.tools.stale", description=__doc__.split("\n\n")[0])
    parser.add_argument("--tracking-uri", help="MLflow store (default: MLFLOW_TRACKING_URI, else sqlite:///mlflow.db)")
    parser.add_argument("--mark", action="store_true", help="end the stale runs KILLED")
    parser.add_argument("--move-aside", action="store_true", help="rename a half-made sqlite store (no runs)")
    args = parser.parse_args(argv)
    uri = args.tracking_uri or resolve_tracking_uri(None, Path.cwd())
    if missing := missing_sqlite_store(uri):  # nothing is RUNNING in a store that is not there; none is made
        print(f"no MLflow store at {missing}: 0 RUNNING, 0 stale", file=sys.stderr)
        return 0
    if args.move_aside:  # a half-made sqlite store: renamed
        if (path := sqlite_path(uri)) is None or not half_made(path):
            return print_error(f"{redact(uri)} is not a half-made sqlite store: nothing moved")
        path.rename(path.with_name(f"{path.name}.half-made-{time.strftime('%Y%m%d-%H%M%S')}"))
        print(f"moved the half-made MLflow store {path} aside: the next run makes a new one", file=sys.stderr)
        return 0
    if problem := store_problem(uri):
        return print_error(problem)
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
    exit_without_teardown(main)
