"""The MLflow store: where a run is tracked, whether it can be and is there, and how it is opened.

Where: MLFLOW_TRACKING_URI if set, else tracking.uri, else sqlite:///<launch dir>/mlflow.db.

A fresh sqlite store is created (schema, migrations) by whichever MLflow client touches it
first; two bench processes started at once on a new file race on that (`table ... already
exists`, an alembic migration that finds no row) and one of them is not tracked. So the first
touch of a sqlite store — its schema and the experiment — happens under a file lock,
<db>.lock beside the database, before any run is created; the lock file is removed when the
lock is released (a SIGKILL in those seconds leaves an empty one, which the next run reuses).
A new store is made whole or not at all (create_whole); one an older bench left half-made is
named in one line, with the command that moves it aside (half_made).

Can MLflow track there, and is the tracking server there? A URI whose scheme MLflow has no
store for is refused before any work (checked_uri). A short probe before a run (once per sweep)
replaces MLflow's retries: against a server that cannot be reached, MLflow's defaults spend
minutes in back-off at the first call and again at the next. http(s) servers are asked for
/health, database servers (postgresql, mysql, mssql) for a TCP connection; a sqlite file is local.

MLflow's own retries are bounded too, for a server that goes away during a run: unless the
user set them, MLFLOW_HTTP_REQUEST_MAX_RETRIES=2 and MLFLOW_HTTP_REQUEST_TIMEOUT=15 s.
"""

from __future__ import annotations

import contextlib
import gc
import os
import socket
import sys
import threading
import traceback
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any, Iterator, Optional, Tuple

from bench.errors import ConfigError
from bench.machine.writable import write_whole
from bench.secrets import USERINFO, redact

SQLITE = "sqlite:///"
LOCK_TIMEOUT_S = 600  # a hang guard: creating the schema takes seconds, even on a loaded machine


def resolve_tracking_uri(configured: Optional[str], launch_dir: Path) -> str:
    return os.environ.get("MLFLOW_TRACKING_URI") or configured or f"{SQLITE}{(launch_dir / 'mlflow.db').resolve()}"


def sqlite_path(uri: str) -> Optional[Path]:
    """The database file of a sqlite URI (None for any other store, or an in-memory one)."""
    if not uri.startswith(SQLITE):
        return None
    path = uri[len(SQLITE) :].split("?", 1)[0]
    return Path(path) if path and path != ":memory:" else None


def free_interrupted_write() -> None:
    """Called while a Ctrl-C or SIGTERM is being handled, before the run is marked KILLED. A stop that
    lands inside an MLflow write to a sqlite store (its params, a metric) leaves that write's connection
    checked out with its transaction open, held by the finished frames of the stop's traceback: the
    KILLED status, and every later write of this process (bench.api's next run), then waited out
    MLflow's 20 s busy timeout and failed "database is locked", the run left RUNNING. Clearing those
    frames and collecting them rolls that transaction back and frees the database."""
    stop = sys.exc_info()[1]
    while stop is not None:  # the stop, and what it was raised while handling (a chain without cycles)
        traceback.clear_frames(stop.__traceback__)
        stop = stop.__context__
    gc.collect()


@contextlib.contextmanager
def store_lock(uri: str) -> Iterator[None]:
    """Held while a sqlite store is first touched by this process; nothing to hold for a server
    (it creates its own store once, at its start)."""
    if (path := sqlite_path(uri)) is None:
        yield
        return
    with removed_lock(Path(str(path) + ".lock"), LOCK_TIMEOUT_S):
        if not path.exists():
            create_whole(path)
        if half := half_made(path):
            raise HalfMadeStore(half)
        yield


class HalfMadeStore(Exception):
    """A sqlite store whose creation was interrupted (half_made): MLflow cannot open or repair it."""


