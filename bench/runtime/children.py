"""Helper processes that must not outlive the command that started them."""

from __future__ import annotations

import ctypes
import os
import select
import signal
import time
from contextlib import suppress


def die_with_parent(parent: int) -> None:
    """In a child process: Ctrl-C (sent to the whole process group) is the parent's to handle, and
    the kernel kills this process when its parent dies (PR_SET_PDEATHSIG, Linux; elsewhere the
    parent's SIGTERM / Ctrl-C handling still ends it)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    with suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    if os.getppid() != parent:  # the parent died before prctl took effect
        os._exit(1)


def reap(pid: int, deadline: float) -> None:
    """Wait for a child process to exit, killing it at `deadline` (a time.monotonic() value)."""
    try:
        handle = os.pidfd_open(pid)  # readable once the process has exited (Linux 5.3+)
    except (AttributeError, OSError):
        handle = None
    try:
        while not os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT):
            left = deadline - time.monotonic()
            if left <= 0:
                os.kill(pid, signal.SIGKILL)
                break
            if handle is not None:
                select.select([handle], [], [], left)
            else:
                time.sleep(min(left, 0.001))
    finally:
        if handle is not None:
            os.close(handle)
    os.waitpid(pid, 0)
