"""Issue 27 §3 for `python -m bench.compare --rerun`: when the compare is ended by SIGTERM, Ctrl-C
(SIGINT) or SIGKILL, its running `python -m bench` child ends too; SIGTERM and SIGINT end the
compare with exit 143 / 130 and one [ERROR] line. Real processes and real signals; the waits are
for events (the child's log line, the child gone), the timeouts hang guards only."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import psutil
import pytest

HANG_GUARD_S = 600


def gone(process: psutil.Process, guard_s: float = HANG_GUARD_S) -> bool:
    """Waits until `process` has ended (a zombie counts: it runs nothing); False at the hang guard."""
    deadline = time.monotonic() + guard_s
    while time.monotonic() < deadline:
        try:
            if process.status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.1)
    return False


@pytest.mark.parametrize(
    "sig,code",
    [(signal.SIGTERM, 143), (signal.SIGINT, 130), (signal.SIGKILL, -9)],
    ids=["SIGTERM", "SIGINT", "SIGKILL"],
)
def test_a_signal_to_compare_rerun_ends_its_running_child(bench, tiny, tmp_path, sig, code):
    config = [*tiny, "train.steps_per_epoch=100000", "benchmark.log_every=1"]  # trains until it is stopped
    for name in ("base", "cand"):
        (tmp_path / name / ".hydra").mkdir(parents=True)
        (tmp_path / name / ".hydra" / "overrides.yaml").write_text("".join(f"- {o}\n" for o in config))
    out: Path = tmp_path / "out"
    proc = bench.start(
        str(tmp_path / "base"),
        str(tmp_path / "cand"),
        "--rerun",
        "2",
        "--out",
        str(out),
        module="bench.compare",
        start_new_session=True,
    )
    # A-B-B-A, A the baseline: its first run is the first child
    bench.wait_for_line(proc, out / "rerun" / "baseline-1" / "bench.log", "step 2/")  # the child is measuring
    (child,) = psutil.Process(proc.pid).children()
    assert "bench" in child.cmdline() and any(a.endswith("baseline-1") for a in child.cmdline())
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=HANG_GUARD_S)
    assert proc.returncode == code, err
    assert gone(child, 60), f"the python -m bench child {child.pid} outlived the compare ({sig.name})"
    assert not (out / "rerun" / "candidate-1").exists()  # nothing started after the signal
    if sig != signal.SIGKILL:
        assert err.splitlines() == [
            f"[ERROR] bench.compare --rerun interrupted by {sig.name}: a running python -m bench child was "
            f"stopped; the runs so far are in {out / 'rerun'}"
        ], err
