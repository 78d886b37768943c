"""Every error bench tells a user about, and the exit code it ends with.

One hierarchy: the app catches `BenchError` once, prints `[ERROR] <str(exc)>` (one sentence,
no traceback) and exits with `exc.exit_code`. Anything else that escapes a run is a bug or an
environment failure and ends as "run failed" (exit 1) with the traceback in error.txt.
Torch-free: every layer may raise these.
"""

from __future__ import annotations

import sys
from typing import Any, Optional

from bench.secrets import has_userinfo, looks_secret, redact

EXIT_FAILED = 1  # the run started and failed
EXIT_CONFIG = 2  # the config, the data location or the device cannot run this
EXIT_SIGINT = 130  # Ctrl-C (128 + SIGINT)
EXIT_SIGTERM = 143  # terminated (128 + SIGTERM)


def print_error(message: str, exit_code: int = EXIT_CONFIG) -> int:
    """The one [ERROR] line on stderr (redacted), flushed: what a refusal or a failure says. Returns
    `exit_code`, the code the command ends with (`return print_error(...)`)."""
    print(f"[ERROR] {redact(message)}", file=sys.stderr, flush=True)
    return exit_code


class BenchError(Exception):
    """An error with one sentence for the user (str()) and the exit code it ends the run with.
    `key`, `value`, `accepted`: the config key it is about, its value and what is accepted, for a
    program to read (bench.api); None where the error is not about one key's value."""

    exit_code = EXIT_FAILED

    def __init__(self, sentence: str, key: Optional[str] = None, value: Any = None, accepted: Optional[str] = None):
        self.key, self.value, self.accepted = key, value, accepted
        super().__init__(sentence)


class ConfigError(BenchError, ValueError):
    """A config value that cannot work: names the key, the value and what is accepted."""

    exit_code = EXIT_CONFIG

    def __init__(self, key: str, value: Any, accepted: str):
        # a secret-looking key or a URL with user:password is never echoed
        self.hidden = looks_secret(key) or (isinstance(value, str) and has_userinfo(value))
        sentence = f"{key}={'<hidden>' if self.hidden else repr(value)} is not valid: accepted {accepted}."
        super().__init__(sentence, key, value, accepted)


class ConfigProblem(BenchError, ValueError):
    """A config that cannot be used for a reason that is not one key's value (a file that is
    not there, a syntax error in an override); str() is the sentence shown, `key` and `value`
    the key it names, when it names one."""

    exit_code = EXIT_CONFIG


class DeviceError(BenchError):
    """No usable device for the requested run (no CUDA and allow_cpu=false, too few GPUs)."""

    exit_code = EXIT_CONFIG


class DataError(BenchError):
    """A dataset that cannot be read as configured; names the path and what was expected."""


class StorageError(BenchError):
    """An object store that cannot be used: names the endpoint, the bucket and the reason."""


class CheckpointError(BenchError):
    """A training checkpoint that cannot be read (missing, damaged, not bench's)."""


class WorkerFailure(BenchError):
    """A launched worker died, hung past the timeout, or raised; names the rank and why."""


class ReportError(BenchError):
    """A sweep that cannot be read by the report."""

    exit_code = EXIT_CONFIG


class Interrupted(BaseException):
    """SIGTERM/SIGINT during a run: raised in the main thread so the run ends KILLED."""

    def __init__(self, signal_name: str):
        self.signal_name = signal_name
        super().__init__(f"terminated by signal {signal_name}")

    @property
    def exit_code(self) -> int:
        return EXIT_SIGINT if self.signal_name == "SIGINT" else EXIT_SIGTERM


def stopped_by(exc: BaseException) -> "tuple[str, int] | None":
    """(reason, exit code) when a run was stopped by Ctrl-C or a signal."""
    import signal

    if isinstance(exc, KeyboardInterrupt):
        return str(exc) or "KeyboardInterrupt", EXIT_SIGINT
    # torch's elastic agent turns a signal into SignalException
    if (sigval := getattr(exc, "sigval", None)) is not None:
        exc = Interrupted(signal.Signals(sigval).name)
    if isinstance(exc, Interrupted):
        return str(exc), exc.exit_code
    return None


def interruption_in(exc: BaseException) -> "Interrupted | None":
    """The Ctrl-C or SIGTERM behind `exc`, if one is: a signal raised inside a library (Hydra's
    compose, a finally block) can come out as another error whose context is the interruption.
    Every cause and every context is searched: OmegaConf sets causes where a tracer runs (coverage,
    a debugger) or OC_CAUSE=1, and following causes alone missed the context holding the signal."""
    seen, behind = set(), [exc]
    while behind:
        current = behind.pop()
        if isinstance(current, Interrupted):
            return current
        if isinstance(current, KeyboardInterrupt):
            return Interrupted("SIGINT")
        if id(current) not in seen:
            seen.add(id(current))
            behind += [linked for linked in (current.__context__, current.__cause__) if linked]  # the cause first
    return None
