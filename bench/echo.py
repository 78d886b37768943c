"""The echo scenario, the documented example of a new one (docs/architecture.md, "Adding things"): every
rank sleeps `scenario.step_s` per step for `scenario.steps` steps; the run reports rank 0's own steps/s.
This module and conf/scenario/echo.yaml are all of it: the rest is bench.scenario_base's defaults.

    python -m bench scenario=echo scenario.steps=50 scenario.step_s=0.002
    python -m bench -m scenario=echo scenario.step_s=0.001,0.002 distributed=ddp distributed.nproc_per_node=2
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

from bench.errors import ConfigError
from bench.rank_context import RankContext
from bench.results import Record, shown
from bench.scenario_base import BaseScenario


@dataclass(kw_only=True)
class EchoMetrics(Record):
    """The final line's `radix_metrics`, in this order, and how a sweep, MLflow and compare show them."""

    mode: str = shown(default="echo", tag=True)
    steps: int
    step_s: float
    world_size: int = shown("processes")
    seconds: float  # rank 0's steps, sleep and loop together
    steps_per_second: float = shown("steps/s", "{:.1f}", sample={"unit": "steps/s"})  # rank 0's own


@dataclass
class Echo(BaseScenario):
    """Its fields are its keys: `scenario.steps=50`, checked when the config loads."""

    steps: int = 20
    step_s: float = 0.01  # seconds each step sleeps
    record_class = EchoMetrics

    def __post_init__(self) -> None:
        if self.steps < 1:
            raise ConfigError("scenario.steps", self.steps, "a positive count")
        if self.step_s < 0:
            raise ConfigError("scenario.step_s", self.step_s, "seconds >= 0")

    def run_rank(
        self, config: Any, ctx: RankContext, out_dir: Path, heartbeat: Optional[Callable[[], None]] = None
    ) -> Optional[EchoMetrics]:
        start = time.perf_counter()
        for _ in range(self.steps):
            time.sleep(self.step_s)
            if heartbeat:
                heartbeat()  # a launcher's watchdog: this rank's steps go on
        seconds = time.perf_counter() - start
        if not ctx.is_reporter:
            return None  # rank 0 reports the run
        rate = self.steps / seconds
        return EchoMetrics(
            steps=self.steps, step_s=self.step_s, world_size=ctx.world_size, seconds=seconds, steps_per_second=rate
        )
