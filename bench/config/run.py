"""The keys of a run that are not a swappable group: how long it trains, how it is measured,
where it is tracked."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from bench.config.fields import Checks
from bench.secrets import CREDENTIALS_HOME, has_userinfo


@dataclass
class TrainConfig(Checks):
    KEY = "train"
    epochs: int = 1
    steps_per_epoch: int = 200

    def __post_init__(self) -> None:
        self.positive("epochs", "steps_per_epoch")


@dataclass
class BenchmarkConfig(Checks):
    KEY = "benchmark"
    warmup_steps: int = 10  # run before the measured window, never counted
    measure_steps: Optional[int] = None  # cap on measured steps (default: epochs x steps_per_epoch)
    measure_seconds: Optional[float] = None  # end the measured window after this long
    sync: bool = False  # synchronise the device after every step (strict, slower)
    log_every: int = 50  # steps between progress lines (the only host syncs)
    progress: bool = True  # tqdm bar on a terminal; silent otherwise

    def __post_init__(self) -> None:
        self.non_negative("warmup_steps")
        self.positive("log_every")
        self.positive("measure_steps", optional=True)
        self.positive("measure_seconds", optional=True, integer=False)


@dataclass
class TrackingConfig(Checks):
    KEY = "tracking"
    enabled: bool = True
    experiment: str = "bench"
    uri: Optional[str] = None  # MLFLOW_TRACKING_URI wins; default sqlite:///<launch dir>/mlflow.db
    run_name: Optional[str] = None
    log_step_metrics: bool = True
    probe_timeout_s: float = 5.0  # an http(s) tracking server must answer within this, or the run goes on without it

    def __post_init__(self) -> None:
        self.positive("probe_timeout_s", integer=False)
        if self.uri and has_userinfo(self.uri):
            self._fail("uri", f"a URI without user:password; {CREDENTIALS_HOME}")
