"""Step clocks: a mark at the end of every measured step, read back after the window.

On CUDA a mark is a recorded event (no host sync); on the CPU it is perf_counter().
Step time = the gap between consecutive marks, so it covers everything the step did,
waiting for data included. Nothing here synchronises except `sync()`, called only at log
intervals and at the end of the window. `pause()`/`resume()` cut out what is not training
(an evaluation, a checkpoint write): that gap is neither a step nor part of the window.

A SIGTERM / Ctrl-C noted, not raised, while a step is in progress: training with checkpoints,
and the passes after the window (breakdown, profiling) of both scenarios, end after the step in
progress instead of in the middle of it.
"""

from __future__ import annotations

import signal
import threading
import time
from typing import Any, Dict, List, Optional, Set

import torch


class StepClock:
    def __init__(self, device: torch.device, strict_sync: bool = False):
        # strict_sync: benchmark.sync, synchronise after every step
        self.device, self.strict_sync, self._cuda = device, strict_sync, device.type == "cuda"
        self._marks: list = []
        self._gaps: Set[int] = set()  # i in gaps: marks i-1 -> i span a pause, not a step

    def __len__(self) -> int:
        return len(self._marks)

    def mark(self) -> None:
        if self._cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            if self.strict_sync:
                event.synchronize()
            self._marks.append(event)
        else:
            self._marks.append(time.perf_counter())

    def pause(self) -> None:
        """Stop counting (the last mark ends the last step); resume() starts counting again."""
        self.sync()

    def resume(self) -> None:
        self.mark()
        self._gaps.add(len(self._marks) - 1)

    def sync(self) -> None:
        if self._cuda:
            torch.cuda.synchronize(self.device)

    def _span(self, first: int, last: int) -> float:
        if self._cuda:
            return self._marks[first].elapsed_time(self._marks[last]) / 1000.0
        return self._marks[last] - self._marks[first]

    def seconds_between(self, first: int, last: int) -> float:
        """Seconds of counted time from mark `first` to mark `last` (call sync() first on CUDA)."""
        return self._span(first, last) - sum(self._span(i - 1, i) for i in self._gaps if first < i <= last)

    def step_times_ms(self, first: int = 0) -> List[float]:
        """Time between consecutive marks from mark `first` on, pauses left out, in ms (call
        sync() first on CUDA)."""
        return [self._span(i - 1, i) * 1000.0 for i in range(first + 1, len(self._marks)) if i not in self._gaps]


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
