"""The scenario protocol: what a run's code must offer, checked by the type checker, and the
helpers the app and the analysis use to reach a mode's code (bench.scenario_registry maps a
mode name to its class).

A scenario measures one thing (training, inference, the storage benchmark). It owns its config
rules (`check`, run when the config loads, before any MLflow run), what must hold before a run
starts (`preflight`), one rank's work (`run_rank`) and its report type (`report_class`), whose
typed result record is the run's output contract and which tells the sweep report, the plots and
`compare` what to show: bench.analysis asks it and branches on no mode name.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Dict, List, Mapping, Optional, Protocol, Sequence, Tuple

from bench.scenario_registry import DEFAULT_MODE, SCENARIOS, register, scenario_class

__all__ = [
    "SCENARIOS",
    "Launcher",
    "Report",
    "ReportClass",
    "Scenario",
    "Tracker",
    "has_ranks",
    "register",
    "report_class",
    "report_class_of_modes",
    "scenario_class",
    "scenario_for",
]

if TYPE_CHECKING:
    import pandas as pd

    from bench.config import BenchConfig
    from bench.launch.context import RankContext

Column = Tuple[str, str, str]  # (header, frame column = a radix_metrics key, format)


class Tracker(Protocol):
    """An MLflow run, or none (bench.tracking.tracker)."""

    run_id: Optional[str]

    @property
    def active(self) -> bool: ...

    def log_metrics(self, metrics: Mapping[str, Any], step: int = 0) -> None: ...

    def log_series(self, name: str, values: Sequence[float]) -> None: ...

    def log_params(self, params: Mapping[str, Any]) -> None: ...

    def set_tags(self, tags: Mapping[str, Any]) -> None: ...

    def rename(self, name: str) -> None: ...

    def log_artifacts(self, paths: Sequence[Path]) -> None: ...

    def finish(self, status: str, error: Optional[str] = None) -> None: ...

    def ui_link(self, children: bool = False) -> Optional[str]: ...

    lost: str  # why the run is not (or no longer) tracked; "" while it is


class Report(Protocol):
    """What a scenario's report offers the app (one run) and the analysis (a sweep of runs)."""

    @property
    def problems(self) -> List[str]: ...  # what failed after the measurement: the run ends FAILED, the figures stand

    @property
    def metrics(self) -> Dict[str, Any]: ...  # the radix_metrics dict: the typed record, serialised

    def headline(self) -> str: ...

    def write(
        self, out_dir: Path, config: Mapping[str, Any], environment: Mapping[str, Any], run_id: Optional[str]
    ) -> List[Path]: ...

    def log_to(self, tracker: Tracker, files: List[Path], out_dir: Path, log_series: bool) -> None: ...


class ReportClass(Protocol):
    """The report type: how a finished run is read back and shown in a sweep."""

    TIMELINE_METRIC: ClassVar[str]  # the MLflow series of the per-step figure (step times, latencies)
    REPEATS_METRIC: ClassVar[Optional[str]]  # the MLflow series of benchmark.repeats' windows (None: none)
    SWEEP_COLUMNS: ClassVar[List[Column]]  # the sweep table; "error" last
    OPTIONAL_COLUMNS: ClassVar[List[Column]]  # shown before "error" when some job has them
    LABEL_COLUMNS: ClassVar[List[Column]]  # what names a single run in `compare` (prefix, figure, format)
    COMPARE_FIGURE: ClassVar[str]  # the throughput `compare` takes when a run has no samples

    def from_files(self, job_dir: Path) -> Any: ...

    def timeline(self, job_dir: Path) -> List[float]: ...

    def repeats(self, job_dir: Path) -> List[float]: ...

    def sweep_plots(self, frame: "pd.DataFrame", out: Path, title: str) -> List[Path]: ...


class Scenario(Protocol):
    # modules a launcher's forkserver imports once for this config (its workers fork from it)
    def preload(self, config: "BenchConfig") -> Tuple[str, ...]: ...

    @property
    def report_class(self) -> Any: ...  # a ReportClass (a class: its classmethods satisfy the protocol)

    def has_ranks(self, config: "BenchConfig") -> bool: ...  # started by a launcher, one process per rank

    def check(self, config: "BenchConfig") -> None: ...  # this mode's config rules; raises ConfigError

    def preflight(self, config: "BenchConfig") -> None: ...  # data on disk, the device...; raises BenchError

    def run_name(self, config: "BenchConfig") -> str: ...  # when tracking.run_name is not set

    def run_rank(
        self, config: "BenchConfig", ctx: "RankContext", out_dir: Path, heartbeat: Optional[Callable[[], None]] = None
    ) -> Any: ...  # rank 0's outcome, else None

    def report(self, outcome: Any, config: "BenchConfig") -> Report: ...

    def explain(self, exc: BaseException, config: "BenchConfig") -> Optional[str]: ...  # a known failure, one line


class Launcher(Protocol):
    @property
    def reports(self) -> bool: ...  # this process reports the run (final line, files, MLflow)

    @property
    def who(self) -> str: ...  # names it in a failure line when it does not

    def run(self, scenario: Scenario, config: "BenchConfig", out_dir: Path) -> Any: ...


def scenario_for(mode: Any) -> Scenario:
    scenario: Scenario = scenario_class(mode)()
    return scenario


def has_ranks(scenario: Scenario, config: "BenchConfig") -> bool:
    return bool(scenario.has_ranks(config))


def report_class(mode: Any) -> Any:
    """The report type of a run recorded with this mode (a name read back from a file or MLflow;
    runs recorded before `mode` existed are training runs)."""
    return scenario_class(str(mode) if str(mode) in SCENARIOS else DEFAULT_MODE).report_class


def report_class_of_modes(modes: Sequence[Any]) -> Any:
    """The report type that shows a sweep: its jobs' one mode (a sweep of mixed modes, or with
    none recorded, is shown as training runs are)."""
    names = {str(m) for m in modes}
    return report_class(names.pop() if len(names) == 1 else DEFAULT_MODE)


def all_report_classes() -> Dict[str, Any]:
    return {mode: scenario_class(mode).report_class for mode in SCENARIOS}
