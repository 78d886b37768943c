"""Is the tracking server there? A short probe before a run (once per sweep) instead of MLflow's
retries: against a server that cannot be reached, MLflow's defaults spend minutes in back-off at
the first call and again at the next. Only http(s) stores are probed: a sqlite file is local.

MLflow's own retries are bounded too, for a server that goes away during a run: unless the
user set them, MLFLOW_HTTP_REQUEST_MAX_RETRIES=2 and MLFLOW_HTTP_REQUEST_TIMEOUT=15 s.
"""

from __future__ import annotations

import logging
import os
import urllib.error
import urllib.request
from typing import Optional

from bench.secrets import USERINFO, redact

RETRY_DEFAULTS = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2", "MLFLOW_HTTP_REQUEST_TIMEOUT": "15"}


def bound_mlflow_retries() -> None:
    for name, value in RETRY_DEFAULTS.items():
        os.environ.setdefault(name, value)


def probe(uri: str, timeout_s: float) -> Optional[str]:
    """None when the store answers (any HTTP answer will do: 404 and 401 come from a live
    server) or is not a server; else why not, in a few words (credentials never shown)."""
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
    bound_mlflow_retries()
    problem = probe(uri, timeout_s)
    if problem is None:
        return None
    return (
        f"the MLflow server at {redact(uri)} cannot be reached ({problem}; probed for {timeout_s:g} s): "
        "start it, or name another store with --tracking-uri or MLFLOW_TRACKING_URI"
    )


def missing_sqlite_store(uri: str) -> Optional[str]:
    """The file of a sqlite store that does not exist, else None: a command that only reads (report,
    stale) says so instead of opening it, which makes a 1 MB store and logs its table creation."""
    if not uri.startswith("sqlite:///"):
        return None
    path = uri[len("sqlite:///") :].split("?", 1)[0]
    return path if path and path != ":memory:" and not os.path.exists(path) else None


def quiet_store_errors() -> None:
    """MLflow's sqlite store logs every database error with two SQLAlchemy tracebacks (ERROR,
    mlflow.store.db.utils) before raising it: bench says it once, in one line (store_error)."""
    logging.getLogger("mlflow.store.db.utils").setLevel(logging.CRITICAL)


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
