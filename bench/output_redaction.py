"""bench.secrets.redact on everything a process prints or logs: sys.stdout / sys.stderr (the
[ERROR] lines, Python's warnings, what a library prints) and every log record (bench.log,
rank<N>.log and the console alike). Installed once per process, first thing: by the console
script before Hydra sets up its log handlers, by a job that runs in a process of its own
(submitit), by each rank, and by the tools that talk to MLflow. Import-free (bench.secrets only).
"""

from __future__ import annotations

import logging
import sys
from typing import Any, Iterable

from bench.secrets import redact


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


def install() -> None:
    """Idempotent: a second call wraps nothing twice."""
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if stream is not None and not isinstance(stream, RedactingStream):
            setattr(sys, name, RedactingStream(stream))
    current = logging.getLogRecordFactory()
    if not getattr(current, "redacting", False):
        logging.setLogRecordFactory(_redacting_record_factory(current))