def create_whole(path: Path) -> None:
    """A new sqlite store made whole or not at all (issue 39.7: a Ctrl-C during MLflow's migrations
    left one that no later run could open): its schema is made under a temporary name, by the
    means MLflow makes it (or copied from the one this MLflow made before: empty_store), then linked
    into place. os.link never replaces a store another process (one that takes no lock: mlflow ui)
    made at the same moment. Called under the store's lock: a temporary file found is one a killed
    creation left."""
    import shutil

    from mlflow.store.db.utils import _initialize_tables, create_sqlalchemy_engine_with_retry

    temporary = path.with_name(f"{path.name}.new")
    for left in (temporary, path.with_name(f"{temporary.name}-journal")):  # sqlite would roll a journal into it
        left.unlink(missing_ok=True)
    kept = empty_store()
    with contextlib.suppress(OSError):  # none kept, or not readable: MLflow migrates, below
        if kept and whole_schema(kept):
            shutil.copyfile(kept, temporary)
    if not whole_schema(temporary):
        temporary.unlink(missing_ok=True)  # a copy cut short
        engine = create_sqlalchemy_engine_with_retry(SQLITE + str(temporary))  # its own engine: not in MLflow's caches
        _initialize_tables(engine)
        engine.dispose()
        if kept:
            keep_empty_store(temporary, kept)
    with contextlib.suppress(FileExistsError):
        os.link(temporary, path)
    temporary.unlink()  # (a creation that fails leaves it to the next one)


# MLflow makes a new sqlite store by running its ~70 alembic migrations, each its own transaction: ~1.5
# CPU-s and 1-5 s of sqlite syncs, for a file that is the same every time for one install of MLflow,
# SQLAlchemy and alembic. The first store made keeps a copy in the user's cache, named by those
# versions and MLflow's migration files; later new stores start as a copy of it (a few milliseconds).
EMPTY_STORE_ROOM = 64 * 1024 * 1024  # the copy (~1 MB) is kept only where this much more is free


def empty_store() -> Optional[Path]:
    """Where this install's empty store is kept: $XDG_CACHE_HOME (else ~/.cache)/bench/, named by the
    versions and migration files that make its schema; None where neither is an absolute path (a
    relative XDG_CACHE_HOME, which the XDG spec says to ignore, or no home directory)."""
    import hashlib
    from importlib.metadata import version

    import mlflow.store.db_migrations as migrations

    scripts = sorted(p.name for p in (Path(migrations.__file__).parent / "versions").glob("*.py"))
    made_by = [f"{name}=={version(name)}" for name in ("mlflow", "sqlalchemy", "alembic")]
    digest = hashlib.sha256("\n".join(made_by + scripts).encode()).hexdigest()[:16]
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    name = f"empty-mlflow-store-{version('mlflow')}-{digest}.db"
    return Path(cache, "bench", name) if os.path.isabs(cache) else None


def keep_empty_store(made: Path, kept: Path) -> None:
    """A copy of the store just made, for the next new one: only where there is room for it and 64 MiB
    more; a cache that cannot be written keeps nothing, and that is no error."""
    import shutil

    from bench.storage.local import remove_stale_temporaries

    with contextlib.suppress(OSError):
        kept.parent.mkdir(parents=True, exist_ok=True)
        remove_stale_temporaries(kept.parent, recursive=False)  # a copy a killed process left half-written
        if shutil.disk_usage(kept.parent).free >= made.stat().st_size + EMPTY_STORE_ROOM:
            write_whole(kept, lambda tmp: shutil.copyfile(made, tmp))


def whole_schema(path: Path) -> bool:
    """Whether `path` is an empty store whose migrations all ran: sqlite's quick check passes, alembic
    holds one version, no migration's `_alembic_tmp_` table is left and no experiment is in it."""
    import sqlite3

    try:
        with contextlib.closing(sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=1)) as db:
            tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            return (
                db.execute("PRAGMA quick_check").fetchone() == ("ok",)
                and len(db.execute("SELECT version_num FROM alembic_version").fetchall()) == 1
                and not any(name.startswith("_alembic_tmp_") for name in tables)
                and db.execute("SELECT COUNT(*) FROM experiments").fetchone() == (0,)
            )
    except sqlite3.Error:  # missing, not a database, another schema
        return False


