"""Adding a scenario takes one module and one registry line: a toy scenario ("count": it counts to
N and reports how fast) with its own config namespace (`count.steps`: it borrows no other scenario's
keys), its own typed result record and its own report class (what a sweep and a compare show of it)
is registered here, in the test, run end to end through bench.app.run (the function the Hydra task
calls) with a real sqlite MLflow store, swept by Hydra's multirun (in this process: the registration
lives here) and two of its runs compared. Nothing in bench/ changes for it: no column list, plot,
key or mode branch names it."""

from __future__ import annotations

import json
import logging
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Tuple

import pytest

from bench.errors import ConfigError
from bench.results import Record, read_summary, write_json
from bench.scenario_registry import SCENARIOS
from bench.scenarios import Sample, View, register, unregister

BENCH = Path(__file__).resolve().parents[2] / "bench"


@dataclass
class CountOptions:
    """The toy's own config namespace: `count.steps=...` (checked here, one line when wrong)."""

    steps: int = 1000

    def __post_init__(self) -> None:
        if self.steps < 1:
            raise ConfigError("count.steps", self.steps, "a positive count")


@dataclass(kw_only=True)
class CountMetrics(Record):
    mode: str = "count"
    counted: int
    count_seconds: float
    counts_per_second: float
    note: Optional[str] = None  # absent from the final line unless set


def count_plots(frame: Any, out: Path, title: str) -> List[Path]:
    return []  # a toy: no plots


@dataclass
class CountReport:
    view = View(
        sample=Sample("counts_per_second", "counts/s"),  # compare: the run's own figure, in its unit
        columns=[
            ("job", "job", "{}"),
            ("overrides", "overrides", "{}"),
            ("counted", "counted", "{}"),
            ("counts/s", "counts_per_second", "{:.0f}"),
            ("error", "error", "{}"),
        ],
        plots=count_plots,
        label_columns=[("counted=", "counted", "int")],
    )

    record: CountMetrics
    interrupted: Optional[str] = None  # no passes after the count: never

    @property
    def metrics(self) -> Dict[str, Any]:
        return self.record.to_metrics()

    @property
    def problems(self) -> List[str]:
        return []

    def headline(self) -> str:
        return f"counted {self.record.counted} in {self.record.count_seconds:.6f} s"

    def write(
        self, out_dir: Path, config: Mapping[str, Any], environment: Mapping[str, Any], run_id: Optional[str]
    ) -> List[Path]:
        out_dir.mkdir(parents=True, exist_ok=True)
        return [
            write_json(
                out_dir / "run_summary.json", {"results": self.metrics, "config": dict(config), "mlflow_run_id": run_id}
            )
        ]

    def log_to(self, tracker: Any, files: List[Path], out_dir: Path, log_series: bool) -> None:
        tracker.set_tags({"mode": self.record.mode})
        tracker.log_artifacts(files)

    @classmethod
    def from_files(cls, job_dir: Path) -> "CountReport":
        return cls(CountMetrics.from_metrics(read_summary(job_dir)["results"]))

    @classmethod
    def timeline(cls, job_dir: Path) -> List[float]:
        return []

    @classmethod
    def repeats(cls, job_dir: Path) -> List[float]:
        return []

    @classmethod
    def read_back(cls, job_dir: Path) -> Dict[str, Any]:
        return {}

    @classmethod
    def read_back_mlflow(cls, client: Any, run_id: str) -> Dict[str, Any]:
        return {}


class CountScenario:
    report_class = CountReport

    def preload(self, config: Any) -> Tuple[str, ...]:
        return ()  # nothing for a forkserver: this scenario has no ranks

    def has_ranks(self, config: Any) -> bool:
        return False  # this process counts

    def check(self, config: Any) -> None:
        pass

    def preflight(self, config: Any) -> None:
        pass

    def run_name(self, config: Any) -> str:
        return f"count-{config.count.steps}"

    def run_rank(self, config: Any, ctx: Any, out_dir: Path, heartbeat: Any = None) -> CountMetrics:
        start, total = time.perf_counter(), 0
        for _ in range(config.count.steps):
            total += 1
        seconds = time.perf_counter() - start
        return CountMetrics(counted=total, count_seconds=seconds, counts_per_second=total / seconds if seconds else 0.0)

    def report(self, outcome: CountMetrics, config: Any) -> CountReport:
        return CountReport(outcome)

    def explain(self, exc: BaseException, config: Any) -> Optional[str]:
        return None


@pytest.fixture
def count_mode():
    # the namespace as a built-in names it in bench/scenario_registry.py's OPTIONS: "module:Class"
    register("count", CountScenario, options=f"{__name__}:CountOptions")
    yield "count"
    unregister("count")
    from bench.config.schema import register_configs

    register_configs()  # the stored schema without the toy's namespace again, for whatever runs next here


