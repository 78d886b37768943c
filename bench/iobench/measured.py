"""What one simulated accelerator measured: its requests, its epochs (and eval passes), its
checkpoints. Plain dataclasses, pickled from an accelerator process or rank to the reporter.

Two accounts of every epoch, side by side:
- strict (bench's own, the fields it always had): the run's first step is warm-up, its time and
  samples are out; `wall_s` runs from the end of that step (or the epoch's start) to the epoch's end;
- MLPerf's (`all_*`, `epoch_s`, `first_step_s`, `au_compute_s`): every step counts for samples/s,
  and each epoch's first step is left out of its AU (MLPerf Storage rules, DLIO 2.0.0's counters).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional


@dataclass
class Request:
    key: str
    epoch: int
    bytes: int
    latency_ms: float
    finished: float  # perf_counter() when the request ended
    step: int = 0  # the step of the run that consumed its last sample (0: none did)


@dataclass
class EpochStats:
    epoch: int
    steps: int = 0  # measured steps (the run's first step is never counted)
    samples: int = 0
    bytes: float = 0.0  # of the measured samples
    wall_s: float = 0.0
    compute_s: float = 0.0
    wait_s: float = 0.0
    all_steps: int = 0  # every step of the epoch, its first included
    all_samples: int = 0
    all_bytes: float = 0.0
    epoch_s: float = 0.0  # from the epoch's start to the end of its last step
    first_step_s: float = 0.0  # the epoch's first step: its start-up, read and compute
    au_compute_s: float = 0.0  # emulated compute of steps 2..n
    checkpoint_s: float = 0.0  # periodic checkpoints written during the epoch (left out of both clocks)

    def add_step(self, samples: int, size: float, compute: float, elapsed: float) -> None:
        """One more step by MLPerf's account; `elapsed`: from the epoch's start to the step's end."""
        self.all_steps += 1
        self.all_samples += samples
        self.all_bytes += size
        if self.all_steps == 1:
            self.first_step_s = elapsed
        else:
            self.au_compute_s += compute
        self.epoch_s = elapsed - self.checkpoint_s

    @property
    def au(self) -> float:
        return self.compute_s / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def mlperf_au(self) -> Optional[float]:
        """compute of steps 2..n / (epoch time - first step); None without a second step."""
        measured = self.epoch_s - self.first_step_s
        return self.au_compute_s / measured if self.all_steps > 1 and measured > 0 else None

    @property
    def mlperf_samples_per_second(self) -> Optional[float]:
        return self.all_samples / self.epoch_s if self.all_samples and self.epoch_s > 0 else None

    @property
    def steady_samples_per_second(self) -> Optional[float]:
        return self.samples / self.wall_s if self.samples and self.wall_s > 0 else None


@dataclass
class ReaderResult:
    client: int
    epochs: List[EpochStats]
    requests: List[Request] = field(default_factory=list)  # measured requests only
    cpu_s: float = 0.0  # CPU time over the measured window: this process's and its reader processes'
    window_start: float = 0.0  # perf_counter() clock of the process that ran it
    step_times_ms: List[float] = field(default_factory=list)
    evals: List[EpochStats] = field(default_factory=list)  # one per evaluation pass
    checkpoints: List[Dict[str, Any]] = field(default_factory=list)  # one per checkpoint written / read
    checkpoint_error: Optional[str] = None
    checkpoint_cache_drop: str = ""  # how the page cache was dropped between checkpoint writes and reads
    host: str = ""
    node: int = 0  # the host's index among the run's hosts
    run: int = 0  # storage.runs: which measured run (warm-up runs are not reported)
    readers: str = ""  # how its read_threads readers ran: threads or processes ("": no read phase)

    def total(self, name: str) -> float:
        return sum(getattr(e, name) for e in self.epochs)
