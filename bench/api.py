"""bench from Python: the seed's `get_default_config()`, `TrainingConfig(...)` and
`Trainer(config).train()`, as three functions over bench's own typed config and result records.
A run takes the path `python -m bench` takes (bench.app.run: preflight, tracker, launcher,
report, files, MLflow), so the same overrides give the same run and the same files.

    from bench.api import compose_config, run

    config = compose_config("+experiment=digits_tta", "data.root=./digits")  # a checked BenchConfig
    config.train.epochs = 3                       # edit it as a dataclass: run() checks it again
    result = run(config, out_dir="runs/digits")   # or run(["+experiment=digits_tta", ...])
    result.ok, result.metrics.images_per_second, result.metrics.figure("val_top1")
    [(e.epoch, e.data_wait_seconds, e.compute_seconds) for e in result.epochs]

What the command refuses with exit 2 raises a bench.errors.BenchError here (ConfigError,
ConfigProblem, DeviceError: str() is the sentence the command prints; `key`, `value`,
`accepted` for a program), before any MLflow run: compose_config for the config itself,
run() also for what the world says (the dataset on disk, the device). A run that starts and
fails returns `ok=False` with `error` set; Ctrl-C raises KeyboardInterrupt once the run is
marked KILLED. Nothing goes to stdout unless run(..., echo=True). Any thread may call run(): runs
in one process take turns (a lock), as what a run sets is the process's (torch's threads, seed
and cuDNN flags, environment variables), and each run restores it as it found it (docs/training.md).
A sweep (-m) is refused: it runs with `python -m bench -m`.
"""

from __future__ import annotations

import shlex
import signal
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, List, Optional, Sequence, Union

from bench.config import BenchConfig, check, compose
from bench.errors import EXIT_SIGINT, EXIT_SIGTERM, BenchError, ConfigProblem
from bench.infer.result import InferMetrics
from bench.iobench.result import StorageMetrics
from bench.run_dirs import RUN_BASE, Reserved, discard, missing_dirs, reserve
from bench.train.result import EpochRecord, TrainMetrics

if TYPE_CHECKING:
    from bench.tracking.tracker import SweepJob

__all__ = [
    "EpochRecord",
    "InferMetrics",
    "Metrics",
    "RunResult",
    "StorageMetrics",
    "TrainMetrics",
    "compose_config",
    "default_config",
    "run",
    "run_child",
]

# the record of each mode: narrow it with isinstance(result.metrics, TrainMetrics)
Metrics = Union[TrainMetrics, InferMetrics, StorageMetrics]


def default_config() -> BenchConfig:
    """The schema's defaults, as `python -m bench` with no override runs them (the seed's get_default_config)."""
    return compose()


def compose_config(*overrides: str) -> BenchConfig:
    """The checked config of `python -m bench <overrides>` (Hydra's compose API; no run directory):
    every key, value and rule the command checks before it imports torch, the model's name
    included, its sweep advice worded for a Python caller (no -m to add). Raises BenchError."""
    from bench.config.hydra_errors import SWEEP_FROM_PYTHON, SWEEP_ON_THE_COMMAND_LINE

    try:
        return compose(*overrides)
    except ConfigProblem as exc:
        if SWEEP_ON_THE_COMMAND_LINE not in str(exc):
            raise
        raise ConfigProblem(
            str(exc).replace(SWEEP_ON_THE_COMMAND_LINE, SWEEP_FROM_PYTHON), exc.key, exc.value
        ) from None


@dataclass
class RunResult:
    """What one run gave back: its exit code, its directory, and its typed records. A run refused
    before any work never gets here (run() raises); `ok` is False exactly when `error` is set."""

    exit_code: int  # 0: finished; 1: failed (`error` says why); 143: SIGTERM, and the program's handler returned
    out_dir: Path  # run_summary.json, metrics_epoch.jsonl, ... as `python -m bench` writes them
    config: BenchConfig
    metrics: Optional[Metrics] = None  # the mode's record; None if the run wrote none
    epochs: List[EpochRecord] = field(default_factory=list)  # training: an EpochRecord per epoch
    error: Optional[str] = None  # why the run failed (error.txt's text; run_child: the child's [ERROR] line)
    seconds: float = 0.0  # the run's wall time (run_child: its process's, start-up included)

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and self.error is None


# what a run sets is the process's: one run at a time in a process, each restoring what it changed
_ONE_RUN = threading.Lock()


