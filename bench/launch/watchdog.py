"""Ends a rank whose training steps have stopped, or whose launcher is gone.

A peer that died or hung leaves the others blocked inside an all-reduce, and not every backend
honours its timeout there (gloo inside DDP's backward does not); a rank that exits is something
the launcher sees, and it then stops the rest. Armed at the first step, so model building and
data start-up are not counted.

A launcher killed outright (SIGKILL, the OOM killer) cannot stop its workers: each checks every
second that the process that launched it is still there (the same pid with the same start
time, so a reused pid does not count) and ends itself when it is not.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import Optional

from bench.machine.children import process_identity

log = logging.getLogger("bench")

EXIT_HUNG = 124  # a rank whose steps stopped (the exit code `timeout` uses)
EXIT_ORPHANED = 125  # a rank whose launcher is gone


class StepWatchdog:
    def __init__(self, timeout_s: float, rank: int, launcher_pid: Optional[int] = None):
        self.timeout_s, self.rank = float(timeout_s), rank
        self.launcher = process_identity(launcher_pid) if launcher_pid else None
        self._last: Optional[float] = None
        self._thread = threading.Thread(target=self._watch, name="bench-step-watchdog", daemon=True)
        self._thread.start()

    def beat(self) -> None:
        """Called after every training step."""
        self._last = time.monotonic()

    def _watch(self) -> None:
        while True:
            time.sleep(min(1.0, self.timeout_s / 4))
            if self._last is not None and time.monotonic() - self._last > self.timeout_s:
                self._end(
                    EXIT_HUNG,
                    f"no training step finished for {self.timeout_s:.0f} s (distributed.timeout_s): "
                    "a peer died or hung",
                )
            if self.launcher is not None and process_identity(self.launcher[0]) != self.launcher:
                self._end(EXIT_ORPHANED, f"the process that launched it (pid {self.launcher[0]}) is gone")

    def _end(self, code: int, why: str) -> None:
        log.error("rank %d: %s; ending this rank", self.rank, why)
        logging.shutdown()
        os._exit(code)