def test_a_registered_toy_scenario_runs_end_to_end_with_its_own_record(count_mode, compose, tmp_path, capsys):
    from mlflow import MlflowClient

    from bench.app import run
    from bench.scenarios import Scenario

    scenario: Scenario[CountMetrics, CountReport] = CountScenario()  # mypy checks the built-in ones
    assert scenario.has_ranks(compose()) is False
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    overrides = [f"mode={count_mode}", "count.steps=1000", f"tracking.uri={uri}", "cpu_threads=1"]
    config = compose(*overrides)
    assert config.count.steps == 1000 and config.train.steps_per_epoch != 1000  # its own key, no other's
    code = run(config, tmp_path / "run", tmp_path, overrides)
    assert code == 0
    final = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["radix_metrics"]
    assert list(final) == ["mode", "counted", "count_seconds", "counts_per_second"]  # note: None, left out
    assert final["counted"] == 1000 and final["mode"] == "count"
    (only,) = MlflowClient(uri).search_runs(
        [MlflowClient(uri).get_experiment_by_name(config.tracking.experiment).experiment_id]
    )
    assert only.info.status == "FINISHED" and only.info.run_name.startswith("count-1000")
    assert only.data.metrics["counted"] == 1000 and only.data.tags["mode"] == "count"
    assert only.data.params["count.steps"] == "1000"  # its namespace is a config group like the others
    assert json.loads((tmp_path / "run" / "run_summary.json").read_text())["results"] == final
    with pytest.raises(ConfigError, match=r"count.steps=0 is not valid: accepted a positive count"):
        compose(f"mode={count_mode}", "count.steps=0")


def test_the_toy_scenario_is_swept_and_two_of_its_runs_compared(count_mode, tmp_path, monkeypatch, capsys):
    """A Hydra multirun over its own key (the sweep callback's MLflow parent run and report: the
    toy's columns), then `bench.compare` of two of its jobs: its figure, in its unit."""
    from hydra.core.global_hydra import GlobalHydra

    from bench.__main__ import main
    from bench.config.schema import register_configs
    from bench.tools.compare import main as compare

    register_configs()  # the schema with the toy's namespace (python -m bench registers it at import)
    GlobalHydra.instance().clear()
    sweep = tmp_path / "sweep"
    monkeypatch.setattr(
        sys,
        "argv",
        [
            "bench",
            "-m",
            f"mode={count_mode}",
            "count.steps=100,200",
            f"tracking.uri=sqlite:///{tmp_path}/mlflow.db",
            f"hydra.sweep.dir={sweep}",
        ],
    )
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:
        main()
    finally:  # Hydra's state and its logging set-up stay in this test
        GlobalHydra.instance().clear()
        root.handlers[:] = handlers
        root.setLevel(level)
    jobs = [json.loads((sweep / str(n) / "run_summary.json").read_text())["results"] for n in (0, 1)]
    assert [j["counted"] for j in jobs] == [100, 200]
    report = (sweep / "report" / "report.md").read_text() if (sweep / "report").is_dir() else ""
    table = capsys.readouterr().out
    assert "counts/s" in table and "count.steps" in table + report  # the toy's own columns, its swept key

    assert compare([str(sweep / "0"), str(sweep / "1"), "--out", str(tmp_path / "out")]) in (0, 1)
    header, row = capsys.readouterr().out.splitlines()[:2]
    assert "baseline counts/s" in header and "candidate counts/s" in header
    assert float(row[41:61]) == pytest.approx(jobs[0]["counts_per_second"], abs=0.051)
    assert float(row[62:82]) == pytest.approx(jobs[1]["counts_per_second"], abs=0.051)


def test_an_unregistered_mode_is_refused_naming_the_registered_ones(compose):
    from bench.errors import ConfigError

    with pytest.raises(ConfigError, match=r"mode='count' is not valid: accepted one of train, storage, inference"):
        compose("mode=count")


def test_a_scenario_is_one_package_and_one_registry_line():
    """The file count of docs/architecture.md ("a scenario: 4 files"): the toy above needed this one
    module and a register() call; the built-in inference scenario is named outside its package only
    by bench/scenario_registry.py (and pyproject's package list)."""
    # bench/scenario_checks.py names every built-in scenario for the type checker only (never run):
    # a new scenario may add itself there to be checked, it need not
    naming = sorted(
        str(path.relative_to(BENCH.parent))
        for path in BENCH.rglob("*.py")
        if "bench.infer" in path.read_text() and path.parent.name != "infer" and path.name != "scenario_checks.py"
    )
    assert naming == ["bench/scenario_registry.py"]
    assert "bench.infer" in (BENCH.parent / "pyproject.toml").read_text()
    assert "count" not in SCENARIOS  # the toy left nothing behind in bench/
    # the package (its __init__.py and one module, as the toy's one module here) + the registry + pyproject
    needed = ["bench/<name>/__init__.py", "bench/<name>/scenario.py", *naming, "pyproject.toml"]
    documented = re.search(r"^\| a scenario \| (\d+) \|", (BENCH.parent / "docs" / "architecture.md").read_text(), re.M)
    assert documented and int(documented.group(1)) == len(needed) == 4