def half_made(path: Path) -> Optional[str]:
    """The line naming a sqlite store whose creation was interrupted (MLflow's `_alembic_tmp_`
    tables, and no runs: nothing lost by moving it aside), else None."""
    import sqlite3

    try:
        with contextlib.closing(sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=1)) as db:
            tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            runs = "runs" in tables and db.execute("SELECT 1 FROM runs LIMIT 1").fetchone()
    except sqlite3.Error:
        return None  # MLflow says what is wrong with it
    broken = sorted(t for t in tables if t.startswith("_alembic_tmp_"))
    if runs or not broken:
        return None
    return (
        f"the MLflow store {path} was left half-made (its creation was interrupted: {', '.join(broken)}; no runs), "
        f"which MLflow cannot repair: python -m bench.tools.stale --move-aside --tracking-uri {SQLITE}{path}"
    )


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
        if (existing := client.get_experiment_by_name(name)) is None:
            path = sqlite_path(uri)
            try:
                root = (path.parent / "mlartifacts").resolve().as_uri() if path else None
                experiment_id = client.create_experiment(name, artifact_location=root)
            except Exception:  # another process created it first
                if (existing := client.get_experiment_by_name(name)) is None:
                    raise
                experiment_id = existing.experiment_id
        else:
            experiment_id = existing.experiment_id
        if existing is None or existing.tags.get(EXPERIMENT_KIND_TAG) != EXPERIMENT_KIND:
            # MLflow 3's UI opens an experiment of no kind on its GenAI overview ("Traces 0"): say it is training
            client.set_experiment_tag(experiment_id, EXPERIMENT_KIND_TAG, EXPERIMENT_KIND)
        return client, experiment_id


RETRY_DEFAULTS = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2", "MLFLOW_HTTP_REQUEST_TIMEOUT": "15"}


DATABASE_PORTS = {"postgresql": 5432, "mysql": 3306, "mssql": 1433}


def checked_uri(tracking: Any, launch_dir: Path) -> Optional[str]:
    """The tracking URI of a run (bench.tracking.store.resolve_tracking_uri; None with tracking off)
    from its tracking group (bench.config.run.TrackingConfig); a ConfigError naming
    MLFLOW_TRACKING_URI or tracking.uri when MLflow has no store for it."""
    if not tracking.enabled:
        return None
    uri = resolve_tracking_uri(tracking.uri, launch_dir)
    if accepted := unusable(uri):
        key = "MLFLOW_TRACKING_URI" if os.environ.get("MLFLOW_TRACKING_URI") else "tracking.uri"
        raise ConfigError(key, uri, accepted)
    return uri


def unusable(uri: str) -> Optional[str]:
    """What MLflow accepts, when it has no tracking store for `uri`'s scheme (its own registry,
    plugins included; a file store only where this MLflow still opens one); None when it has."""
    try:
        import mlflow.environment_variables as variables
        from mlflow.tracking._tracking_service.utils import _tracking_store_registry as registry
        from mlflow.utils.uri import get_uri_scheme
    except ImportError:  # another MLflow's layout: MLflow itself says it at the first call
        return None
    schemes = set(getattr(registry, "_registry", {}))
    allow_files = getattr(variables, "MLFLOW_ALLOW_FILE_STORE", None)  # MLflow 3 refuses ./mlruns unless set
    if allow_files is not None and not allow_files.get():
        schemes -= {"", "file"}
    try:
        registry.get_store_builder(uri)  # raises for a scheme it has no store for
        known = get_uri_scheme(uri) in schemes or uri in schemes
    except Exception:
        known = False
    if known or not schemes:
        return None
    files = "" if "file" in schemes else " (a file store only with MLFLOW_ALLOW_FILE_STORE=true)"
    return (
        f"a URI of a store MLflow can track to: {', '.join(sorted(s for s in schemes if s))}{files}, "
        "e.g. sqlite:///mlflow.db or http://host:5000"
    )


