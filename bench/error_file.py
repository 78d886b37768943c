"""error.txt, even on a full disk: when a run starts it reserves room for the file in its
directory (RESERVE, a hidden file of SIZE bytes); when it fails it gives the room back and writes
the reason (the traceback, or the one-line reason) there. The reservation goes when the run ends,
either way (a run killed with SIGKILL leaves it in its own directory)."""

from __future__ import annotations

import logging
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from bench.secrets import redact

RESERVE = ".error.txt.reserve"
SIZE = 16 * 1024  # a traceback of a few KiB; a longer one keeps its end (the exception)

log = logging.getLogger("bench")


def reserve(out_dir: Path) -> None:
    """Hold SIZE bytes in `out_dir` for error.txt (nothing held when the disk is full already)."""
    path = out_dir / RESERVE
    try:
        with open(path, "wb") as fh:
            fh.write(b"\0" * SIZE)
            fh.flush()
    except OSError:
        path.unlink(missing_ok=True)


@contextmanager
def room_kept(out_dir: Path) -> Iterator[None]:
    """reserve() while a run runs, release() when it ends, however it ends."""
    reserve(out_dir)
    try:
        yield
    finally:
        release(out_dir)


def release(out_dir: Path) -> None:
    try:
        (out_dir / RESERVE).unlink(missing_ok=True)
    except OSError as exc:
        log.debug("could not remove %s: %s", out_dir / RESERVE, exc)


def write_error(out_dir: Path, text: str) -> Path:
    """error.txt with `text` (redacted; its last SIZE bytes when longer), written in the room the
    run reserved; raises OSError when even that cannot be done."""
    release(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    data = redact(text).encode()[-SIZE:]
    path = out_dir / "error.txt"
    path.write_bytes(data if data.endswith(b"\n") else data + b"\n")
    return path
