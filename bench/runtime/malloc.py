"""cpu_malloc_reuse: on a CPU, the memory a step frees is kept for the next step's allocations.

A training step on a CPU allocates its activations and gradients and frees them again, every
step. With glibc's defaults every block over 32 MB is mmap()ed and munmap()ed each time, and
the top of the heap is trimmed back to the OS whenever its free end passes a threshold, so the
next step faults every page in again: ResNet-50 at 224 px, batch 16 faulted in ~2.2 GB a step
(~550,000 minor faults, 0.9 s of system time in a ~7 s step, 2 threads). glibc's `mallopt`
turns both off for the process (M_MMAP_MAX=0: large blocks come from the heap; M_TRIM_THRESHOLD=-1:
the heap is never trimmed), and the steps after the first reuse the memory already faulted in.
The price: the process keeps its peak heap until it ends (its resident-set high-water mark,
the run's peak_memory_mb on a CPU, is what it was anyway, give or take fragmentation; jobs of a
multirun that run in one process reuse that heap, and it creeps up by a little each: ~50 MB a
ResNet-50 build in `python -m bench.overhead`'s 8 runs).

It cannot be undone for the process (mallopt ends glibc's dynamic thresholds), so everything
that runs in it afterwards shares it: `python -m bench.overhead`'s hand-written loop as much as
bench's. Elsewhere than glibc (macOS, musl) it does nothing.
"""

from __future__ import annotations

import ctypes
import logging
import os
from typing import Any, Optional

log = logging.getLogger(__name__)

M_TRIM_THRESHOLD, M_MMAP_MAX = -1, -4  # glibc's <malloc.h>
_applied = False


def glibc_mallopt() -> Optional[Any]:
    """glibc's mallopt(int, int) -> int, or None where the C library is another one."""
    try:
        if not (os.confstr("CS_GNU_LIBC_VERSION") or "").startswith("glibc"):  # asks the C library itself
            return None
        mallopt = ctypes.CDLL(None).mallopt  # the C library this process runs on
    except (ValueError, OSError, AttributeError):  # no such name here (macOS, musl), or no mallopt
        return None
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return mallopt


def in_effect(requested: bool, device: str) -> Optional[bool]:
    """The record's cpu_malloc_reuse: None off a CPU, else whether the run's process kept freed memory."""
    if device != "cpu":
        return None
    return requested and glibc_mallopt() is not None


def keep_freed_memory() -> bool:
    """Set glibc to keep freed memory for reuse (once per process); whether it is in effect."""
    global _applied
    if _applied:
        return True
    if (mallopt := glibc_mallopt()) is None:
        return False
    _applied = bool(mallopt(M_MMAP_MAX, 0)) and bool(mallopt(M_TRIM_THRESHOLD, -1))
    if not _applied:
        log.warning("cpu_malloc_reuse: glibc refused mallopt; freed memory goes back to the OS as by default")
    return _applied
