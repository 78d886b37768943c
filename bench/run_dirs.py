"""Each run's and each sweep's own directory, even when two start in the same second.

Hydra's default is `outputs/<date>/<time>` (`multirun/<date>/<time>` for a sweep): two commands
started in the same second from one directory shared it, and with it their pid files, logs and
results. `reserve(base)` makes `<base>/<date>/<time>` with os.mkdir, which fails when the
directory exists, so exactly one process gets it; the next one gets `<time>-2`, then `-3`, ...
`python -m bench` reserves one for a command that runs and hands it to Hydra as `hydra.run.dir`
(`hydra.sweep.dir` with -m), unless the command line names one; `bench.api.run` reserves its
default the same way. A process started by an outside launcher (torchrun sets RANK) keeps Hydra's
default: its ranks are one run.

A directory the command line names is the user's, used as it is, by one run at a time: the
command holds its `.bench-run.lock` (bench.storage.writer_lock: a flock, free again when its
process dies, however it dies) until it ends, and a second command naming it is refused in one
line naming the first (exit 2) before Hydra writes there. The nodes of one run share it: a follower
(`distributed.node_rank` or NODE_RANK not 0) takes no lock; so does a rank torchrun started. A
killed or failed run's directory is free for the next (`train.resume`, a Slurm requeue); one that
holds a finished run's `run_summary.json` is used after one [WARNING] line saying its files are
replaced. One that cannot be written (a read-only mount) is refused in one line naming the key.

A command refused before it ran (exit 2) removes the directory it reserved, and the date folder
and `outputs/` when it made them and they are empty (`discard`); in a directory the user named,
what Hydra wrote there (`.hydra/`, `bench.log`), and the directory itself when this command made
it: a refusal leaves nothing it made, and never removes what was there before.
Imports nothing of bench's but the light modules the named-directory checks need: the console script
calls it before Hydra starts.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, List, Optional, Sequence

RUN_BASE, SWEEP_BASE = "outputs", "multirun"  # Hydra 1.3's defaults: <base>/${now:%Y-%m-%d}/${now:%H-%M-%S}
# flags after which Hydra does not run the task (it prints or exits), so no directory is needed
NOT_RUNNING = {"--cfg", "-c", "--help", "-h", "--hydra-help", "--info", "-i", "--version", "--shell-completion", "-sc"}
NOT_RUNNING_PREFIXES = ("--cfg=", "--info=", "--shell-completion=", "--experimental-rerun")
RESERVED_NAME = re.compile(r"^(\d{4})-(\d{2})-(\d{2})/(\d{2})-(\d{2})-(\d{2})(-\d+)?$")


@dataclass
class Reserved:
    path: Path  # the run's (or sweep's) directory
    made: List[Path] = field(default_factory=list)  # what this command creates: `path`, then its new parents upwards
    override: Optional[str] = None  # the Hydra override that puts the command there; None: the user named it
    lock: Any = None  # a named directory's WriterLock, held while the command runs

    def release(self) -> None:
        if self.lock is not None:
            self.lock.release()  # removes the lock file, so discard can remove the directory it made


def reserve(base: Path, now: Optional[float] = None, key: Optional[str] = None) -> Reserved:
    """`base/<date>/<time>` (local time, as Hydra's `now`), or `<time>-N` for the first N free; `key`
    (hydra.run.dir, hydra.sweep.dir): the override that puts the command there, this command's own."""
    stamp = time.localtime(now)
    day = Path(base) / time.strftime("%Y-%m-%d", stamp)
    hms = time.strftime("%H-%M-%S", stamp)
    made: List[Path] = []
    _make_parents(day, made)
    n = 1
    while True:
        path = day / (hms if n == 1 else f"{hms}-{n}")
        try:
            os.mkdir(path)
            return Reserved(path, [path, *made], f"{key}={path.as_posix()}" if key else None)
        except FileExistsError:
            n += 1  # another process's: try the next suffix
        except FileNotFoundError:  # a refused command removed the date folder it had just made
            _make_parents(day, made)


def _make_parents(path: Path, made: List[Path]) -> None:
    """mkdir -p, noting (deepest first) each directory this call created."""
    for missing in reversed(missing_dirs(path)):  # the shallowest first
        with contextlib.suppress(FileExistsError):  # made by another process meanwhile
            os.mkdir(missing)
            made.insert(0, missing)


def discard(reserved: Reserved) -> None:
    """Remove what this command made: a reserved directory with what it wrote in it (a directory the
    user named: only what Hydra writes there before bench runs), then each directory it created
    while that is empty (another command may have started beside it since)."""
    reserved.release()
    if reserved.override is not None:
        shutil.rmtree(reserved.path, ignore_errors=True)
    elif reserved.made:  # a named directory this command made (one that was there keeps its files)
        shutil.rmtree(reserved.path / ".hydra", ignore_errors=True)
        with contextlib.suppress(OSError):
            (reserved.path / "bench.log").unlink()  # hydra.job.name's log (conf/config.yaml)
    for made in reserved.made:
        try:
            os.rmdir(made)
        except FileNotFoundError:
            continue
        except OSError:
            return


def for_command(args: Sequence[str]) -> Optional[Reserved]:
    """The directory `python -m bench <args>` runs in: reserved here (`override` set) unless the
    command line names one; a named one is the user's, and only what this command creates of it is
    noted (for discard) and locked. None when Hydra will not run the task, an outside launcher
    started this process, or the directory cannot be made here (Hydra then says that in its one
    line). A BenchError (exit 2) when a named one cannot be written or another run holds it."""
    multirun = any(arg in ("-m", "--multirun") for arg in args)
    key = "hydra.sweep.dir" if multirun else "hydra.run.dir"
    named = [arg.split("=", 1)[1] for arg in args if arg.lstrip("+~").split("=", 1)[0] == key and "=" in arg]
    quiet = any(arg in NOT_RUNNING or arg.startswith(NOT_RUNNING_PREFIXES) for arg in args)
    if quiet or all(name in os.environ for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK")):
        return None
    if named:  # the user's: noted only when this command is the one to make it
        return None if "${" in named[-1] else _claim(key, named[-1].strip("'\""), args)
    with contextlib.suppress(OSError):  # cannot be made here: Hydra says why in its one line
        return reserve(Path(SWEEP_BASE if multirun else RUN_BASE), key=key)
    return None


def _claim(key: str, value: str, args: Sequence[str]) -> Reserved:
    """The named directory, checked writable, locked for this run unless this process is a follower node."""
    from bench.machine.writable import check_writable_dir
    from bench.storage.writer_lock import hold

    path = Path(value)
    check_writable_dir(key, value)  # a ConfigError naming the key: a read-only mount, no permission
    reserved = Reserved(path, missing_dirs(path))
    node = [arg.split("=", 1)[1] for arg in args if arg.lstrip("+").startswith("distributed.node_rank=")]
    if (node[-1] if node else os.environ.get("NODE_RANK", "0")).strip("'\" ") not in ("0", ""):
        return reserved  # a follower node: node 0's process holds the directory for the run
    hint = f"wait for it to end, or give this run a {key} of its own (unset, each run gets one)"
    reserved.lock = hold(path, path, hint, ".bench-run.lock", "run directory")
    if key == "hydra.run.dir" and (path / "run_summary.json").is_file() and not (path / "error.txt").exists():
        print(f"[WARNING] {key}={value} holds a finished run: its files are replaced by this run's", file=sys.stderr)
    return reserved


def missing_dirs(path: Path) -> List[Path]:
    """`path` and its parents that do not exist yet, deepest first."""
    missing = []
    while not path.exists() and path != path.parent:
        missing.append(path)
        path = path.parent
    return missing


def stamp_of(path: Path) -> Optional[str]:
    """`20261127-171652-2` for a reserved `.../2026-11-27/17-16-52-2` (None for a directory of another
    name): what names a sweep's MLflow parent, as distinct as the directory."""
    if not (found := RESERVED_NAME.match(f"{Path(path).parent.name}/{Path(path).name}")):
        return None
    year, month, day, hour, minute, second, suffix = found.groups()
    return f"{year}{month}{day}-{hour}{minute}{second}{suffix or ''}"
