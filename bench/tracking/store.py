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
from typing import Any, Iterator, Optional, Tuple

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


EXPERIMENT_KIND_TAG, EXPERIMENT_KIND = "mlflow.experimentKind", "custom_model_development"


def rounded(value: float, digits: int = 4) -> float:
    """`value` to `digits` significant digits (4692.4 -> 4692, 7.326087 -> 7.326)."""
    import math

    if not math.isfinite(value) or value == 0:
        return value
    return round(value, max(0, digits - 1 - math.floor(math.log10(abs(value)))))


def open_client(uri: str) -> Any:
    """An MlflowClient whose store exists (a fresh sqlite file gets its schema under the lock)."""
    from mlflow import MlflowClient

    with store_lock(uri):
        client = MlflowClient(tracking_uri=uri)
        client.search_experiments(max_results=1)  # the first touch: creates or migrates the schema
    return client


def open_experiment(uri: str, name: str) -> Tuple[Any, str]:
    """(client, experiment id) for `name` in the store at `uri`, both made under the lock: the
    experiment created if missing (tolerating a concurrent creator: a server's clients are not
    serialised by the lock), its artifacts next to a sqlite database, not in whatever the cwd is."""
    from mlflow import MlflowClient

    with store_lock(uri):
        client = MlflowClient(tracking_uri=uri)
        existing = client.get_experiment_by_name(name)
        if existing is None:
            path = sqlite_path(uri)
            try:
                root = (path.parent / "mlartifacts").resolve().as_uri() if path else None
                experiment_id = client.create_experiment(name, artifact_location=root)
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
        return client, experiment_id
