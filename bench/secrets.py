"""What counts as a secret, and the one rule that keeps it out of every output. Import-free.

Credentials belong in the environment (AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY or AWS_PROFILE
for S3, MLFLOW_TRACKING_USERNAME / MLFLOW_TRACKING_PASSWORD for an MLflow server), never in a
config: Hydra saves the composed config and the overrides in .hydra/, and bench logs the config
to MLflow. So the command line is checked before Hydra runs, secret-looking config keys are
never logged, and environment variables are recorded only from an allow-list of speed-relevant
prefixes, minus anything that looks secret.

`redact` is the one rule every output goes through (stdout/stderr and logs via
redact_output, run files via bench.results.write_text, .hydra/ via `scrub`, MLflow via
the tracker): it shows as *** the user:password of a URL (with or without a scheme:
`u:pw@host:port`), the values of query parameters that carry credentials (?sig=, &token=,
X-Amz-*, ...) and any value of a secret-looking environment variable of this process.
"""

from __future__ import annotations

import logging
import os
import re
import sys
from contextlib import suppress
from pathlib import Path
from typing import Any, Dict, Iterable, List, Mapping, Optional, Tuple

REDACTED = "***"
# what marks a config key as a credential's, as a regex alternation (SECRET_YAML_VALUE finds them in a file too)
CONFIG_MARKERS = "secret|password|passwd|pwd|token|access_key|credential|api_key|apikey|auth|jwt|signature|private_key"
# whole words of a key (split at . _ -) that name a credential too short to be a marker: `checkpoint.on_signal` is fine
CONFIG_WORDS = frozenset({"pass", "pw", "key", "sig"})
ENV_MARKERS = re.compile(CONFIG_MARKERS + "|key|pass|session|cookie|private|cert")
# scheme://userinfo@host: anything between :// and an @ before the first /
USERINFO = re.compile(r"([a-zA-Z][a-zA-Z0-9+.\-]*://)[^/\s@]+@")
# user:password@host without a scheme (a c10d endpoint `u:pw@host:29400`); not after / or : (a URL's path, a scheme)
BARE_USERINFO = re.compile(r"(?<![\w.+\-~%/:@])[\w.+\-~%!$]+:[^\s@/'\"]+@(?=[\w\-.\[])")
QUERY_PARAM = re.compile(r"([?&;])([\w.\-]+)=([^&#\s'\"<>;]*)")
# query parameters that carry credentials: every name looks_secret knows (sig, token, key, auth, password, ...;
# secret_query_name asks it), X-Amz-*, and these two it does not (an OAuth code, a session id)
SECRET_QUERY_NAMES = frozenset({"code", "session"})
# ${oc.env:NAME} / ${oc.env:NAME,default}: a config value that reads an environment variable
ENV_REFERENCE = re.compile(r"\$\{\s*oc\.env\s*:\s*([^,}\s]+)")
SECRET_ENV_MIN_CHARS = 8  # shorter values ("1", "true") would hide ordinary words
# NAME=value inside a value (a setup line of hydra/launcher=slurm: `export AWS_SECRET_ACCESS_KEY=...`)
ASSIGNMENT = re.compile(r"\b([A-Za-z_][A-Za-z0-9_]*)=")
CREDENTIALS_HOME = (
    "credentials go in the environment: AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY or AWS_PROFILE "
    "for S3, MLFLOW_TRACKING_USERNAME / MLFLOW_TRACKING_PASSWORD for an MLflow server"
)


def looks_secret(key: str) -> bool:
    """A config key whose value must never be shown or logged."""
    lowered = key.lower()
    return bool(re.search(CONFIG_MARKERS, lowered)) or not CONFIG_WORDS.isdisjoint(
        re.split(r"[._\-]", lowered.lstrip("+~"))
    )


def looks_secret_env(name: str) -> bool:
    """An environment variable whose value must never be recorded (stricter: *KEY*, *AUTH*, ...)."""
    return bool(ENV_MARKERS.search(name.lower()))


def secret_query_name(name: str) -> bool:
    lowered = name.lower()
    return lowered in SECRET_QUERY_NAMES or lowered.startswith("x-amz-") or looks_secret(lowered)


def has_userinfo(text: str) -> bool:
    return bool(USERINFO.search(text) or BARE_USERINFO.search(text))


def has_secret_query(text: str) -> bool:
    return any(secret_query_name(match.group(2)) for match in QUERY_PARAM.finditer(text))


def environ_items() -> List[Tuple[str, str]]:
    """os.environ's (name, value) pairs, safe while another thread changes it (MLflow's telemetry
    thread does): iterating os.environ itself raises KeyError when a name goes away meanwhile."""
    names = list(os.environ)  # one copy of the keys
    return [(name, value) for name in names for value in [os.environ.get(name)] if value is not None]


def secret_env_values() -> List[str]:
    """Values of this process's secret-looking environment variables, longest first (a path is not
    a secret: PWD, SSH_AUTH_SOCK and friends are left alone)."""
    values = {
        value
        for name, value in environ_items()
        if looks_secret_env(name) and len(value) >= SECRET_ENV_MIN_CHARS and not value.startswith(("/", "~", "."))
    }
    return sorted(values, key=len, reverse=True)


