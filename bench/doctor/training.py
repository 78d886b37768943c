"""The ladder's training rungs (the compute ceiling, the full run, the what-ifs measured as runs):
`python -m bench`'s own run (bench.api.run), in this process, for a window of a few seconds, as a
child MLflow run of the doctor's parent run. Its figures are read back from its files."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import signal
import time
from pathlib import Path
from typing import Any, Iterator, List, Optional, Sequence

from bench.config import BenchConfig, compose
from bench.config.run import TrainConfig
from bench.doctor.figures import Rung, TrainingFigures
from bench.errors import EXIT_FAILED, BenchError, Interrupted, interruption_in
from bench.results import read_summary
from bench.tracking.tracker import SweepJob
from bench.train.result import TrainMetrics

log = logging.getLogger("bench.doctor")

# What a rung of the ladder leaves out of the user's run: it measures speed, briefly. Epochs are
# many so that the window's clock (benchmark.measure_seconds), not the epoch count, ends the run;
# unless the user named the run's length (train.steps_per_epoch or train.epochs): then a rung
# is never longer than the user's own run, whatever the budget (issue 28).
MANY_EPOCHS = "train.epochs=100000"
LENGTH_KEYS = ("train.steps_per_epoch", "train.epochs")
BRIEF = (
    "train.eval_every=0",
    "train.target_accuracy=null",
    "train.resume=null",
    "train.mlperf_log=false",
    "checkpoint.every_epochs=0",
    "benchmark.repeats=1",
    "benchmark.measure_steps=null",
    "benchmark.progress=false",
    "benchmark.find_max_batch=false",
    "benchmark.breakdown=false",
    "benchmark.require_fit=false",
    "profile.enabled=false",
)


def names_length(overrides: Sequence[str]) -> bool:
    """Does the command line set the run's length (train.steps_per_epoch or train.epochs)?"""
    return any(o.lstrip("+~").partition("=")[0] in LENGTH_KEYS for o in overrides)


MAX_WARMUP_STEPS = 5
# A rung's set-up (building, compiling, warming up the model, its MLflow run) may overrun the budget
# (docs/profiling.md), but not far: past doctor.budget_s itself (at least a minute) the rung is stopped,
# and the later training rungs, which build the same model, are not started (issue 40.2: torch.compile
# of ResNet-50 on a CPU takes minutes a rung)
SETUP_BUDGETS, MIN_SETUP_S = 1.0, 60.0


class SetupOverrun(Interrupted):
    """SIGALRM at a rung's limit (or gpu_check's --budget-s): the run ends as at a signal (KILLED, its workers
    stopped); its text says why. Its exit code is a failure's, not SIGTERM's: bench.api.run would end the
    command with that."""

    exit_code = EXIT_FAILED

    def raise_again(self) -> None:
        """Swallowed in a callback ("Exception ignored in ..."): the rung's timer fires again in a moment
        (bench.machine.children.sigterm_raises), and is cancelled with it if the rung has ended by then;
        the run went on to write its results (a test saw run_summary.json of a stopped rung)."""
        signal.setitimer(signal.ITIMER_REAL, 0.05)

    def __str__(self) -> str:
        return self.signal_name


# An exception raised inside an import leaves the submodules it had made in sys.modules, unbound to a parent
# made again at the next import ("module 'sympy' has no attribute 'logic'" in the next rung's torch.compile):
# the stop waits for the import to end, looking again this often.
IMPORT_RETRY_S = 0.01


def importing(frame: Any) -> bool:
    """Is `frame`, or a frame that called it, inside Python's import machinery?"""
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib"):
            return True
        frame = frame.f_back
    return False


@contextlib.contextmanager
def stopped_after(seconds: float, reason: str) -> Iterator[List[bool]]:
    """SetupOverrun raised in the (main) thread after `seconds`; the list yielded holds True once it was."""
    fired: List[bool] = []

    def _raise(_signum: int, frame: Any) -> None:
        if importing(frame):  # raised in there it would leave the import's modules half-made for the next rung
            signal.setitimer(signal.ITIMER_REAL, IMPORT_RETRY_S)
            return
        fired.append(True)
        raise SetupOverrun(reason)

    previous = signal.signal(signal.SIGALRM, _raise)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        with contextlib.suppress(SetupOverrun):  # one that fired once the run had returned
            yield fired
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        # The stop is raised wherever this thread was: between logging's acquire and release of its module lock
        # (Manager._clear_cache, which Hydra's job logging calls, has no `finally`) it stays held by this thread,
        # and the next rung's threads and forks from them wait for it for good. Nothing here is inside logging.
        while fired and logging._lock._is_owned():  # type: ignore[attr-defined]
            logging._lock.release()  # type: ignore[attr-defined]


# the data source's own keys: the twin's source is synthetic, every other data.* override is the user's
SOURCE_KEYS = ("data", "data.name", "data.root", "data.download")


