"""Each run's and each sweep's own directory, even when two start in the same second.

Hydra's default is `outputs/<date>/<time>` (`multirun/<date>/<time>` for a sweep): two commands
started in the same second from one directory shared it, and with it their pid files, logs and
results. `reserve(base)` makes `<base>/<date>/<time>` with os.mkdir, which fails when the
directory exists, so exactly one process gets it; the next one gets `<time>-2`, then `-3`, ...
`python -m bench` reserves one for a command that runs and hands it to Hydra as `hydra.run.dir`
(`hydra.sweep.dir` with -m), unless the command line names one (that one is the user's, used as
it is); `bench.api.run` reserves its default the same way. A process started by an outside
launcher (torchrun sets RANK) keeps Hydra's default: its ranks are one run.

A command refused before it ran (exit 2) removes the directory it reserved, and the date folder
and `outputs/` when it made them and they are empty (`discard`): a refusal leaves nothing.
Imports nothing of bench's: the console script calls it before Hydra starts.
"""

from __future__ import annotations

import itertools
import os
import re
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import List, Optional, Sequence

RUN_BASE, SWEEP_BASE = "outputs", "multirun"  # Hydra 1.3's defaults: <base>/${now:%Y-%m-%d}/${now:%H-%M-%S}
# flags after which Hydra does not run the task (it prints or exits), so no directory is needed
NOT_RUNNING = {"--cfg", "-c", "--help", "-h", "--hydra-help", "--info", "-i", "--version", "--shell-completion", "-sc"}
NOT_RUNNING_PREFIXES = ("--cfg=", "--info=", "--shell-completion=", "--experimental-rerun")
RESERVED_NAME = re.compile(r"^(\d{4})-(\d{2})-(\d{2})/(\d{2})-(\d{2})-(\d{2})(-\d+)?$")


@dataclass
class Reserved:
    path: Path  # the directory this process now owns
    made: List[Path] = field(default_factory=list)  # what reserve() created: `path`, then its new parents upwards


def reserve(base: Path, now: Optional[float] = None) -> Reserved:
    """`base/<date>/<time>` (local time, as Hydra's `now`), or `<time>-N` for the first N free."""
    stamp = time.localtime(now)
    day = Path(base) / time.strftime("%Y-%m-%d", stamp)
    hms = time.strftime("%H-%M-%S", stamp)
    made: List[Path] = []
    _make_parents(day, made)
    for n in itertools.count(1):
        path = day / (hms if n == 1 else f"{hms}-{n}")
        while True:
            try:
                os.mkdir(path)
            except FileExistsError:
                break  # another process's: try the next suffix
            except FileNotFoundError:  # a refused command removed the date folder it had just made
                _make_parents(day, made)
                continue
            return Reserved(path, [path, *made])
    raise AssertionError("unreachable")  # itertools.count never ends


def _make_parents(path: Path, made: List[Path]) -> None:
    """mkdir -p, noting (deepest first) each directory this call created."""
    if path.is_dir():
        return
    _make_parents(path.parent, made)
    try:
        os.mkdir(path)
    except FileExistsError:
        return
    made.insert(0, path)


def discard(reserved: Reserved) -> None:
    """Remove what reserve() made: the directory with what this command wrote in it, then each
    parent it created while that is empty (another command may have reserved beside it since)."""
    shutil.rmtree(reserved.path, ignore_errors=True)
    for parent in reserved.made[1:]:
        try:
            os.rmdir(parent)
        except OSError:
            return


def for_command(args: Sequence[str]) -> Optional[Reserved]:
    """The directory `python -m bench <args>` gets, reserved; None when the command line names one,
    Hydra will not run the task, an outside launcher started this process, or the directory cannot
    be made here (Hydra then reports that in its one line, as it always did)."""
    multirun = any(arg in ("-m", "--multirun") for arg in args)
    key = "hydra.sweep.dir" if multirun else "hydra.run.dir"
    named = any(arg.lstrip("+~").split("=", 1)[0] == key for arg in args)
    quiet = any(arg in NOT_RUNNING or arg.startswith(NOT_RUNNING_PREFIXES) for arg in args)
    if named or quiet or all(name in os.environ for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK")):
        return None
    try:
        return reserve(Path(SWEEP_BASE if multirun else RUN_BASE))
    except OSError:
        return None


def override(reserved: Reserved, args: Sequence[str]) -> str:
    """The Hydra override that puts the command in its reserved directory."""
    key = "hydra.sweep.dir" if any(arg in ("-m", "--multirun") for arg in args) else "hydra.run.dir"
    return f"{key}={reserved.path.as_posix()}"


def stamp_of(path: Path) -> Optional[str]:
    """`20261127-171652-2` for a reserved `.../2026-11-27/17-16-52-2` (None for a directory of another
    name): what names a sweep's MLflow parent, as distinct as the directory."""
    found = RESERVED_NAME.match(f"{Path(path).parent.name}/{Path(path).name}")
    if not found:
        return None
    year, month, day, hour, minute, second, suffix = found.groups()
    return f"{year}{month}{day}-{hour}{minute}{second}{suffix or ''}"
