"""CPU time of this process tree, for a cost per unit of work (the doctor's loader rung, the
loader benchmark's CPU-s per image)."""

from __future__ import annotations

import psutil


def cpu_seconds_with_children() -> float:
    """CPU time of this process and its live children (the loader's workers); clock-tick
    resolution (10 ms), so it needs a few hundred milliseconds of work to mean anything."""
    me = psutil.Process()
    total = 0.0
    for process in [me, *me.children(recursive=True)]:
        try:
            times = process.cpu_times()
            total += times.user + times.system
        except psutil.NoSuchProcess:
            pass
    return total
