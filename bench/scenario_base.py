"""What a scenario is, and its report's defaults: a scenario writes its keys class (a BaseScenario),
its record (a bench.results.Record whose fields declare how they are shown) and its run_rank, and
overrides a default only where it truly differs; its report is the generic one its record makes
(BaseReport.of) unless it writes more files. The built-in scenarios build on them, and so does
bench/echo.py, the documented example of a new one (docs/architecture.md, "Adding things").

A scenario measures one thing (training, inference, the storage benchmark). It is the class an option
of the config group conf/scenario/ names (`_target_`): a dataclass whose fields are its own keys
(`scenario.<key>`), built when the config loads (`config.scenario`, bench.config.scenario). It owns
its config rules (`check`, run when the config loads, before any MLflow run), what must hold before a
run starts (`preflight`), one rank's work (`run_rank`) and its report type (`report_class`), whose
typed record is the run's output contract and tells the sweep report, the plots and `compare` what
to show: bench.analysis asks it and branches on no mode name.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Dict, List, Mapping, Optional, Tuple, get_type_hints

from bench.report_view import View
from bench.results import read_column, read_summary, write_csv, write_json

if TYPE_CHECKING:
    from bench.config import BenchConfig


@dataclass
class BaseScenario:
    """What most scenarios share. A subclass is a dataclass whose fields are its keys (`scenario.<key>`,
    checked in its __post_init__ like any group's); it sets `record_class` (or a `report_class` of its
    own) and writes `run_rank`, and overrides what differs. Stateless: the instance is the config's,
    pickled to every rank."""

    record_class: ClassVar[Any]  # its record type (a bench.results.Record): the generic report shows it
    report_class: ClassVar[Any]  # its report type (a BaseReport subclass; default: BaseReport.of(record_class))

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "record_class" in cls.__dict__ and "report_class" not in cls.__dict__:
            cls.report_class = BaseReport.of(cls.record_class)

    def preload(self, config: "BenchConfig") -> Tuple[str, ...]:
        return (type(self).__module__,)  # what the elastic launcher's forkserver imports once for its workers

    def has_ranks(self, config: "BenchConfig") -> bool:
        return True  # run_rank in one process per rank, started by a launcher (a sweep job: a process of its own)

    def check(self, config: "BenchConfig") -> None:
        """Rules that span this scenario's keys and the groups' (ConfigError), when the config loads."""

    def preflight(self, config: "BenchConfig") -> None:
        """What only the world can tell (a dataset on disk, a device), before any MLflow run."""

    def run_name(self, config: "BenchConfig") -> str:
        return str(config.mode)

    def report(self, outcome: Any, config: "BenchConfig") -> Any:
        return self.report_class.from_outcome(outcome, config)

    def explain(self, exc: BaseException, config: "BenchConfig") -> Optional[str]:
        return None  # a known failure in one line (None: the exception's type and text, a traceback file)


class BaseReport:
    """What most reports share, built on the typed record: the metrics are the record serialised,
    nothing fails after the measurement, run_summary.json and summary.csv are the files (read back by
    `from_files`), the MLflow run gets the tags its record declares and the files. A subclass is a
    dataclass with a `record` field (its record type: what from_files reads back) and a `view`
    (View.of its record type)."""

    view: ClassVar[View]
    record: Any  # the scenario's typed record (a bench.results.Record)
    TIMELINE_FILE: ClassVar[Optional[str]] = None  # the per-step (per-request) file, read back for the sweep
    TIMELINE_COLUMN: ClassVar[str] = ""

    @classmethod
    def of(cls, record_class: Any) -> Any:
        """The generic report of a record type: its files, tags and view all the record's declarations."""
        name = f"{record_class.__name__}Report"
        namespace = {"__annotations__": {"record": record_class}, "view": View.of(record_class)}
        return dataclass(type(name, (cls,), {**namespace, "__module__": record_class.__module__}))

    @classmethod
    def from_outcome(cls, outcome: Any, config: "BenchConfig") -> Any:
        return cls(outcome)  # type: ignore[call-arg]  # rank 0's outcome: the record

    @property
    def metrics(self) -> Dict[str, Any]:
        """The radix_metrics dict (final line, summary.csv, MLflow): the record, serialised."""
        return dict(self.record.to_metrics())

    @property
    def problems(self) -> List[str]:
        return []  # what failed after the measurement: the run ends FAILED, its figures stand

    @property
    def interrupted(self) -> Optional[str]:
        return None  # a signal during passes after the window: reported, then KILLED

    def headline(self) -> str:
        sample = self.view.sample
        value = self.metrics.get(sample.figure)
        return f"{self.record.mode}: {value:.4g} {sample.unit}" if value is not None else str(self.record.mode)

    def write(
        self, out_dir: Path, config: Mapping[str, Any], environment: Mapping[str, Any], run_id: Optional[str]
    ) -> List[Path]:
        summary = {"results": self.metrics, "environment": dict(environment), "config": dict(config)}
        return self.write_summary(out_dir, {**summary, "mlflow_run_id": run_id})

    def write_summary(self, out_dir: Path, summary: Mapping[str, Any]) -> List[Path]:
        """run_summary.json (what from_files and an upload read back) and summary.csv (the metrics, one row)."""
        out_dir.mkdir(parents=True, exist_ok=True)
        metrics = summary["results"]
        return [
            write_json(out_dir / "run_summary.json", summary),
            write_csv(out_dir / "summary.csv", list(metrics), [metrics]),
        ]

    def log_to(self, tracker: Any, files: List[Path], out_dir: Path, log_series: bool) -> None:
        """Everything but the metrics (logged first, on their own): the record's tags, artifacts."""
        if tracker.active:
            tracker.set_tags(self.record.tags())
            self.log_files(tracker, files, out_dir)

    @staticmethod
    def log_files(tracker: Any, files: List[Path], out_dir: Path) -> None:
        """The run's files, its logs and Hydra's .hydra/ as MLflow artifacts."""
        tracker.log_artifacts([*files, *sorted(out_dir.glob("*.log")), out_dir / ".hydra"])

    @classmethod
    def from_files(cls, job_dir: Path) -> Any:
        """The report of a finished run, read back from its directory (to upload it later)."""
        record = get_type_hints(cls)["record"]
        return cls(record.from_metrics(read_summary(job_dir)["results"]))  # type: ignore[call-arg]

    @classmethod
    def timeline(cls, job_dir: Path) -> List[float]:
        """One value per step or request, as the run wrote it ([]: none)."""
        return read_column(job_dir / cls.TIMELINE_FILE, cls.TIMELINE_COLUMN) if cls.TIMELINE_FILE else []

    @classmethod
    def repeats(cls, job_dir: Path) -> List[float]:
        return []  # view.sample.figure per measured window ([]: one window)

    @classmethod
    def read_back(cls, job_dir: Path) -> Dict[str, Any]:
        return {}  # sweep frame columns of its own (training: val_curve)

    @classmethod
    def read_back_mlflow(cls, client: Any, run_id: str) -> Dict[str, Any]:
        return {}  # the same, from MLflow
