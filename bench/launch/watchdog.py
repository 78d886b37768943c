"""Ends a rank whose training steps have stopped.

A peer that died or hung leaves the others blocked inside an all-reduce, and not every backend
honours its timeout there (gloo inside DDP's backward does not); a rank that exits is something
the launcher sees, and it then stops the rest. Armed at the first step, so model building and
data start-up are not counted.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import Optional

log = logging.getLogger("bench")

EXIT_HUNG = 124  # a rank whose steps stopped (the exit code `timeout` uses)


class StepWatchdog:
    def __init__(self, timeout_s: float, rank: int):
        self.timeout_s, self.rank = float(timeout_s), rank
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
                log.error("rank %d: no training step finished for %.0f s (distributed.timeout_s): a peer died or hung; "
                          "ending this rank", self.rank, self.timeout_s)
                logging.shutdown()
                os._exit(EXIT_HUNG)
