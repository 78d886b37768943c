"""Adding a scenario takes one module and one registry line: a toy scenario ("count": it counts to
N and reports how fast) with its own typed result record is registered here, in the test, and run end
to end through bench.app.run (the function the Hydra task calls) with a real sqlite MLflow store.
Nothing in bench/ changes for it: no column list, plot or mode branch names it."""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Tuple

import pytest

from bench.results import Record, write_json
from bench.scenario_registry import SCENARIOS, register

BENCH = Path(__file__).resolve().parents[2] / "bench"


@dataclass(kw_only=True)
class CountMetrics(Record):
    mode: str = "count"
    counted: int
    count_seconds: float
    counts_per_second: float
    note: Optional[str] = None  # absent from the final line unless set


@dataclass
class CountReport:
    TIMELINE_METRIC, REPEATS_METRIC = "count_step_ms", None
    SWEEP_COLUMNS = [("job", "job", "{}"), ("counted", "counted", "{}"), ("error", "error", "{}")]
    OPTIONAL_COLUMNS, LABEL_COLUMNS = [], []  # type: ignore[var-annotated]
    COMPARE_FIGURE = "counts_per_second"

    record: CountMetrics

    @property
    def metrics(self) -> Dict[str, Any]:
        return self.record.to_metrics()

    @property
    def problems(self) -> List[str]:
        return []

    def headline(self) -> str:
        return f"counted {self.record.counted} in {self.record.count_seconds:.6f} s"

    def write(self, out_dir: Path, config: Mapping[str, Any], environment: Mapping[str, Any],
              run_id: Optional[str]) -> List[Path]:
        out_dir.mkdir(parents=True, exist_ok=True)
        return [write_json(out_dir / "run_summary.json", {"results": self.metrics, "config": dict(config),
                                                          "mlflow_run_id": run_id})]

    def log_to(self, tracker: Any, files: List[Path], out_dir: Path, log_series: bool) -> None:
        tracker.set_tags({"mode": self.record.mode})
        tracker.log_artifacts(files)


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
        return f"count-{config.train.steps_per_epoch}"

    def run_rank(self, config: Any, ctx: Any, out_dir: Path, heartbeat: Any = None) -> CountMetrics:
        start, total = time.perf_counter(), 0
        for _ in range(config.train.steps_per_epoch):
            total += 1
        seconds = time.perf_counter() - start
        return CountMetrics(counted=total, count_seconds=seconds, counts_per_second=total / seconds if seconds else 0.0)

    def report(self, outcome: CountMetrics, config: Any) -> CountReport:
        return CountReport(outcome)

    def explain(self, exc: BaseException, config: Any) -> Optional[str]:
        return None


@pytest.fixture
def count_mode():
    register("count", CountScenario)
    yield "count"
    SCENARIOS.pop("count")


def test_a_registered_toy_scenario_runs_end_to_end_with_its_own_record(count_mode, compose, tmp_path, capsys):
    from mlflow import MlflowClient

    from bench.app import run
    from bench.scenarios import Scenario

    scenario: Scenario = CountScenario()  # the protocol (mypy checks the built-in ones: tests/unit/test_layout.py)
    assert scenario.has_ranks(compose()) is False
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    overrides = [f"mode={count_mode}", "train.steps_per_epoch=1000", f"tracking.uri={uri}", "cpu_threads=1"]
    config = compose(*overrides)
    code = run(config, tmp_path / "run", tmp_path, overrides)
    assert code == 0
    final = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["radix_metrics"]
    assert list(final) == ["mode", "counted", "count_seconds", "counts_per_second"]  # note: None, left out
    assert final["counted"] == 1000 and final["mode"] == "count"
    (only,) = MlflowClient(uri).search_runs([MlflowClient(uri).get_experiment_by_name(config.tracking.experiment)
                                             .experiment_id])
    assert only.info.status == "FINISHED" and only.info.run_name.startswith("count-1000")
    assert only.data.metrics["counted"] == 1000 and only.data.tags["mode"] == "count"
    assert json.loads((tmp_path / "run" / "run_summary.json").read_text())["results"] == final


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
    naming = sorted(str(path.relative_to(BENCH.parent)) for path in BENCH.rglob("*.py")
                    if "bench.infer" in path.read_text() and path.parent.name != "infer"
                    and path.name != "scenario_checks.py")
    assert naming == ["bench/scenario_registry.py"]
    assert "bench.infer" in (BENCH.parent / "pyproject.toml").read_text()
    assert "count" not in SCENARIOS  # the toy left nothing behind in bench/
    # the package (its __init__.py and one module, as the toy's one module here) + the registry + pyproject
    needed = ["bench/<name>/__init__.py", "bench/<name>/scenario.py", *naming, "pyproject.toml"]
    documented = re.search(r"^\| a scenario \| (\d+) \|", (BENCH.parent / "docs" / "architecture.md").read_text(), re.M)
    assert documented and int(documented.group(1)) == len(needed) == 4
