"""The scenario protocol is checked, not a docstring: mypy verifies that every built-in scenario,
the MLflow tracker and the launchers satisfy bench.scenarios' Protocols (bench/scenario_checks.py,
checked with the rest of bench/ by tests/unit/test_static_checks.py's mypy run, which also checks
bench/app.py against them), and here that the check can fail: a class that lacks the Protocol's
methods is refused."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

BROKEN = """
from bench.scenarios import Scenario


class NoReport:
    report_class = object

    def preload(self, config: object) -> tuple:
        return ()

    def has_ranks(self, config: object) -> bool:
        return False


scenario: Scenario = NoReport()
"""


def _mypy(tmp_path: Path, source: str) -> subprocess.CompletedProcess:
    pytest.importorskip("mypy")
    module = tmp_path / "conformance.py"
    module.write_text(source)
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--ignore-missing-imports",
            "--follow-imports=silent",
            "--cache-dir",
            str(tmp_path / "cache"),
            str(module),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_the_conformance_module_is_in_what_mypy_checks():
    mypy_section = (ROOT / "pyproject.toml").read_text().split("[tool.mypy]", 1)[1].split("\n[", 1)[0]
    assert 'files = ["bench"]' in mypy_section and (ROOT / "bench" / "scenario_checks.py").is_file()
    text = (ROOT / "bench" / "scenario_checks.py").read_text()
    built_in = (
        "TrainScenario()",
        "InferScenario()",
        "StorageScenario()",
        "MlflowTracker()",
        "InProcess, Elastic, Joined",
    )
    for name in built_in:
        assert name in text


def test_a_scenario_without_the_protocols_methods_is_refused(tmp_path):
    broken = _mypy(tmp_path, BROKEN)  # the check can fail: a scenario without report/run_rank is refused
    assert broken.returncode == 1 and '"NoReport", variable has type "Scenario[' in broken.stdout, broken.stdout


REPORT_CLASSES = """
from pathlib import Path
from typing import Any, Dict, List, Optional

from bench.iobench.report import StorageReport
from bench.scenarios import Report, ReportClass


class NoView(StorageReport):  # a report class whose view is gone: what compare samples is undeclared
    view = None  # type: ignore[assignment]


checked: List[ReportClass[Report]] = [StorageReport]  # the built-in one: accepted
refused: ReportClass[Report] = NoView
"""


def test_a_report_class_is_checked_by_mypy_as_a_class_object(tmp_path):
    """issue 29: the ReportClass protocol's ClassVar members could never be matched by a class object,
    so mypy refused every report class and the protocol was documentation. Its members are now a
    property and methods, which a class's attributes and classmethods satisfy: a built-in report
    class passes, one without a View is refused."""
    checked = _mypy(tmp_path, REPORT_CLASSES)
    assert checked.returncode == 1 and checked.stdout.count("error:") == 1, checked.stdout
    assert 'expression has type "type[NoView]", variable has type "ReportClass[Report]"' in checked.stdout
