"""The keys of a run that are not a swappable group: how long it trains, how it is measured,
where it is tracked."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from bench.config.fields import Checks, Choice, non_negative, positive
from bench.secrets import CREDENTIALS_HOME, has_userinfo

RESUME_AUTO = "auto"
# The passes after the window: means over a thousand synchronised steps are as stable as they get, more
# only lengthens the run; the profiler keeps every event of every recorded step in memory (GBs within
# seconds at a million) and a trace of more than ~100 steps is too large for a trace viewer.
MAX_BREAKDOWN_STEPS = 1000
MAX_PROFILE_STEPS = 100


class MlperfDivision(Choice):
    open = "open"  # MLPerf's open division: the log's format and events are checked, any config passes
    closed = "closed"  # the closed division's ResNet rules: the checker names each one the run does not meet


@dataclass
class TrainConfig(Checks):
    KEY = "train"
    epochs: int = positive(1)
    steps_per_epoch: Optional[int] = positive(200)  # null: one pass over the (sharded) dataset, real data only
    eval_every: int = non_negative(0)  # epochs between validations (top-1/top-5 on the val split); 0: none
    target_accuracy: Optional[float] = None  # val top-1 in (0, 1]: stop at the first evaluation reaching it
    label_smoothing: float = 0.0  # CrossEntropyLoss(label_smoothing=...)
    resume: Optional[str] = None  # "auto": the newest valid checkpoint of this config; or a checkpoint's path
    mlperf_log: bool = False  # write MLPerf Training's :::MLLOG events to mlperf.log (bench.train.mlperf_log)
    mlperf_division: MlperfDivision = MlperfDivision.open  # the log's submission_division (closed: its rules apply)

    def rules(self) -> None:
        self.between("label_smoothing", 0, 1, "a number in [0, 1)", "[)")
        if self.target_accuracy is not None:
            self.between("target_accuracy", 0, 1, "a top-1 accuracy in (0, 1], e.g. 0.95", "(]")
            self.eval_every = self.eval_every or 1  # a target is checked at evaluations: each epoch unless told
        if self.resume is not None and not str(self.resume).strip():
            self._fail("resume", f"{RESUME_AUTO!r} or a checkpoint's path (null: start fresh)")


@dataclass
class CheckpointConfig(Checks):
    """Training checkpoints for resume, written by rank 0 through the storage backend."""

    KEY = "checkpoint"
    # write one after every N epochs (and after the last); 0: none (1 with train.resume)
    every_epochs: int = non_negative(0)
    keep_last: int = positive(2)  # older ones are deleted once a newer one is written
    dir: str = "checkpoints"  # under storage.root (or the S3 prefix); one sub-folder per config fingerprint
    on_signal: bool = True  # SIGTERM / Ctrl-C during training writes one before the run ends KILLED

    def rules(self) -> None:
        if not self.dir or self.dir.startswith("/") or ".." in self.dir.replace("\\", "/").split("/"):
            self._fail("dir", "a relative folder inside storage.root, without '..'")


@dataclass
class BenchmarkConfig(Checks):
    KEY = "benchmark"
    warmup_steps: int = non_negative(10)  # run before the measured window, never counted
    measure_steps: Optional[int] = positive(None)  # cap on measured steps (default: epochs x steps_per_epoch)
    measure_seconds: Optional[float] = positive(None)  # end the measured window after this long
    sync: bool = False  # synchronise the device after every step (strict, slower)
    log_every: int = positive(50)  # steps between progress lines (the only host syncs)
    progress: bool = True  # tqdm bar on a terminal; silent otherwise
    # measured windows after the one warm-up, in this process: median, spread, 95% CI, stable
    repeats: int = positive(1)
    # after the window: a synchronised pass timing data / forward / backward / optimizer (/ comm)
    breakdown: bool = False
    breakdown_steps: int = positive(20)  # steps of that pass
    find_max_batch: bool = False  # GPU: before the run, the largest per-process batch that fits (halve on OOM, grow)
    require_fit: bool = False  # refuse an oversubscribed config and a busy machine; an unfit window fails the run
    require_fit_wait_s: float = non_negative(60.0)  # with require_fit: how long to wait for other processes to quieten

    def rules(self) -> None:
        if self.breakdown_steps > MAX_BREAKDOWN_STEPS:
            self._fail(
                "breakdown_steps", f"1 to {MAX_BREAKDOWN_STEPS} (steps of the synchronised pass after the window)"
            )


@dataclass
class ProfileConfig(Checks):
    """torch.profiler over a few steps after the measured window (bench.train.profiling)."""

    KEY = "profile"
    enabled: bool = False  # trace_rank0.json (Chrome/Perfetto) + profile_top_ops.txt, logged to MLflow
    steps: int = positive(5)  # profiled steps (after one unrecorded profiler warm-up step), on every rank
    row_limit: int = positive(30)  # operators in profile_top_ops.txt

    def rules(self) -> None:
        if self.steps > MAX_PROFILE_STEPS:
            self._fail("steps", f"1 to {MAX_PROFILE_STEPS} (the profiler holds every event of every step in memory)")


@dataclass
class TrackingConfig(Checks):
    KEY = "tracking"
    enabled: bool = True
    experiment: str = "bench"
    uri: Optional[str] = None  # MLFLOW_TRACKING_URI wins; default sqlite:///<launch dir>/mlflow.db
    run_name: Optional[str] = None
    log_step_metrics: bool = True
    # an http(s) tracking server must answer within this, or the run goes on without it
    probe_timeout_s: float = positive(5.0)
    system_metrics: bool = False  # MLflow's own system metrics (system/cpu_*, system/gpu_*) beside bench's NVML summary
    required: bool = False  # true: a run that cannot be tracked (or stops being tracked) ends non-zero (exit 1)

    def rules(self) -> None:
        if not self.experiment.strip():  # MLflow would file the run nowhere, and bench exit 0
            self._fail("experiment", "a non-empty MLflow experiment name (tracking.enabled=false tracks nothing)")
        if self.required and not self.enabled:
            self._fail("required", "false with tracking.enabled=false (a run that tracks nothing cannot require it)")
        if self.uri and has_userinfo(self.uri):
            self._fail("uri", f"a URI without user:password; {CREDENTIALS_HOME}")