def probe(uri: str, timeout_s: float) -> Optional[str]:
    """None when the store answers (any HTTP answer will do: 404 and 401 come from a live
    server; a database server: a TCP connection) or is not a server; else why not, in a few
    words (credentials never shown). MLflow's own retries are bounded first (RETRY_DEFAULTS).

    The probe waits in a thread of its own, joined in short slices: a Ctrl-C or SIGTERM that Python
    has only flagged (it landed just before the probe's poll or recv began, or on another thread)
    does not interrupt a blocked call, which then waited out the whole timeout (once: 10 minutes)."""
    for name, value in RETRY_DEFAULTS.items():
        os.environ.setdefault(name, value)
    answer: list = []

    def wait_for_answer() -> None:
        try:
            answer.append(_probe(uri, timeout_s))
        except BaseException as exc:  # raised in the caller's thread, as before
            answer.append(exc)

    waiting = threading.Thread(target=wait_for_answer, name="bench-probe", daemon=True)
    waiting.start()
    while waiting.is_alive():
        waiting.join(0.1)
    if isinstance(answer[0], BaseException):
        raise answer[0]
    return answer[0]


def _probe(uri: str, timeout_s: float) -> Optional[str]:
    parsed = urllib.parse.urlparse(uri)
    if (scheme := parsed.scheme.split("+")[0]) in DATABASE_PORTS:
        if not parsed.hostname:  # a local socket: nothing to wait for
            return None
        try:
            with socket.create_connection((parsed.hostname, parsed.port or DATABASE_PORTS[scheme]), timeout=timeout_s):
                return None
        except OSError as exc:
            return redact(f"{type(exc).__name__}: {exc.strerror or exc}")
    if not uri.startswith(("http://", "https://")):
        return None
    url = USERINFO.sub(r"\1", uri).rstrip("/") + "/health"  # urllib takes no user:password in a URL
    try:
        with urllib.request.urlopen(url, timeout=timeout_s):
            return None
    except urllib.error.HTTPError:
        return None
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        return redact(f"{type(reason).__name__}: {reason}")


def unreachable_line(uri: str, problem: str, timeout_s: float, out_dir: object = None) -> str:
    kept = (
        f"results stay in {out_dir}: upload them later with python -m bench.tools.upload {out_dir}"
        if out_dir
        else "results stay in the run directories (python -m bench.tools.upload <dir> sends them later)"
    )
    return (
        f"MLflow server at {redact(uri)} cannot be reached ({problem}; probed for {timeout_s:g} s): "
        f"going on without tracking; {kept}"
    )


def store_problem(uri: str, timeout_s: float = 5.0) -> Optional[str]:
    """For the commands that read a store (report, compare, stale): MLflow's retries bounded, and an
    http(s) store that does not answer within `timeout_s` is one sentence instead of minutes of
    MLflow's back-off. None when the store can be read."""
    if accepted := unusable(uri):
        return f"MLflow has no tracking store for {redact(uri)}: accepted {accepted}"
    if (path := sqlite_path(uri)) is not None:  # a local file: half-made, or fine (a missing one is made)
        return half_made(path)
    if (problem := probe(uri, timeout_s)) is None:
        return None
    return (
        f"the MLflow server at {redact(uri)} cannot be reached ({problem}; probed for {timeout_s:g} s): "
        "start it, or name another store with --tracking-uri or MLFLOW_TRACKING_URI"
    )


def missing_sqlite_store(uri: str) -> Optional[str]:
    """The file of a sqlite store that does not exist, else None: a command that only reads (report,
    stale) says so instead of opening it, which makes a 1 MB store and logs its table creation."""
    path = sqlite_path(uri)
    return str(path) if path is not None and not path.exists() else None


def store_error(exc: BaseException) -> str:
    """A store's exception in one line: the innermost cause ("OperationalError: database or disk
    is full", not MLflow's and SQLAlchemy's wrappers around it), credentials never shown."""
    seen, inner = set(), exc
    found: Optional[BaseException] = exc
    while found is not None and id(found) not in seen:
        seen.add(id(found))
        inner = found
        found = getattr(found, "orig", None) or found.__cause__ or found.__context__
    lines = [line for line in redact(str(inner)).splitlines() if line.strip()]
    return f"{type(inner).__name__}: {lines[0].strip() if lines else ''}".rstrip(": ")
