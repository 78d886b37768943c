"""Issue 28, "stop means stop": a signal to the doctor ends its whole ladder within seconds (no
further rung, what-if or verdict), its MLflow parent and the rung in progress end KILLED, exit
130/143, no traceback and no process left. Real processes, real signals; the waits are for
events (a rank's log line), the timeouts hang guards only."""

from __future__ import annotations

import os
import signal
import time

import psutil
import pytest

HANG_GUARD_S = 900
# the e2e doctor tests' fast model; a budget whose rungs would each run for a minute or more
DOCTOR = ["allow_cpu=true", "model=small_cnn", "data.image_size=8", "data.batch_size=64", "doctor.budget_s=900"]


def _alive(processes: list, wait_s: float = 30.0) -> list:
    """The processes (psutil) still running after up to `wait_s` (a zombie is not running)."""
    deadline = time.monotonic() + wait_s
    while True:
        alive = []
        for process in processes:
            try:
                if process.is_running() and process.status() != psutil.STATUS_ZOMBIE:
                    alive.append(process)
            except psutil.NoSuchProcess:
                pass
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.1)


@pytest.mark.parametrize("sig,code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)], ids=["SIGTERM", "Ctrl-C"])
def test_a_signal_ends_the_doctors_whole_ladder_killed(bench, tmp_path, sig, code):
    out = tmp_path / "doctor"
    proc = bench.start(*DOCTOR, f"doctor.out={out}", module="bench.doctor", env=bench.env(bench.uri),
                       start_new_session=True)
    bench.wait_for_line(proc, out / "1-compute" / "rank0.log", "worker for rank 0/1 started")  # in the first rung
    tree = psutil.Process(proc.pid).children(recursive=True)
    signalled = time.monotonic()
    if sig == signal.SIGINT:
        os.killpg(proc.pid, sig)  # what a terminal's Ctrl-C does: the rung's worker gets it too
    else:
        proc.send_signal(sig)
    stdout, stderr = proc.communicate(timeout=HANG_GUARD_S)
    took = time.monotonic() - signalled
    assert proc.returncode == code, stderr
    assert "Traceback" not in stderr and "KeyboardInterrupt" not in stderr, stderr
    assert f"[ERROR] the doctor was interrupted (terminated by signal {sig.name})" in stderr
    assert "4-full" not in stderr and not (out / "4-full").exists()  # no further rung
    assert not (out / "doctor.json").exists() and stdout == ""  # no verdict, no table
    assert took < 60, took  # seconds, not the budget's rungs (a hang guard on a loaded machine)
    runs = bench.runs()
    assert sorted((r.data.tags.get("doctor", ""), r.info.status) for r in runs) == [("", "KILLED"), ("parent", "KILLED")]
    assert _alive(tree) == []
