"""Step clocks: a mark at the end of every measured step, read back after the window.

On CUDA a mark is a recorded event (no host sync); on the CPU it is perf_counter().
Step time = the gap between consecutive marks, so it covers everything the step did,
waiting for data included. Nothing here synchronises except `sync()`, called only at log
intervals and at the end of the window.
"""

from __future__ import annotations

import time
from typing import List

import torch


class StepClock:
    def __init__(self, device: torch.device, strict_sync: bool = False):
        self.device = device
        self.strict_sync = strict_sync  # benchmark.sync: synchronise after every step
        self._cuda = device.type == "cuda"
        self._marks: list = []

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

    def sync(self) -> None:
        if self._cuda:
            torch.cuda.synchronize(self.device)

    def seconds_between(self, first: int, last: int) -> float:
        """Seconds from mark `first` to mark `last` (call sync() first on CUDA)."""
        if self._cuda:
            return self._marks[first].elapsed_time(self._marks[last]) / 1000.0
        return self._marks[last] - self._marks[first]

    def step_times_ms(self) -> List[float]:
        """Gaps between consecutive marks, in ms (call sync() first on CUDA)."""
        if self._cuda:
            return [a.elapsed_time(b) for a, b in zip(self._marks, self._marks[1:])]
        return [(b - a) * 1000.0 for a, b in zip(self._marks, self._marks[1:])]