def _hide_query_value(match: "re.Match[str]") -> str:
    sep, name, value = match.groups()
    return f"{sep}{name}={REDACTED}" if value and secret_query_name(name) else match.group(0)


def redact(text: str) -> str:
    """`text` with every credential the rule knows shown as *** (see the module's docstring)."""
    if not text:
        return text
    for value in secret_env_values():
        text = text.replace(value, REDACTED)
    text = USERINFO.sub(r"\1" + REDACTED + "@", text)
    text = BARE_USERINFO.sub(REDACTED + "@", text)
    return QUERY_PARAM.sub(_hide_query_value, text)


def command_line_problem(args: List[str]) -> Optional[str]:
    """The sentence refusing a credential typed into a `key=value` override, before Hydra writes
    it to .hydra/ or logs it (None when there is none). The value is never echoed."""
    for arg in args:
        key, sep, value = arg.partition("=")
        if not sep:
            continue
        key = key.lstrip("+~")
        if looks_secret(key):
            return (
                f"{key}=<hidden> is not valid: accepted no credential on the command line "
                f"(it would be saved in .hydra/ and logged); {CREDENTIALS_HOME}."
            )
        if has_userinfo(value) or has_secret_query(value) or redact(value) != value:
            return (
                f"{key}=<hidden: it carries credentials> is not valid: accepted a URL without user:password "
                f"or credentials in its query (sig, token, X-Amz-* ... parameters); {CREDENTIALS_HOME}."
            )
        # resolved, it would be the run name, a param, a line of run_summary.json
        if read := [name for name in ENV_REFERENCE.findall(value) if looks_secret_env(name)]:
            return (
                f"{key}='${{oc.env:{read[0]}}}' is not valid: accepted no secret-looking environment variable "
                f"in a config value (its value would be logged and saved with the run); {CREDENTIALS_HOME}."
            )
        # hydra.launcher.setup=["export MLFLOW_TRACKING_PASSWORD=..."]: saved in the job script
        if assigned := [name for name in ASSIGNMENT.findall(value) if looks_secret_env(name)]:
            return (
                f"{key}=<hidden: it sets {assigned[0]}> is not valid: accepted no credential on the command "
                f"line (it would be saved in .hydra/ and the job's script); {CREDENTIALS_HOME} of the "
                f"submitting shell, or a file the job sources."
            )
    return None


SECRET_YAML_VALUE = re.compile(
    r"^(\s*-?\s*[+~]?[\w.]*(?:" + CONFIG_MARKERS + r")[\w.]*\s*[:=]\s*)(.+)$", re.IGNORECASE | re.MULTILINE
)


def scrub(paths: Iterable[Path]) -> None:
    """Rewrite files (Hydra's .hydra/*.yaml and multirun.yaml) through redact(), with the values
    of secret-looking keys hidden too: a config file may hold what the command line may not."""
    for path in paths:
        with suppress(OSError):
            text = path.read_text()
            cleaned = SECRET_YAML_VALUE.sub(r"\1<hidden>", redact(text))
            if cleaned != text:
                path.write_text(cleaned)


def flatten(tree: Mapping[str, Any], prefix: str = "") -> Dict[str, Any]:
    """{"a": {"b": 1}} -> {"a.b": 1}; lists stay whole; keys that look secret are dropped."""
    flat: Dict[str, Any] = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if looks_secret(name):
            continue
        if isinstance(value, Mapping):
            flat.update(flatten(value, name + "."))
        else:
            flat[name] = value
    return flat


class RedactingStream:
    """A text stream whose writes go through redact(); everything else is the wrapped stream's."""

    def __init__(self, stream: Any):
        self._stream = stream

    def write(self, text: Any) -> int:
        self._stream.write(redact(text) if isinstance(text, str) else text)
        return len(text)

    def writelines(self, lines: Iterable[str]) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def _redacting_record_factory(make_record: Any) -> Any:
    def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = make_record(*args, **kwargs)
        try:
            message = record.getMessage()
        except Exception:  # a bad format string: logging reports it as it always did
            return record
        cleaned = redact(message)
        if cleaned != message:
            record.msg, record.args = cleaned, ()
        if record.exc_info and not record.exc_text:  # the formatter uses exc_text when it is set
            record.exc_text = redact(logging.Formatter().formatException(record.exc_info))
        if record.stack_info:
            record.stack_info = redact(record.stack_info)
        return record

    factory.redacting = True  # type: ignore[attr-defined]
    return factory


def redact_output() -> None:
    """redact() on everything this process prints or logs: sys.stdout / sys.stderr (the [ERROR] lines,
    Python's warnings, what a library prints) and every log record (bench.log, rank<N>.log and the
    console alike). Installed once per process, first thing: by the console script before Hydra sets
    up its log handlers, by a job that runs in a process of its own (submitit), by each rank, and by
    the tools that talk to MLflow. Idempotent: a second call wraps nothing twice."""
    for name in ("stdout", "stderr"):
        if (stream := getattr(sys, name)) is not None and not isinstance(stream, RedactingStream):
            setattr(sys, name, RedactingStream(stream))
    current = logging.getLogRecordFactory()
    if not getattr(current, "redacting", False):
        logging.setLogRecordFactory(_redacting_record_factory(current))
