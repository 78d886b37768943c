"""Disk space on a local store, for the storage benchmark's writes (S3 has no free-space figure,
so none of this applies there).

- `shortfall(what, need, where)`: the refusal when `need` bytes do not fit on the filesystem holding
  `where` (or its nearest existing parent: the dataset's directory need not exist yet) with the
  margin left free: 5% of the filesystem, at most 1 GiB, so a run that fits by a hair does not
  leave the disk full for everything else on it.
- `no_space(exc)`, `write_error(exc, path)`: a failed write in one phrase that names the path.
Torch-free.
"""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path

from bench.errors import BenchError

MARGIN_FRACTION = 0.05
MARGIN_MAX = 2**30
MARGIN_RULE = "5% of the filesystem, at most 1 GiB"


class DiskFull(BenchError):
    """A benchmark write found no space left; str() names the path and what was cleaned up."""


def nearest_existing(path: Path) -> Path:
    path = Path(path).absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def free_inodes(path: Path) -> int:
    """Files that can still be created there; -1 where the filesystem does not count them."""
    stats = os.statvfs(nearest_existing(path))
    return stats.f_favail if stats.f_files else -1


def human(size: float) -> str:
    """Bytes in decimal units, as disks are sold: 40.0 GB."""
    for unit in ("B", "kB", "MB", "GB"):
        if abs(size) < 1000:
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1000
    return f"{size:.1f} TB"


def shortfall(what: str, need: int, where: Path) -> str | None:
    """The sentence refusing `need` bytes on the filesystem of `where`, or None when they fit
    with the margin to spare."""
    total, _, free = shutil.disk_usage(nearest_existing(where))
    keep = min(int(total * MARGIN_FRACTION), MARGIN_MAX)
    if need <= free - keep:
        return None
    verb = "need" if " + " in what else "needs"
    return f"{what} {verb} {human(need)} on {where}; {human(free)} free, keeping a {human(keep)} margin ({MARGIN_RULE})"


def no_space(exc: BaseException) -> bool:
    return isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT)


def write_error(exc: BaseException, path: str) -> str:
    """One phrase for a failed write: `no space left on <path>` for a full disk (or quota)."""
    if no_space(exc):
        return f"no space left on {path} ({getattr(exc, 'strerror', None) or exc})"
    text = f"{type(exc).__name__}: {getattr(exc, 'strerror', None) or exc}"
    return f"{text} ({path})" if isinstance(exc, OSError) else text
