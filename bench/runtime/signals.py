"""A SIGTERM / Ctrl-C noted, not raised, while a step is in progress: training with checkpoints,
and the passes after the window (breakdown, profiling) of both scenarios, end after the step in
progress instead of in the middle of it."""

from __future__ import annotations

import signal
import threading
from typing import Any, Dict, Optional


class SignalFlag:
    """SIGTERM/SIGINT noted, not raised, while enabled (training with checkpoints, the passes
    after the window): the loop finishes the step it is in, writes a checkpoint if it keeps
    them, then ends the run KILLED (a signal raised mid-step could leave the weights half
    updated). Only the main thread may set signal handlers: elsewhere it stays disabled."""

    def __init__(self, enabled: bool):
        self.enabled = enabled and threading.current_thread() is threading.main_thread()
        self.signum: Optional[int] = None
        self._previous: Dict[int, Any] = {}

    def __enter__(self) -> "SignalFlag":
        if self.enabled:
            for sig in (signal.SIGTERM, signal.SIGINT):
                self._previous[sig] = signal.signal(sig, self._note)
        return self

    def _note(self, signum: int, _frame: Any) -> None:
        self.signum = signum

    def __exit__(self, *exc: Any) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
