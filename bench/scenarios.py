"""What a scenario is: the Protocols a type checker verifies (bench.scenario_base gives a scenario and its
report what most share, so a new one writes only what differs: bench/echo.py, the documented example).

A scenario measures one thing (training, inference, the storage benchmark). It is the class an option of
the config group conf/scenario/ names (`_target_`): a dataclass whose fields are its own keys
(`scenario.<key>`), built when the config loads (`config.scenario`, bench.config.scenario). It owns its
config rules (`check`, run when the config loads, before any MLflow run), what must hold before a run
starts (`preflight`), one rank's work (`run_rank`) and its report type (`report_class`), whose typed
result record is the run's output contract and which tells the sweep report, the plots and `compare` what
to show: bench.analysis asks it and branches on no mode name.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Mapping, Optional, Protocol, Sequence, Tuple, TypeVar

from bench.config.scenario import names, scenario_class
from bench.errors import ConfigError, ReportError
from bench.report_view import Sample as Sample  # re-exported: the protocols' value types
from bench.report_view import Scaling as Scaling
from bench.report_view import View as View

DEFAULT_MODE = "train"  # runs recorded before `mode` existed are training runs

if TYPE_CHECKING:
    from bench.config import BenchConfig
    from bench.rank_context import RankContext


class Tracker(Protocol):
    """An MLflow run, or none (bench.tracking.tracker)."""

    run_id: Optional[str]
    name: str  # the run's name, tracked or not

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


Outcome = TypeVar("Outcome")  # what rank 0's run_rank returns and report() takes
R = TypeVar("R", bound="Report", covariant=True)  # a scenario's report type


class Report(Protocol):
    """What a scenario's report offers the app (one run): the one report protocol."""

    @property
    def problems(self) -> List[str]: ...  # what failed after the measurement: the run ends FAILED, the figures stand

    @property
    def interrupted(self) -> Optional[str]: ...  # a signal during the passes after the window: the run ends KILLED

    @property
    def record(self) -> Any: ...  # the scenario's typed result record (a bench.results.Record)

    @property
    def metrics(self) -> Dict[str, Any]: ...  # the radix_metrics dict: the typed record, serialised

    def headline(self) -> str: ...

    def write(
        self, out_dir: Path, config: Mapping[str, Any], environment: Mapping[str, Any], run_id: Optional[str]
    ) -> List[Path]: ...

    def log_to(self, tracker: Tracker, files: List[Path], out_dir: Path, log_series: bool) -> None: ...


class ReportClass(Protocol[R]):
    """The report type (a class: its class attributes and classmethods satisfy this): what a sweep
    shows of its runs and how a finished run is read back."""

    @property
    def view(self) -> View: ...

    def from_files(self, job_dir: Path) -> R: ...

    def timeline(self, job_dir: Path) -> List[float]: ...  # one value per step or request ([]: none)

    def repeats(self, job_dir: Path) -> List[float]: ...  # view.sample.figure per measured window ([]: one)

    def read_back(self, job_dir: Path) -> Dict[str, Any]: ...  # frame columns of its own (training: val_curve)

    def read_back_mlflow(self, client: Any, run_id: str) -> Dict[str, Any]: ...  # the same, from MLflow


class Scenario(Protocol[Outcome, R]):
    """A mode's code: `Scenario[its outcome, its report]`."""

    # modules a launcher's forkserver imports once for this config (its workers fork from it)
    def preload(self, config: "BenchConfig") -> Tuple[str, ...]: ...

    @property
    def report_class(self) -> ReportClass[R]: ...

    def has_ranks(self, config: "BenchConfig") -> bool: ...  # started by a launcher, one process per rank

    def check(self, config: "BenchConfig") -> None: ...  # this mode's config rules; raises ConfigError

    def preflight(self, config: "BenchConfig") -> None: ...  # data on disk, the device...; raises BenchError

    def run_name(self, config: "BenchConfig") -> str: ...  # when tracking.run_name is not set

    def run_rank(
        self, config: "BenchConfig", ctx: "RankContext", out_dir: Path, heartbeat: Optional[Callable[[], None]] = None
    ) -> Optional[Outcome]: ...  # rank 0's outcome, else None

    def report(self, outcome: Outcome, config: "BenchConfig") -> R: ...

    def explain(self, exc: BaseException, config: "BenchConfig") -> Optional[str]: ...  # a known failure, one line


AnyScenario = Scenario[Any, Report]


class Launcher(Protocol):
    @property
    def reports(self) -> bool: ...  # this process reports the run (final line, files, MLflow)

    @property
    def who(self) -> str: ...  # names it in a failure line when it does not

    def run(self, scenario: AnyScenario, config: "BenchConfig", out_dir: Path) -> Any: ...


def mode_name(mode: Any) -> str:
    """A recorded mode as a name: none recorded (None, NaN, "": a run from before modes) is training."""
    if mode is None or (isinstance(mode, float) and mode != mode) or str(mode) in ("", "None"):
        return DEFAULT_MODE
    return str(mode)


def report_class(mode: Any) -> ReportClass[Report]:
    """The report type of a run recorded with this mode (a name read back from a file or MLflow;
    runs recorded before `mode` existed, None here, are training runs). A mode no scenario has is
    refused in one line (ReportError, exit 2): its figures cannot be read as another scenario's."""
    mode = mode_name(mode)
    try:
        reports: ReportClass[Report] = scenario_class(mode).report_class
    except ConfigError:
        raise ReportError(
            f"a run recorded with mode={mode} has no scenario here (conf/scenario/: {', '.join(names())}): "
            "its figures cannot be read as another scenario's"
        ) from None
    return reports


def report_class_of_modes(modes: Sequence[Any]) -> ReportClass[Report]:
    """The report type that shows a sweep: its jobs' one mode (a sweep of mixed modes, or with
    none recorded, is shown as training runs are)."""
    found = {mode_name(m) for m in modes}
    return report_class(found.pop() if len(found) == 1 else DEFAULT_MODE)
