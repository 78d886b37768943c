"""The fast tier (`python -m pytest -m "not slow"`) is chosen by what a test does, in tests/conftest.py:
a test that starts a process or a server (through a fixture, its own code or a helper of its module)
is marked `slow` at collection; and in a `-m "not slow"` session a test the marking missed (its
process started by a helper elsewhere) fails, saying to mark it, instead of hiding in the fast tier."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]

HELPER = """
import subprocess, sys

def start_one():
    subprocess.run([sys.executable, "-c", "pass"], check=True)
"""

CASES = """
import subprocess, sys
import pytest
from helper import start_one

def _local_start():
    subprocess.run([sys.executable, "-c", "pass"], check=True)

def test_in_process():
    assert sum([1, 2]) == 3

def test_calls_subprocess_itself():
    subprocess.run([sys.executable, "-c", "pass"], check=True)

def test_calls_a_helper_of_its_module():
    _local_start()

def test_uses_the_bench_fixture(bench):
    pass

@pytest.fixture
def started():
    _local_start()

def test_uses_a_fixture_that_starts_one(started):
    pass

def test_starts_one_through_another_modules_helper():
    start_one()
"""


def _pytest(where: Path, *args: str) -> subprocess.CompletedProcess:
    # the suite's conftest as a plugin, in a session of its own (its own rootdir: no addopts)
    env = {"PYTHONPATH": f"{TESTS}:{TESTS.parent}:{where}", "PATH": "/usr/bin:/bin", "HOME": str(where)}
    command = [sys.executable, "-m", "pytest", "-p", "conftest", "-p", "no:cacheprovider", "-n", "0", *args]
    return subprocess.run(command, cwd=where, env=env, capture_output=True, text=True, timeout=600)


@pytest.mark.slow  # a pytest session of its own
def test_the_fast_tier_leaves_out_what_starts_a_process_and_fails_what_the_marking_missed(tmp_path):
    (tmp_path / "helper.py").write_text(HELPER)
    (tmp_path / "test_cases.py").write_text(CASES)

    fast = _pytest(tmp_path, "-v", "-m", "not slow", "test_cases.py")
    ran = sorted(
        line.split("::")[1].split()[:2]
        for line in fast.stdout.splitlines()
        if line.startswith("test_cases.py::") and (" PASSED" in line or " FAILED" in line)
    )
    # the four that start a process (itself, a helper of its module, a fixture, bench's) were not run
    assert ran == [["test_in_process", "PASSED"], ["test_starts_one_through_another_modules_helper", "FAILED"]], (
        fast.stdout + fast.stderr
    )
    assert "1 failed, 1 passed, 4 deselected" in fast.stdout, fast.stdout
    assert (
        "test_cases.py::test_starts_one_through_another_modules_helper starts a process (subprocess): mark it slow"
        in fast.stdout
    ), fast.stdout
