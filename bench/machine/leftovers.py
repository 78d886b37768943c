"""Temporary directories that a killed command cannot remove itself, removed by the next one.

`owned_tempdir(prefix)` makes `<system temp dir>/<prefix>XXXXXXXX` with an owner file in it
(`.bench-owner`: the pid and its start time). A command removes its own directory when it ends
(Ctrl-C and SIGTERM included); after a SIGKILL, the next command that makes one of the same
kind calls `clean_leftovers(prefix)` first, which removes every such directory whose owner is
gone (no process with that pid, or one started at another time: a reused pid). A directory
without an owner file, or whose owner runs, is left alone.

`semaphores_noted_in(path)`: the named semaphores multiprocessing makes meanwhile (the elastic
launcher's, /dev/shm/sem.mp-*) are listed in the directory. multiprocessing's resource tracker
removes them when their maker dies, but a SIGKILL of the whole process group kills the tracker
too: the next clean_leftovers unlinks those its dead owner listed."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Iterator, List, Optional

import psutil

from bench.machine.children import process_identity

OWNER_FILE = ".bench-owner"
SEMAPHORES_FILE = ".bench-semaphores"


def owned_tempdir(prefix: str, parent: Optional[str] = None) -> Path:
    """A new directory under `parent` (default: the system temp dir), marked as this process's."""
    path = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
    (path / OWNER_FILE).write_text(f"{os.getpid()} {psutil.Process().create_time()}\n")
    return path


def owner_gone(path: Path) -> bool:
    """Is the directory's owner (its owner file) no longer running? False without an owner file."""
    try:
        pid, started = (path / OWNER_FILE).read_text().split()[:2]
        owner = (int(pid), float(started))
    except (OSError, ValueError):
        return False
    return process_identity(owner[0]) != owner


def clean_leftovers(prefix: str, parent: Optional[str] = None) -> List[Path]:
    """Remove the `prefix*` directories under `parent` (default: the system temp dir) whose owner
    is gone; the paths removed."""
    base = Path(parent or tempfile.gettempdir())
    removed: List[Path] = []
    try:
        candidates = sorted(base.glob(prefix + "*"))
    except OSError:
        return removed
    for path in candidates:
        if path.is_dir() and not path.is_symlink() and owner_gone(path):
            _unlink_semaphores(path / SEMAPHORES_FILE)
            shutil.rmtree(path, ignore_errors=True)
            if not path.exists():
                removed.append(path)
    return removed


@contextlib.contextmanager
def semaphores_noted_in(path: Path) -> Iterator[None]:
    """While inside: every named semaphore this process registers with multiprocessing's resource
    tracker is also listed in `path`/.bench-semaphores (for clean_leftovers after a SIGKILL)."""
    from multiprocessing import resource_tracker

    registered = resource_tracker.register

    def register(name: Any, rtype: str) -> None:
        if rtype == "semaphore":
            with contextlib.suppress(OSError), (path / SEMAPHORES_FILE).open("a") as listed:
                listed.write(f"{name}\n")
        registered(name, rtype)

    resource_tracker.register = register
    try:
        yield
    finally:
        resource_tracker.register = registered


def _unlink_semaphores(listed: Path) -> None:
    try:
        names = listed.read_text().split()
    except OSError:
        return
    import _multiprocessing

    for name in names:
        with contextlib.suppress(OSError):
            _multiprocessing.sem_unlink(name)  # gone already (the tracker removed it): nothing to do
