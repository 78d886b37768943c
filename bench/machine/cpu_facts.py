"""What this machine's CPUs give a run, read from Linux without torch: the CPUs this process may
use (affinity) capped by the cgroup CPU quota, whether a run's threads and workers oversubscribe
them, and the frequency governor and clocks (cpufreq). bench.machine.fitness judges with them."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

CGROUP = Path("/sys/fs/cgroup")
CPUFREQ = Path("/sys/devices/system/cpu")
SLOW_CLOCK = 0.80  # a CPU clock below this share of its max is noted


def affinity() -> List[int]:
    """The CPUs this process may run on."""
    return sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else list(range(os.cpu_count() or 1))


def cgroup_quota(root: Path = CGROUP) -> Optional[float]:
    """The cgroup's CPU quota in cores (v2 cpu.max, else v1 cfs_quota_us / cfs_period_us); None: no quota."""
    with contextlib.suppress(OSError, ValueError):
        quota, period = (root / "cpu.max").read_text().split()[:2]
        return None if quota == "max" else int(quota) / int(period)
    for group in ("cpu", "cpu,cpuacct", "cpuacct,cpu"):
        with contextlib.suppress(OSError, ValueError):  # not this group's folder: the next
            quota_us = int((root / group / "cpu.cfs_quota_us").read_text())
            period_us = int((root / group / "cpu.cfs_period_us").read_text())
            return quota_us / period_us if quota_us > 0 and period_us > 0 else None
    return None


def usable_cores(cpus: Sequence[int], root: Path = CGROUP) -> float:
    quota = cgroup_quota(root)
    return min(float(len(cpus)), quota) if quota else float(len(cpus))


LOADER_SHARE = 4  # a CPU run's default split gives the loader one core in four (at least one, at most 8)


def cpu_split(
    usable: float, ranks: int, threads: Optional[int], workers: Optional[int], reads_files: bool
) -> Tuple[int, int]:
    """(torch threads, loader workers) per rank for a run on the CPU whose threads x ranks + workers
    x ranks fit the usable cores: what the user set is kept, what is unset (None) takes what fits
    beside it. Each rank's share is its whole cores; with both unset a quarter of it loads the data
    and the rest computes, and a one-core share loads in the main process (0 workers: the loader
    then runs between the steps, on the compute thread's core). Synthetic data has no workers."""
    share = max(1, int(usable // max(1, ranks)))
    if not reads_files:
        return (threads or share), 0
    if workers is None:
        loader = max(1, share // LOADER_SHARE) if share > 1 else 0
        room = share - (threads or 1)  # what is left once the compute has its threads (at least one)
        workers = max(0, min(8, loader, room))
    return (threads or max(1, share - workers)), workers


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def oversubscription(
    threads: int, ranks: int, workers: int, usable: float, thread_word: str = "torch thread"
) -> Tuple[int, Optional[str]]:
    """(threads x ranks + loader workers on this host, the reason when that is above the usable cores)."""
    demand = threads * ranks + workers * ranks
    if demand <= usable:
        return demand, None
    text = f"{_plural(threads, thread_word)} x {_plural(ranks, 'rank')}"
    if workers:
        text += f" + {_plural(workers, 'loader worker')}" + (f" x {_plural(ranks, 'rank')}" if ranks > 1 else "")
    return demand, f"{text} = {demand} > {usable:g} usable cores"


def _read(path: Path) -> Optional[str]:
    with contextlib.suppress(OSError):
        return path.read_text().strip()
    return None


def cpufreq_notes(cpus: Sequence[int], base: Path = CPUFREQ) -> List[str]:
    """The frequency governor and the clock against its max, where the kernel shows them (not in most VMs)."""
    governors: Dict[str, int] = {}
    current, top = [], []
    for cpu in cpus:
        folder = base / f"cpu{cpu}" / "cpufreq"
        if governor := _read(folder / "scaling_governor"):
            governors[governor] = governors.get(governor, 0) + 1
        cur, most = _read(folder / "scaling_cur_freq"), _read(folder / "cpuinfo_max_freq")
        if cur and most and cur.isdigit() and most.isdigit() and int(most) > 0:
            current.append(int(cur))
            top.append(int(most))
    notes = [
        f"CPU frequency governor {name} on {count} of {len(cpus)} usable CPUs (performance holds the clock)"
        for name, count in sorted(governors.items())
        if name != "performance"
    ]
    if current and sum(current) / sum(top) < SLOW_CLOCK:
        notes.append(
            f"CPUs at {sum(current) / len(current) / 1e6:.2f} of {sum(top) / len(top) / 1e6:.2f} GHz max "
            f"({sum(current) / sum(top):.0%}) at the window's end"
        )
    return notes
