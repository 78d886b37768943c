"""Faults survived: processes that die or stop under a DDP job. A rank killed with SIGKILL or
stopped with SIGSTOP ends the job within its timeouts, names that rank, leaves no process and
an MLflow run that is FAILED; a launcher killed with SIGKILL takes its workers down with it,
and the run it left RUNNING is found (and ended KILLED) by `python -m bench.tools.stale`.
Waits are for events (a rank's log line, a process going); timeouts are hang guards only."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from bench.rank_context import free_port

HANG_GUARD_S = 900


def test_kill_9_of_a_rank_ends_the_job_failed(bench, long_ddp_run):
    """distributed.timeout_s is an hour, so what ends the job is the launcher seeing rank 1 die
    (and the reaper killing its peer), not the hang watchdog: the test needs no clock margin."""
    bench.with_store()  # the store is not what these tests are about: a copy of a new one, no migration
    proc, run_dir = long_ddp_run.start(timeout_s=3600), long_ddp_run.run_dir
    rank1 = long_ddp_run.wait_for_rank1_steps()
    tree = long_ddp_run.tree
    assert rank1 in {p.pid for p in tree}
    psutil.Process(rank1).send_signal(signal.SIGKILL)
    out, err = proc.communicate(timeout=HANG_GUARD_S)  # a hang guard far below the 3600 s watchdog

    assert proc.returncode == 1, err
    assert "radix_metrics" not in out
    errors = bench.error_lines(err)
    assert len(errors) == 1, err
    assert "rank 1" in errors[0] and "SIGKILL" in errors[0], errors
    assert "Traceback" not in err
    assert "no training step finished" not in (run_dir / "rank0.log").read_text()  # not the watchdog
    (run,) = bench.runs()
    assert run.info.status == "FAILED"
    assert "rank 1" in run.data.tags["error"]
    assert long_ddp_run.left_alive(tree) == []


def test_sigstop_of_a_rank_ends_the_job_and_names_it(bench, long_ddp_run):
    """Rank 1 stopped (SIGSTOP): rank 0 blocks in an all-reduce until distributed.timeout_s ends
    it (the collective's own timeout or, where a backend does not honour it, the step
    watchdog); the job then ends FAILED naming rank 1, the one that stopped (not rank 0, the
    live one that gave up waiting), and leaves no process behind. No wall-clock margin."""
    bench.with_store()
    proc = long_ddp_run.start(timeout_s=8)
    rank1 = long_ddp_run.wait_for_rank1_steps()
    tree = long_ddp_run.tree
    psutil.Process(rank1).send_signal(signal.SIGSTOP)
    try:
        _out, err = proc.communicate(timeout=HANG_GUARD_S)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the job was still running {HANG_GUARD_S} s after rank 1 was stopped")

    assert proc.returncode == 1, err
    errors = bench.error_lines(err)
    assert len(errors) == 1, err
    assert f"worker rank 1 (pid {rank1}) was stopped" in errors[0] and "rank 0 then gave up" in errors[0], errors[0]
    assert "Traceback" not in err
    (run,) = bench.runs()
    assert run.info.status == "FAILED"
    assert run.data.tags["error"]
    assert long_ddp_run.left_alive(tree) == []


def test_kill_9_of_the_launcher_takes_its_workers_down_and_the_run_is_found_stale(bench, long_ddp_run):
    """Issue 9: SIGKILL of the process that launched the workers left them training until the
    step watchdog (minutes) and the MLflow run RUNNING for ever. Now the workers see their
    launcher gone within seconds and end (distributed.timeout_s is an hour, so it is not the
    step watchdog), and `python -m bench.tools.stale --mark` ends the run KILLED.

    First, while the job still trains, the stale tool leaves the live run alone (what was
    test_stale_tool_leaves_a_live_run_alone, on a DDP job of its own: the same job serves both)."""
    bench.with_store()  # the store is not what these tests are about: a copy of a new one, no migration
    proc, run_dir = long_ddp_run.start(timeout_s=3600), long_ddp_run.run_dir
    long_ddp_run.wait_for_rank1_steps()
    tree = long_ddp_run.tree
    # the stale tool leaves a live run alone
    marked = bench.run("--tracking-uri", bench.uri, "--mark", module="bench.tools.stale")
    assert marked.returncode == 0 and " alive " in marked.stdout and "0 stale" in marked.stderr
    assert bench.runs()[0].info.status == "RUNNING"
    assert proc.poll() is None  # the job trains on: what follows is the launcher's SIGKILL

    workers = [
        p for p in tree if p.pid in {int(f.read_text().split()[0]) for f in (run_dir / "workers").glob("*/rank*.pid")}
    ]
    assert len(workers) == 2
    proc.kill()  # SIGKILL: no handler runs, nothing is cleaned up by the launcher
    proc.communicate(timeout=HANG_GUARD_S)
    assert long_ddp_run.left_alive(workers, wait_s=HANG_GUARD_S) == []  # the event: both workers are gone
    # Each rank checks its launcher every second; the first to see it gone ends, and its peer, if
    # its own check has not come yet, fails in the next all-reduce (gloo: connection reset). Either
    # way within seconds, not the hour of distributed.timeout_s.
    noticed = [rank for rank in (0, 1) if "the process that launched it" in (run_dir / f"rank{rank}.log").read_text()]
    assert noticed, "neither rank logged that its launcher is gone"
    for rank in {0, 1} - set(noticed):
        (error,) = (run_dir / "workers").glob(f"*/*/attempt_0/{rank}/error.json")
        text = error.read_text()
        assert any(lost in text for lost in ("Connection reset by peer", "Connection closed", "Broken pipe")), text
    (run,) = bench.runs()
    assert run.info.status == "RUNNING"  # nobody was left to end it

    listed = bench.run("--tracking-uri", bench.uri, module="bench.tools.stale")
    assert listed.returncode == 0 and f"{run.info.run_id}" in listed.stdout and " gone " in listed.stdout
    assert bench.runs()[0].info.status == "RUNNING"  # listing changes nothing
    marked = bench.run("--tracking-uri", bench.uri, "--mark", module="bench.tools.stale")
    assert marked.returncode == 0 and "1 stale (marked KILLED)" in marked.stderr
    (run,) = bench.runs()
    assert run.info.status == "KILLED" and f"pid {proc.pid}" in run.data.tags["error"]


@pytest.mark.slow
@pytest.mark.parametrize("stop, code", [(signal.SIGINT, 130), (signal.SIGKILL, -9)], ids=["Ctrl-C", "SIGKILL"])
def test_a_stopped_torchrun_ends_its_ranks_and_rank0_ends_its_run_killed(bench, tiny, tmp_path, repo, stop, code):
    """launchers/torchrun_multinode.sh stopped. Ctrl-C: torchrun stops its ranks; it printed torch's
    SignalException traceback and exited 1, now one line and 130 (bench.tools.torchrun). SIGKILL:
    torchrun starts each rank in a session of its own and, killed, forwards nothing: both ranks trained
    on for nobody and rank 0's run stayed RUNNING; a rank torchrun started now asks the kernel for
    SIGTERM when torchrun dies. Either way both ranks end and rank 0's run is KILLED."""
    bench.with_store()
    run_dir = tmp_path / "run"
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"  # python and torchrun: this env's
    nodes = {"HEAD": "127.0.0.1", "PORT": str(free_port()), "NNODES": "1", "GPUS": "2", "RUN_DIR": str(run_dir)}
    long_run = [*tiny, "train.steps_per_epoch=100000", "benchmark.log_every=1", "benchmark.progress=true"]
    torchrun = subprocess.Popen(  # the script execs torchrun: this pid is torchrun's, its group too
        ["bash", str(repo / "launchers" / "torchrun_multinode.sh"), *long_run],
        cwd=bench.cwd,
        env=bench.env(PATH=path, **nodes),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    ranks: list = []
    try:
        bench.wait_for_line(torchrun, run_dir / "rank1.log", "step 2/")
        ranks = psutil.Process(torchrun.pid).children()
        assert len(ranks) == 2
        os.killpg(torchrun.pid, stop)  # Ctrl-C reaches the terminal's process group: torchrun's
        _, err = torchrun.communicate(timeout=HANG_GUARD_S)
        _, alive = psutil.wait_procs(ranks, timeout=HANG_GUARD_S)  # the event: both ranks are gone
        assert alive == []
    finally:
        for process in ranks:  # a failed assertion leaves no rank training on
            with contextlib.suppress(psutil.Error):
                process.kill()
        torchrun.kill()
    assert torchrun.returncode == code, err
    if stop == signal.SIGINT:
        assert "Traceback" not in err, err
        assert bench.error_lines(err)[-1] == "[ERROR] torchrun stopped by SIGINT, and its ranks with it", err
    else:  # the kernel's SIGTERM, as the rank says
        assert "[ERROR] run interrupted: terminated by signal SIGTERM" in err, err
    (run,) = bench.runs()
    assert run.info.status == "KILLED", run.data.tags