def synthetic_twin(overrides: Sequence[str], config: BenchConfig) -> List[str]:
    """The same model, batch, image sizes, schedule and precision on synthetic data made on the
    device: the user's data.* overrides but the source's, and the run's batch, size, classes and
    progressive resizing (a data group's or a preset's). An epoch that is a pass over the user's
    dataset (train.steps_per_epoch=null) has no meaning on synthetic data: the twin's epochs are
    train.steps_per_epoch's default length, as many as the user's run has when its length is named,
    else MANY_EPOCHS (its window ends it)."""
    kept = [o for o in overrides if o.lstrip("+~").partition("=")[0] not in SOURCE_KEYS]
    same = [f"data.{key}={getattr(config.data, key)}" for key in ("batch_size", "image_size", "num_classes")]
    progressive = "null" if config.data.progressive is None else repr(config.data.progressive)
    twin = [*kept, "data=synthetic", *same, f"data.progressive={progressive}"]
    if config.train.steps_per_epoch is None:
        length = [] if names_length(overrides) else [MANY_EPOCHS]  # the twin names its length: rung_config would not
        twin = [*replace(twin, "train.steps_per_epoch", str(TrainConfig.steps_per_epoch)), *length]
    return twin


def rung_config(overrides: Sequence[str], window_s: float) -> BenchConfig:
    """The config a training rung runs: `overrides` made brief (BRIEF, a `window_s` window, at most
    MAX_WARMUP_STEPS of warm-up), checked as a whole (the user's evaluation is off before its rules
    apply). A BenchError when it is not valid: the rung's row says why."""
    length = [] if names_length(overrides) else [MANY_EPOCHS]
    config = compose(*overrides, *length, *BRIEF, f"benchmark.measure_seconds={window_s:.3g}")
    warmup = max(1, min(config.benchmark.warmup_steps, MAX_WARMUP_STEPS))
    return dataclasses.replace(config, benchmark=dataclasses.replace(config.benchmark, warmup_steps=warmup))


def replace(overrides: Sequence[str], key: str, value: str) -> List[str]:
    """`overrides` with every override of `key` dropped and `key=value` appended."""
    return [o for o in overrides if o.lstrip("+~").split("=", 1)[0] != key] + [f"{key}={value}"]


def job_label(job: str, name: str) -> str:
    """What a doctor's run is, in its MLflow name: "doctor 1-compute", "doctor what-if-1: channels_last"."""
    return f"doctor {job}" if name in job else f"doctor {job}: {name}"


class TrainingRuns:
    """Runs of the training scenario for the doctor: each in `out_dir/<job>`, each a child of
    `parent_run_id` (None: tracked alone, or not at all with tracking.enabled=false); a run whose
    set-up runs far past `budget_s` (doctor.budget_s) is stopped (SETUP_BUDGETS)."""

    def __init__(self, out_dir: Path, launch_dir: Path, parent_run_id: Optional[str], budget_s: float):
        self.out_dir, self.launch_dir, self.parent_run_id = out_dir, launch_dir, parent_run_id
        self.budget_s, self.setup_s = budget_s, max(MIN_SETUP_S, SETUP_BUDGETS * budget_s)
        self.overran: Optional[str] = None  # the job whose set-up was stopped: the later ones are not started

    def run(self, job: str, name: str, overrides: Sequence[str], window_s: float) -> Rung:
        from bench import api

        started = time.perf_counter()
        if self.overran:
            why = f"not run: {self.overran}'s set-up ran past {self.setup_s:.0f} s and this run builds the same model"
            return Rung(name, skipped=why + "; not measured")
        rung = Rung(name=name)
        job_dir = self.out_dir / job
        job_dir.mkdir(parents=True, exist_ok=True)
        sweep_job = SweepJob(job, str(self.out_dir), self.parent_run_id, label=job_label(job, name))
        log.info("%s: %s", job, " ".join(overrides) or "(the defaults)")
        limit = window_s + self.setup_s
        overrun = f"its set-up (building, compiling, warming up the model) ran past {self.setup_s:.0f} s, far past "
        overrun += f"doctor.budget_s={self.budget_s:g}: stopped after {limit:.0f} s, not measured"
        # the run's final line and log go to its directory: the doctor's stdout is its table
        try:
            config = rung_config(overrides, window_s)
            with (
                (job_dir / "stdout.txt").open("w") as out,
                contextlib.redirect_stdout(out),
                stopped_after(limit, overrun) as overran,
            ):
                done = api.run(config, job_dir, self.launch_dir, echo=True, overrides=overrides, sweep_job=sweep_job)
        except BenchError as exc:  # bench.api.run raises Ctrl-C and SIGTERM again: the ladder ends with them
            if (stopped := interruption_in(exc)) is not None:  # a signal inside Hydra's compose: the ladder ends
                raise stopped from None
            rung.failed = str(exc)
            return rung
        rung.seconds = time.perf_counter() - started
        if overran:
            rung.skipped, self.overran = overrun, job
            return rung
        if not isinstance(done.metrics, TrainMetrics) or done.error:
            rung.failed = done.error or f"the run exited {done.exit_code}; see {job_dir}"
            return rung
        record = done.metrics
        rung.images_per_second, rung.run_id = record.images_per_second, read_summary(job_dir).get("mlflow_run_id")
        rung.step_ms, rung.data_wait = record.step_time_ms_p50, record.data_wait_fraction
        rung.parameters = record.parameters
        rung.fit, rung.unfit_because = record.fit.fit_to_measure, record.fit.fit_reasons or ""
        ran = record.execution
        counts = (record.measured_steps, record.batch_size, record.world_size)
        rung.figures = TrainingFigures(*counts, ran.precision, ran.channels_last, ran.device)  # in its fields' order
        return rung
