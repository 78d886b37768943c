"""`.ci/suite_time`, the command that times the README's tests as a newcomer runs them (issue 42 item 1)
and compares two commits on one machine, A-B-B-A. Run here on a one-test probe outside the clone
(`--python` this interpreter, no venv made: the venv install is the one step not run here): each run
sees the committed tree freshly cleaned and an empty HOME; a stop signal ends the run's whole suite
(SIGINT first, so pytest ends tidily) and leaves nothing in TMPDIR."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SUITE_TIME = REPO / ".ci" / "suite_time"

# One test: what its run sees (its pid, HOME's contents, the working directory's commit and git
# status), a JSON line to $PROBE_OUT; then it leaves a file in each; with PROBE_WAIT set it then waits
# to be stopped.
PROBE = """
import json, os, subprocess, time


def test_probe():
    git = lambda *args: subprocess.run(["git", *args], capture_output=True, text=True).stdout.strip()
    seen = {"pid": os.getpid(), "home": sorted(os.listdir(os.environ["HOME"])), "cwd": os.getcwd(),
            "commit": git("rev-parse", "HEAD"), "status": git("status", "--porcelain", "--ignored")}
    with open(os.environ["PROBE_OUT"], "a") as out:
        out.write(json.dumps(seen) + "\\n")
    # what a run leaves (mypy's cache, bytecode): the next run must not see it
    os.makedirs(os.path.join(os.environ["HOME"], ".cache"))
    open("left-by-the-last-run", "w").close()
    if os.environ.get("PROBE_WAIT"):
        try:
            time.sleep(900)  # a hang guard: the test stops it long before
        except KeyboardInterrupt:  # suite_time's stop: SIGINT first, as Ctrl-C, so pytest ends tidily
            with open(os.environ["PROBE_OUT"], "a") as out:
                out.write(json.dumps({"ended_by": "KeyboardInterrupt"}) + "\\n")
            raise
"""


@pytest.fixture
def probe(tmp_path):
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("needs a git checkout of bench (suite_time clones its commits)")
    if not Path("/usr/bin/time").exists():
        pytest.skip("needs /usr/bin/time (Debian: apt-get install time)")
    (tmp_path / "test_probe.py").write_text(PROBE)
    (tmp_path / "tmp").mkdir()
    env = {**os.environ, "TMPDIR": str(tmp_path / "tmp"), "PROBE_OUT": str(tmp_path / "seen.jsonl")}
    return tmp_path, env


def suite_time(tmp_path, *args: str) -> list:
    return ["bash", str(SUITE_TIME), "--python", sys.executable, *args, "--", "-q", "-p", "no:cacheprovider",
            str(tmp_path / "test_probe.py")]  # fmt: skip


def test_two_commits_run_a_b_b_a_each_fresh_and_their_ratio_is_printed(probe):
    tmp_path, env = probe
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    # the same commit under two names: two sides, one clone
    proc = subprocess.run(suite_time(tmp_path, "HEAD", head), env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    runs = [line for line in lines if line.startswith("run ")]
    sides = [line.split(": ")[1].split(" ")[0] for line in runs]
    assert sides == ["HEAD", head, head, "HEAD"], proc.stdout  # A-B-B-A
    for line in runs:
        assert re.search(r"wall [\d.]+ s, machine CPU-s [\d.]+ \(the command: user [\d.]+, system [\d.]+\)", line), line
        assert re.search(r"pytest exit 0: 1 passed in [\d.]+s$", line), line
    medians = [line for line in lines if " median of 2: wall " in line]
    assert [line.split(" ")[0] for line in medians] == ["HEAD", head], proc.stdout
    assert re.fullmatch(rf"{head} / HEAD: wall [\d.]+, machine CPU-s [\d.]+", lines[-1]), proc.stdout

    seen = [json.loads(line) for line in (tmp_path / "seen.jsonl").read_text().splitlines()]
    assert len(seen) == 4
    for run in seen:
        assert run["home"] == [] and run["commit"] == head, run  # an empty HOME, the committed tree
        assert run["status"] == "", run  # cleaned: nothing untracked or ignored (no bytecode, no caches)
    assert list((tmp_path / "tmp").iterdir()) == []  # its clones and HOMEs removed


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM], ids=["Ctrl-C", "SIGTERM"])
def test_a_stop_signal_ends_the_running_suite_and_leaves_nothing(probe, stop):
    tmp_path, env = probe
    proc = subprocess.Popen(
        suite_time(tmp_path), env={**env, "PROBE_WAIT": "1"}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    seen = _probe_started(proc, tmp_path / "seen.jsonl")
    pytest_pid = json.loads(seen.read_text().splitlines()[0])["pid"]
    proc.send_signal(stop)
    out, err = proc.communicate(timeout=60)  # a hang guard
    assert proc.returncode == 128 + stop, out + err
    assert "Traceback" not in err and list((tmp_path / "tmp").iterdir()) == []
    assert json.loads(seen.read_text().splitlines()[-1]) == {
        "ended_by": "KeyboardInterrupt"
    }  # not SIGTERM's 20 s later
    deadline = time.monotonic() + 60  # a hang guard: the suite's group was sent SIGTERM before the exit
    while _alive(pytest_pid):
        assert time.monotonic() < deadline, f"the suite's pytest {pytest_pid} outlived suite_time"
        time.sleep(0.05)


def _probe_started(proc: subprocess.Popen, seen: Path) -> Path:
    """Waits for the probe's first line (its test started), failing if suite_time ended first."""
    deadline = time.monotonic() + 300  # a hang guard: the probe's test starts in seconds
    while not seen.exists() or not seen.read_text().endswith("\n"):
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.05)
    return seen


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_a_name_that_is_no_commit_is_one_line_and_makes_nothing(probe):
    tmp_path, env = probe
    proc = subprocess.run(suite_time(tmp_path, "no-such-commit"), env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr == f"[ERROR] no-such-commit is not a commit of {REPO}\n"
    assert list((tmp_path / "tmp").iterdir()) == []


def test_a_sigkill_ends_the_running_suite_by_sigint_and_the_next_run_removes_its_folder(probe):
    """Killed outright, suite_time runs no trap: its suite still ends (pytest asked the kernel for a
    SIGINT at its parent's death: setpriv --pdeathsig), and the folder it left is removed by the next run."""
    tmp_path, env = probe
    proc = subprocess.Popen(suite_time(tmp_path), env={**env, "PROBE_WAIT": "1"}, stdout=subprocess.PIPE, text=True)
    seen = _probe_started(proc, tmp_path / "seen.jsonl")
    proc.kill()
    proc.communicate(timeout=60)
    deadline = time.monotonic() + 60  # a hang guard: SIGINT ends the probe's pytest in a second
    while len(seen.read_text().splitlines()) < 2:
        assert time.monotonic() < deadline, seen.read_text()
        time.sleep(0.05)
    assert json.loads(seen.read_text().splitlines()[-1]) == {"ended_by": "KeyboardInterrupt"}
    (left,) = (tmp_path / "tmp").iterdir()
    assert left.name.startswith("suite_time.")
    again = subprocess.run(suite_time(tmp_path), env=env, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stdout + again.stderr
    assert list((tmp_path / "tmp").iterdir()) == []
