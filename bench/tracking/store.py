"""Where a run is tracked and how the store is opened.

Where: MLFLOW_TRACKING_URI if set, else tracking.uri, else sqlite:///<launch dir>/mlflow.db.

A fresh sqlite store is created (schema, migrations) by whichever MLflow client touches it
first; two bench processes started at once on a new file race on that (`table ... already
exists`, an alembic migration that finds no row) and one of them is not tracked. So the first
touch of a sqlite store — its schema and the experiment — happens under a file lock,
<db>.lock beside the database, before any run is created; the lock file is removed when the
lock is released (a SIGKILL in those seconds leaves an empty one, which the next run reuses).
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any, Dict, Iterator, Optional, Sequence, Tuple

from bench.report_view import DISPLAY
from bench.secrets import redact

SQLITE = "sqlite:///"
LOCK_TIMEOUT_S = 600  # a hang guard: creating the schema takes seconds, even on a loaded machine


def resolve_tracking_uri(configured: Optional[str], launch_dir: Path) -> str:
    env = os.environ.get("MLFLOW_TRACKING_URI")
    if env:
        return env
    if configured:
        return configured
    return f"{SQLITE}{(launch_dir / 'mlflow.db').resolve()}"


def sqlite_path(uri: str) -> Optional[Path]:
    """The database file of a sqlite URI (None for any other store, or an in-memory one)."""
    if not uri.startswith(SQLITE):
        return None
    path = uri[len(SQLITE) :].split("?", 1)[0]
    return Path(path) if path and path != ":memory:" else None


def _sqlite_artifact_root(uri: str) -> Optional[str]:
    """For sqlite stores keep artifacts next to the database, not in whatever the cwd is."""
    path = sqlite_path(uri)
    return (path.parent / "mlartifacts").resolve().as_uri() if path else None


@contextlib.contextmanager
def store_lock(uri: str) -> Iterator[None]:
    """Held while a sqlite store is first touched by this process; nothing to hold for a server
    (it creates its own store once, at its start)."""
    path = sqlite_path(uri)
    if path is None:
        yield
        return
    with removed_lock(Path(str(path) + ".lock"), LOCK_TIMEOUT_S):
        yield


@contextlib.contextmanager
def removed_lock(path: Path, timeout_s: float) -> Iterator[None]:
    """An exclusive flock on `path`, the file removed when it is released (every run left an
    empty mlflow.db.lock, issue 28). A process that waited on a file another removed meanwhile
    holds a lock on nothing: it sees that the path is not its file any more and locks anew."""
    import fcntl
    import time

    deadline = time.monotonic() + timeout_s
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() > deadline:
                        raise TimeoutError(f"{path} held by another process for {timeout_s:.0f} s") from None
                    time.sleep(0.02)
            with contextlib.suppress(FileNotFoundError):
                if os.stat(path).st_ino == os.fstat(fd).st_ino:
                    break
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)  # the file was removed (or replaced) while this process waited: lock anew
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            os.unlink(path)
        os.close(fd)


def ensure_experiment(client: Any, name: str, uri: str) -> str:
    """Experiment id for `name`, created if missing (tolerates a concurrent creator: a server's
    clients are not serialised by the lock)."""
    existing = client.get_experiment_by_name(name)
    if existing is None:
        try:
            experiment_id = client.create_experiment(name, artifact_location=_sqlite_artifact_root(uri))
        except Exception:  # another process created it first
            existing = client.get_experiment_by_name(name)
            if existing is None:
                raise
            experiment_id = existing.experiment_id
    else:
        experiment_id = existing.experiment_id
    if existing is None or existing.tags.get(EXPERIMENT_KIND_TAG) != EXPERIMENT_KIND:
        # MLflow 3's UI opens an experiment of no kind on its GenAI overview ("Traces 0"): say it is training
        client.set_experiment_tag(experiment_id, EXPERIMENT_KIND_TAG, EXPERIMENT_KIND)
    return experiment_id


EXPERIMENT_KIND_TAG, EXPERIMENT_KIND = "mlflow.experimentKind", "custom_model_development"
UI_ORDER = "orderByKey=metrics.%60images_per_second%60&orderByAsc=false"  # fastest first
# MLflow 3.x's UI ignores mlflow.experimentKind: it opens an experiment on the GenAI overview
# ("Traces 0") unless the link says workflowType=machine_learning (or the browser saved that
# choice, made with the sidebar's "Model training" switch, in localStorage mlflow.workflowType)
WORKFLOW = "workflowType=machine_learning"
# MLflow's shareable views: the UI reads a view (columns, order, filter, grouping) from this experiment
# tag when the link says ?viewStateShareKey=<key> and no other view parameter (one in the link wins)
VIEW_TAG = "mlflow.sharedViewState."
# a run and its children carry the parent's id in this tag (the parent its own): a filter on it shows
# the parent too (mlflow.parentRunId would leave it out), grouped with its children, none collapsed
FAMILY_TAG = "bench.parent"
NAME_COLUMN = "attributes.`Run Name`"  # the UI's id of the run name column


def rounded(value: float, digits: int = 4) -> float:
    """`value` to `digits` significant digits (4692.4 -> 4692, 7.326087 -> 7.326)."""
    import math

    if not math.isfinite(value) or value == 0:
        return value
    return round(value, max(0, digits - 1 - math.floor(math.log10(abs(value)))))


def share_view(
    client: Any,
    experiment_id: str,
    figure: str = "images_per_second",
    params: Sequence[str] = (),
    parent_run_id: Optional[str] = None,
    has_figure: bool = True,
) -> str:
    """A saved view of the experiment's runs: `figure` (rounded), the swept `params` and the
    failure reason as columns, fastest first (oldest first when no run has the figure); a parent's:
    the parent and its children, grouped, none collapsed; its share key."""
    import json

    columns = [f"metrics.`{DISPLAY.get(figure, figure)}`", "tags.`error`", *(f"params.`{name}`" for name in params)]
    state: Dict[str, Any] = {
        "selectedColumns": columns,
        # the figure and the reason first, by the name (the UI groups columns by kind: the error tag
        # would come after every param, off the page), the name and the reason wide enough to read
        "columnOrder": [NAME_COLUMN, *columns],
        "columnWidths": {NAME_COLUMN: 330, "tags.`error`": 400},
        "orderByKey": f"metrics.`{figure}`" if has_figure else "attributes.start_time",
        "orderByAsc": not has_figure,
    }
    if parent_run_id:
        state["searchFilter"] = f"tags.`{FAMILY_TAG}` = '{parent_run_id}'"
        state["groupBy"] = {"aggregateFunction": "average", "groupByKeys": [{"mode": "tag", "groupByData": FAMILY_TAG}]}
    key = f"bench-sweep-{parent_run_id[:12]}" if parent_run_id else "bench-runs"
    client.set_experiment_tag(experiment_id, VIEW_TAG + key, json.dumps(state))
    return key


def ui_link(uri: str, experiment_id: str, parent_run_id: Optional[str] = None, view_key: Optional[str] = None) -> str:
    """Where to look at the runs in the MLflow UI: the command that serves a local store and the
    link to the experiment's runs table (workflowType: not the GenAI overview): a shared view
    (share_view) where one was saved, else fastest first by the link's own parameters (a sweep's:
    the parent and its children)."""
    from urllib.parse import quote

    if view_key:
        query = f"{WORKFLOW}&viewStateShareKey={quote(view_key)}"
    else:
        query = f"{WORKFLOW}&{UI_ORDER}"
        if parent_run_id:
            query += "&searchFilter=" + quote(f"tags.`{FAMILY_TAG}` = '{parent_run_id}'")
    path = f"#/experiments/{experiment_id}/runs?{query}"
    if uri.startswith(("http://", "https://")):
        return f"MLflow UI: {redact(uri).rstrip('/')}/{path}"
    return f"MLflow UI: mlflow ui --backend-store-uri {uri}, then open http://127.0.0.1:5000/{path}"


def open_client(uri: str) -> Any:
    """An MlflowClient whose store exists (a fresh sqlite file gets its schema under the lock)."""
    from mlflow import MlflowClient

    with store_lock(uri):
        client = MlflowClient(tracking_uri=uri)
        client.search_experiments(max_results=1)  # the first touch: creates or migrates the schema
    return client


def open_experiment(uri: str, name: str) -> Tuple[Any, str]:
    """(client, experiment id) for `name` in the store at `uri`, both made under the lock."""
    from mlflow import MlflowClient

    with store_lock(uri):
        client = MlflowClient(tracking_uri=uri)
        return client, ensure_experiment(client, name, uri)
