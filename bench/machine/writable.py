"""Whether a path can be a directory this process writes into, asked before any work: every
directory key bench writes into (storage.root and what goes under it, doctor.out, prepare's
--dst, a report's --out, ...) is refused in one line when it cannot be one, instead of failing
once a run has started (a NotADirectoryError after the measurement, a FAILED run).

Nothing is made: the nearest part of the path that exists must be a directory (made if missing
below it) that this user can write: a probe file (an unnamed temporary, gone when closed) asks
the filesystem itself, so a read-only mount is found where permission bits (root's) would not
show it. A full disk is not this check's: the free-space checks say how much is missing.

`write_whole` is the one way bench writes a file that a reader may see: a temporary name, then a rename.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any, Callable, Optional, TypeVar, Union

from bench.errors import ConfigError

WRITABLE = "a directory this user can write (made if missing)"
T = TypeVar("T")


def directory_problem(path: Union[str, Path]) -> Optional[str]:
    """Why `path` cannot be a directory written into ("<where> is a file", "<where> is not
    writable (<reason>)"), or None when it can. Makes nothing."""
    existing = Path(os.path.abspath(path))
    try:
        while not existing.exists() and existing != existing.parent:
            existing = existing.parent
    except PermissionError as exc:  # a folder on the way this user may not enter (3.11's exists() raises it)
        return f"{existing.parent} is not writable ({exc.strerror})"
    if not existing.is_dir():
        return f"{existing} is a file"
    try:  # the filesystem's own answer: permissions, a read-only mount, no inode left
        with tempfile.TemporaryFile(dir=existing):
            pass
    except OSError as exc:
        return f"{existing} is not writable ({exc.strerror or exc})"
    return None


def check_writable_dir(key: str, value: Any, path: Optional[Union[str, Path]] = None) -> None:
    """ConfigError naming `key` and its `value` when `path` (default: the value) cannot be a
    directory this process writes into."""
    if problem := directory_problem(value if path is None else path):
        raise ConfigError(key, value, f"{WRITABLE}; {problem}")


def writable_dir_refusal(key: str, value: Any, path: Optional[Union[str, Path]] = None) -> Optional[str]:
    """check_writable_dir's sentence, for the commands that print their own: None when it can be written."""
    try:
        check_writable_dir(key, value, path)
    except ConfigError as exc:
        return str(exc)
    return None


def write_whole(path: Path, write: Callable[[Path], T]) -> T:
    """`write(tmp)` fills `<name>.tmp<pid>` beside `path`, then it is renamed onto `path`: a reader sees the
    whole file or none, and a failed write leaves nothing behind (a killed one: see
    bench.storage.local.remove_stale_temporaries). Returns what `write` returned."""
    tmp = path.with_name(f"{path.name}.tmp{os.getpid()}")
    try:
        done = write(tmp)
        os.replace(tmp, path)
        return done
    finally:
        tmp.unlink(missing_ok=True)
