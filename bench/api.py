"""bench from Python: the seed's `get_default_config()`, `TrainingConfig(...)` and
`Trainer(config).train()`, as three functions over bench's own typed config and result records.
A run takes the path `python -m bench` takes (bench.app.run: preflight, tracker, launcher,
report, files, MLflow), so the same overrides give the same run and the same files.

    from bench.api import compose_config, run

    config = compose_config("+experiment=digits_tta", "data.root=./digits")  # a checked BenchConfig
    config.train.epochs = 3                       # edit it as a dataclass: run() checks it again
    result = run(config, out_dir="runs/digits")   # or run(["+experiment=digits_tta", ...])
    result.ok, result.metrics.images_per_second, result.metrics.val_top1
    [(e.epoch, e.data_wait_seconds, e.compute_seconds) for e in result.epochs]

A config that cannot work raises bench.errors.BenchError (ConfigError, ConfigProblem: the
sentence `python -m bench` prints) before any work; a run that fails returns its exit code and
`error` (error.txt's text), as the command's exit code and files say it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, List, Optional, Sequence, Union

from omegaconf import OmegaConf

from bench.config import BenchConfig, compose, load

__all__ = ["RunResult", "compose_config", "default_config", "run"]


def default_config() -> BenchConfig:
    """The schema's defaults, as `python -m bench` with no override runs them (the seed's get_default_config)."""
    return compose()


def compose_config(*overrides: str) -> BenchConfig:
    """The checked config of `python -m bench <overrides>` (Hydra's compose API; no run directory)."""
    return compose(*overrides)


@dataclass
class RunResult:
    """What one run gave back: its exit code, its directory, and its typed records."""

    exit_code: int  # 0: finished; 2: refused before any work; 1: failed; 130/143: interrupted
    out_dir: Path  # run_summary.json, metrics_epoch.jsonl, ... as `python -m bench` writes them
    config: BenchConfig
    metrics: Any = None  # the mode's record (TrainMetrics, InferMetrics, StorageMetrics); None if none was written
    epochs: List[Any] = field(default_factory=list)  # training: an EpochRecord per epoch
    error: Optional[str] = None  # error.txt: why the run failed

    @property
    def ok(self) -> bool:
        return self.exit_code == 0


def run(
    config: Union[BenchConfig, Sequence[str]],
    out_dir: Union[str, Path, None] = None,
    launch_dir: Union[str, Path, None] = None,
) -> RunResult:
    """Run one benchmark in this process: `config` is a BenchConfig (checked again, so edits count)
    or the overrides of `python -m bench`. `out_dir`: the run's directory (default
    `outputs/<date>/<time>` under `launch_dir`, the current directory unless given, where the
    default MLflow store `mlflow.db` lives too)."""
    from bench.app import run as run_bench
    from bench.scenarios import report_class

    overrides = [] if isinstance(config, BenchConfig) else [str(o) for o in config]
    checked = load(OmegaConf.structured(config)) if isinstance(config, BenchConfig) else compose(*overrides)
    launch = Path(launch_dir or Path.cwd()).resolve()
    where = Path(out_dir) if out_dir is not None else default_out_dir(launch)
    where.mkdir(parents=True, exist_ok=True)
    code = run_bench(checked, where, launch, overrides)
    result = RunResult(exit_code=code, out_dir=where, config=checked)
    if (where / "run_summary.json").is_file():
        report = report_class(checked.mode).from_files(where)
        result.metrics = report.record
        result.epochs = list(getattr(getattr(report, "result", None), "epochs", None) or [])
    if (where / "error.txt").is_file():
        result.error = (where / "error.txt").read_text().strip()
    return result


def default_out_dir(launch: Path) -> Path:
    """`<launch>/outputs/<date>/<time>`, this call's own even when another run starts in the same
    second (`-2`, `-3`, ... then: bench.run_dirs, as `python -m bench`)."""
    from bench.run_dirs import RUN_BASE, reserve

    return reserve(launch / RUN_BASE).path
