"""What counts as a secret, and how it is kept out of logs, files and MLflow. Import-free.

Credentials belong in the environment (AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY or AWS_PROFILE
for S3, MLFLOW_TRACKING_USERNAME / MLFLOW_TRACKING_PASSWORD for an MLflow server), never in a
config: Hydra saves the composed config and the overrides in .hydra/, and bench logs the config
to MLflow. So the command line is checked before Hydra runs, secret-looking config keys are
never logged, URLs are shown without their user:password, and environment variables are
recorded only from an allow-list of speed-relevant prefixes, minus anything that looks secret.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Iterable, List, Optional

CONFIG_MARKERS = ("secret", "password", "passwd", "token", "access_key", "credential", "api_key", "auth")
ENV_MARKERS = CONFIG_MARKERS + ("key", "pass", "pwd", "session", "cookie", "signature", "private", "cert")
# scheme://userinfo@host: anything between :// and an @ before the first /
USERINFO = re.compile(r"([a-zA-Z][a-zA-Z0-9+.\-]*://)[^/\s@]+@")
# NAME=value inside a value (a setup line of hydra/launcher=slurm: `export AWS_SECRET_ACCESS_KEY=...`)
ASSIGNMENT = re.compile(r"\b([A-Za-z_][A-Za-z0-9_]*)=")
CREDENTIALS_HOME = ("credentials go in the environment: AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY or AWS_PROFILE "
                    "for S3, MLFLOW_TRACKING_USERNAME / MLFLOW_TRACKING_PASSWORD for an MLflow server")


def looks_secret(key: str) -> bool:
    """A config key whose value must never be shown or logged."""
    lowered = key.lower()
    return any(marker in lowered for marker in CONFIG_MARKERS)


def looks_secret_env(name: str) -> bool:
    """An environment variable whose value must never be recorded (stricter: *KEY*, *AUTH*, ...)."""
    lowered = name.lower()
    return any(marker in lowered for marker in ENV_MARKERS)


def has_userinfo(text: str) -> bool:
    return bool(USERINFO.search(text))


def redact(text: str) -> str:
    """http://user:password@host -> http://***@host, anywhere in `text`."""
    return USERINFO.sub(r"\1***@", text)


def command_line_problem(args: List[str]) -> Optional[str]:
    """The sentence refusing a credential typed into a `key=value` override, before Hydra writes
    it to .hydra/ or logs it (None when there is none). The value is never echoed."""
    for arg in args:
        key, sep, value = arg.partition("=")
        if not sep:
            continue
        key = key.lstrip("+~")
        if looks_secret(key):
            return (f"{key}=<hidden> is not valid: accepted no credential on the command line "
                    f"(it would be saved in .hydra/ and logged); {CREDENTIALS_HOME}.")
        if has_userinfo(value):
            return (f"{key}=<hidden: it carries credentials> is not valid: accepted a URL without user:password; "
                    f"{CREDENTIALS_HOME}.")
        assigned = [name for name in ASSIGNMENT.findall(value) if looks_secret_env(name)]
        if assigned:  # hydra.launcher.setup=["export MLFLOW_TRACKING_PASSWORD=..."]: saved in the job script
            return (f"{key}=<hidden: it sets {assigned[0]}> is not valid: accepted no credential on the command "
                    f"line (it would be saved in .hydra/ and the job's script); {CREDENTIALS_HOME} of the "
                    f"submitting shell, or a file the job sources.")
    return None


SECRET_YAML_VALUE = re.compile(r"^(\s*-?\s*[+~]?[\w.]*(?:" + "|".join(CONFIG_MARKERS) + r")[\w.]*\s*[:=]\s*)(.+)$",
                               re.IGNORECASE | re.MULTILINE)


def scrub(paths: Iterable[Path]) -> None:
    """Rewrite files (Hydra's .hydra/*.yaml of a run refused for a secret in a config file) with
    URLs' user:password and secret-looking keys' values hidden."""
    for path in paths:
        try:
            text = path.read_text()
            cleaned = SECRET_YAML_VALUE.sub(r"\1<hidden>", redact(text))
            if cleaned != text:
                path.write_text(cleaned)
        except OSError:
            continue