def run(
    config: Union[BenchConfig, Sequence[str], str],
    out_dir: Union[str, Path, None] = None,
    launch_dir: Union[str, Path, None] = None,
    *,
    echo: bool = False,
    overrides: Sequence[str] = (),
    sweep_job: Optional["SweepJob"] = None,
) -> RunResult:
    """Run one benchmark in this process: `config` is a BenchConfig (checked again, so edits count)
    or the overrides of `python -m bench` (a list, or one string split as a shell splits it).
    `out_dir`: the run's directory (default `outputs/<date>/<time>` under `launch_dir`, the current
    directory unless given, where the default MLflow store `mlflow.db` lives too).
    `echo=True` prints the command's final `{"radix_metrics": ...}` line on stdout. With a BenchConfig,
    `overrides` are those it was composed from (its MLflow record says them); `sweep_job`: a child MLflow
    run of a parent's (the doctor's rungs; a refusal is its FAILED run, as a sweep job's, not raised).
    Raises BenchError for what the command refuses."""
    from bench.app import run as run_bench

    if isinstance(config, str):
        try:
            config = shlex.split(config)
        except ValueError as exc:  # an unclosed quote
            raise ConfigProblem(f"the overrides {config!r} cannot be split as a shell splits them: {exc}") from None
    overrides = list(overrides) if isinstance(config, BenchConfig) else [str(o) for o in config]
    checked = check(config) if isinstance(config, BenchConfig) else compose_config(*overrides)
    launch = Path(launch_dir or Path.cwd()).resolve()
    # the run's directory: `out_dir` as given, else `<launch>/outputs/<date>/<time>`, this call's own even when
    # another run starts in the same second (bench.run_dirs, as `python -m bench`); with what this call makes of
    # it, which a refusal removes again (run_dirs.discard)
    if out_dir is None:
        reserved = reserve(launch / RUN_BASE, key="hydra.run.dir")  # this call's: removed whole on a refusal
    else:
        reserved = Reserved(Path(out_dir), missing_dirs(Path(out_dir)))
    where = reserved.path
    where.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    try:
        from bench.runtime.device import process_restored  # torch: imported by a run, not by compose_config

        with _ONE_RUN, process_restored():
            code = run_bench(checked, where, launch, overrides, sweep_job, raise_refusals=not sweep_job, echo=echo)
    except BenchError:
        discard(reserved)  # refused before any work: nothing of this call stays on disk
        raise
    if code == EXIT_SIGINT:  # Ctrl-C: the run is marked KILLED; the program stops as Python's do
        raise KeyboardInterrupt(f"bench run in {where} interrupted")
    if code == EXIT_SIGTERM and threading.current_thread() is threading.main_thread():
        signal.raise_signal(signal.SIGTERM)  # now the program's own handling: by default it ends here (143)
    return _read_back(RunResult(code, where, checked, seconds=time.perf_counter() - started))


def _read_back(result: RunResult, stderr: str = "") -> RunResult:
    """`result` with the run's typed records read back from its files, and why it failed: the last [ERROR]
    line of its `stderr` (a child's, as a terminal shows it), else error.txt's text, else its exit code."""
    code, where = result.exit_code, result.out_dir
    if (where / "run_summary.json").is_file():
        report = result.config.scenario.report_class.from_files(where)
        result.metrics = report.record
        result.epochs = list(getattr(getattr(report, "result", None), "epochs", None) or [])
    if (where / "error.txt").is_file():
        result.error = (where / "error.txt").read_text().strip()
    errors = [line for line in stderr.splitlines() if line.startswith("[ERROR]")]
    if code == EXIT_SIGTERM:  # the program's SIGTERM handler let it go on
        result.error = "run interrupted: terminated by signal SIGTERM (the MLflow run is KILLED)"
    elif code and (errors or not result.error):  # error.txt could not be written: the [ERROR] line said it
        result.error = errors[-1] if errors else f"the run ended with exit code {code} (see its [ERROR] line on stderr)"
    return result


def run_child(
    overrides: Sequence[str], out_dir: Union[str, Path], *, timeout: Optional[float] = None, cwd: Optional[Path] = None
) -> RunResult:
    """`python -m bench <overrides>` in a child process that ends with this one (bench.machine.children.run_child:
    DDP's ranks, a run timed from a fresh interpreter), in `out_dir`: the RunResult run() gives, read back
    from the same files (`seconds`: the child's). Raises BenchError, before any child, where compose_config
    refuses the overrides; subprocess.TimeoutExpired past `timeout`."""
    import sys

    from bench.machine.children import run_child as child

    config = compose_config(*[o for o in overrides if not o.lstrip("+~").startswith("hydra.")])
    where = Path(out_dir).resolve()
    where.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    done = child([sys.executable, "-m", "bench", *overrides, f"hydra.run.dir={where}"], timeout=timeout, cwd=cwd)
    return _read_back(RunResult(done.returncode, where, config, seconds=time.perf_counter() - started), done.stderr)
