"""The scenario protocol is checked, not a docstring: mypy verifies that every built-in scenario,
the MLflow tracker and the launchers satisfy bench.scenarios' Protocols, and that bench/app.py and
bench/scenarios.py type-check against them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

CONFORMANCE = """
from bench.infer.scenario import InferScenario
from bench.iobench.scenario import StorageScenario
from bench.launch.launchers import Elastic, InProcess, Joined
from bench.scenarios import Launcher, Scenario, Tracker
from bench.tracking.tracker import Tracker as MlflowTracker
from bench.train.scenario import TrainScenario

scenarios: list[Scenario] = [TrainScenario(), InferScenario(), StorageScenario()]
tracker: Tracker = MlflowTracker()
launchers: list[type[Launcher]] = [InProcess, Elastic, Joined]
"""

BROKEN = """
from bench.scenarios import Scenario


class NoReport:
    preload = ()
    report_class = object

    def has_ranks(self, config: object) -> bool:
        return False


scenario: Scenario = NoReport()
"""


def _mypy(tmp_path: Path, source: str) -> subprocess.CompletedProcess:
    pytest.importorskip("mypy")
    module = tmp_path / "conformance.py"
    module.write_text(source)
    return subprocess.run([sys.executable, "-m", "mypy", "--ignore-missing-imports", "--follow-imports=silent",
                           "--cache-dir", str(tmp_path / "cache"), str(module), str(ROOT / "bench" / "app.py"),
                           str(ROOT / "bench" / "scenarios.py")],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)


def test_built_in_scenarios_tracker_and_launchers_satisfy_the_protocols(tmp_path):
    done = _mypy(tmp_path, CONFORMANCE)
    assert done.returncode == 0, done.stdout
    broken = _mypy(tmp_path, BROKEN)  # the check can fail: a scenario without report/run_rank is refused
    assert broken.returncode == 1 and '"NoReport", variable has type "Scenario"' in broken.stdout, broken.stdout
