"""DDP on the CPU (gloo) in real processes: a 2-process run end to end, strong scaling, a
killed and a hung worker, torchrun joining, two nodes on loopback, and the distributed config
errors. Waits are for events (a rank's log line, the job's exit); the timeouts are hang guards."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import psutil
import pytest

from bench.launch.context import free_port

HANG_GUARD_S = 900
DDP2 = ["distributed=ddp", "distributed.nproc_per_node=2"]
JOINED = re.compile(r"rank (\d+)/(\d+) \(pid (\d+)\) joined the process group")



# ---- a 2-process run -------------------------------------------------------------------------


def test_two_process_ddp_end_to_end_with_strong_scaling(bench, tiny, tmp_path):
    """One run checks both: DDP end to end, and strong scaling (data.batch_size=8 is the
    global batch, split into 4 per process)."""
    run_dir = tmp_path / "run"
    proc = bench.run(*tiny, *DDP2, "distributed.scaling=strong", "data.batch_size=8", f"hydra.run.dir={run_dir}")
    metrics = bench.metrics(proc)

    assert proc.stdout.strip().splitlines() == [proc.stdout.strip()], proc.stdout  # the final line only
    assert metrics["world_size"] == 2
    assert metrics["batch_size"] == 4 and metrics["global_batch_size"] == 8
    assert metrics["scaling"] == "strong" and metrics["distributed"] == "ddp"
    assert metrics["total_images"] == 2 * 4 * 3
    assert metrics["params_in_sync"] is True
    assert 0 < metrics["rank_images_per_second_min"] <= metrics["rank_images_per_second_max"]
    assert metrics["images_per_second"] == pytest.approx(
        sum(json.loads((run_dir / "run_summary.json").read_text())["results"][k]
            for k in ("rank_images_per_second_min", "rank_images_per_second_max")))

    summary = json.loads((run_dir / "run_summary.json").read_text())
    ranks = summary["ranks"]
    assert sorted(r["rank"] for r in ranks) == [0, 1]
    checksums = [r["param_checksum"] for r in ranks]
    assert checksums[0] == checksums[1] and checksums[0] != 0  # gradients were all-reduced
    assert summary["results"]["world_size"] == 2

    logs = {rank: (run_dir / f"rank{rank}.log").read_text() for rank in (0, 1)}
    for rank, text in logs.items():
        match = JOINED.search(text)
        assert match and match.group(1) == str(rank) and match.group(2) == "2", text
    assert JOINED.search(logs[0]).group(3) != JOINED.search(logs[1]).group(3)  # two processes

    (run,) = bench.runs()
    assert run.info.status == "FINISHED"
    assert run.data.metrics["world_size"] == 2
    assert run.data.metrics["global_batch_size"] == 8
    assert run.data.params["distributed.scaling"] == "strong"


# ---- failing workers ---------------------------------------------------------------------------


def _start_long_run(bench, tiny, tmp_path: Path, timeout_s: int) -> tuple:
    run_dir = tmp_path / "run"
    proc = bench.start(*tiny, *DDP2, "train.steps_per_epoch=100000", "benchmark.log_every=1",
                       f"distributed.timeout_s={timeout_s}", f"hydra.run.dir={run_dir}", start_new_session=True)
    return proc, run_dir


def _wait_for_rank1_steps(proc: subprocess.Popen, run_dir: Path) -> int:
    """rank 1's pid, once its log shows it joined and trained a couple of steps (the event)."""
    log = run_dir / "rank1.log"
    deadline = time.monotonic() + HANG_GUARD_S
    while time.monotonic() < deadline and proc.poll() is None:
        text = log.read_text() if log.exists() else ""
        match = JOINED.search(text)
        if match and "step 2/" in text:
            return int(match.group(3))
        time.sleep(0.3)
    proc.kill()
    out, err = proc.communicate(timeout=60)
    pytest.fail(f"rank 1 never trained 2 steps (exit {proc.returncode})\n{out}\n{err}")


def _tree(proc: subprocess.Popen) -> list:
    return psutil.Process(proc.pid).children(recursive=True)


def _left_alive(processes: list, wait_s: float = 60.0) -> list:
    deadline = time.time() + wait_s
    while True:
        alive = []
        for p in processes:
            try:
                if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                    alive.append(p)
            except psutil.NoSuchProcess:
                pass
        if not alive or time.time() > deadline:
            return alive
        time.sleep(0.2)


def _cleanup(proc: subprocess.Popen, tree: list) -> None:
    for p in tree:
        try:
            p.send_signal(signal.SIGCONT)
            p.kill()
        except psutil.Error:
            pass
    if proc.poll() is None:
        proc.kill()
        proc.communicate(timeout=30)


def test_killed_worker_ends_the_job_failed(bench, tiny, tmp_path):
    """distributed.timeout_s is an hour, so what ends the job is the launcher seeing rank 1 die
    (and the reaper killing its peer), not the hang watchdog: the test needs no clock margin."""
    proc, run_dir = _start_long_run(bench, tiny, tmp_path, timeout_s=3600)
    tree: list = []
    try:
        rank1 = _wait_for_rank1_steps(proc, run_dir)
        tree = _tree(proc)
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
        assert _left_alive(tree) == []
    finally:
        _cleanup(proc, tree)


def test_stopped_worker_ends_the_job_and_is_named(bench, tiny, tmp_path):
    """Rank 1 stopped (SIGSTOP): rank 0 blocks in an all-reduce until distributed.timeout_s ends
    it (the collective's own timeout or, where a backend does not honour it, the step
    watchdog); the job then ends FAILED naming rank 1, the one that stopped (not rank 0, the
    live one that gave up waiting), and leaves no process behind. No wall-clock margin."""
    timeout_s = 8
    proc, run_dir = _start_long_run(bench, tiny, tmp_path, timeout_s=timeout_s)
    tree: list = []
    try:
        rank1 = _wait_for_rank1_steps(proc, run_dir)
        tree = _tree(proc)
        psutil.Process(rank1).send_signal(signal.SIGSTOP)
        try:
            out, err = proc.communicate(timeout=HANG_GUARD_S)
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
        assert _left_alive(tree) == []
    finally:
        _cleanup(proc, tree)


def test_ctrl_c_to_a_ddp_job_ends_it_killed_with_130(bench, tiny, tmp_path):
    """Ctrl-C reaches the whole process group (launcher and workers): the run ends KILLED with
    exit 130 (issue 9: it was 143), one line, no process left."""
    proc, run_dir = _start_long_run(bench, tiny, tmp_path, timeout_s=3600)
    tree: list = []
    try:
        _wait_for_rank1_steps(proc, run_dir)
        tree = _tree(proc)
        os.killpg(proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C does
        out, err = proc.communicate(timeout=HANG_GUARD_S)
        assert proc.returncode == 130, err
        assert bench.error_lines(err) == ["[ERROR] run interrupted: terminated by signal SIGINT"], err
        assert "Traceback" not in err and "death signal" not in err
        (run,) = bench.runs()
        assert run.info.status == "KILLED"
        assert _left_alive(tree) == []
    finally:
        _cleanup(proc, tree)


def test_killed_launcher_takes_its_workers_down_and_the_run_is_found_stale(bench, tiny, tmp_path):
    """Issue 9: SIGKILL of the process that launched the workers left them training until the
    step watchdog (minutes) and the MLflow run RUNNING for ever. Now the workers see their
    launcher gone within seconds and end (distributed.timeout_s is an hour, so it is not the
    step watchdog), and `python -m bench.tools.stale --mark` ends the run KILLED."""
    proc, run_dir = _start_long_run(bench, tiny, tmp_path, timeout_s=3600)
    tree: list = []
    try:
        _wait_for_rank1_steps(proc, run_dir)
        tree = _tree(proc)
        workers = [p for p in tree if p.pid in {int(f.read_text().split()[0]) for f in (run_dir / "workers").glob("*.pid")}]
        assert len(workers) == 2
        proc.kill()  # SIGKILL: no handler runs, nothing is cleaned up by the launcher
        proc.communicate(timeout=HANG_GUARD_S)
        assert _left_alive(workers, wait_s=HANG_GUARD_S) == []  # the event: both workers are gone
        for rank in (0, 1):
            assert "the process that launched it" in (run_dir / f"rank{rank}.log").read_text()
        (run,) = bench.runs()
        assert run.info.status == "RUNNING"  # nobody was left to end it

        listed = bench.run("--tracking-uri", bench.uri, module="bench.tools.stale")
        assert listed.returncode == 0 and f"{run.info.run_id}" in listed.stdout and " gone " in listed.stdout
        assert bench.runs()[0].info.status == "RUNNING"  # listing changes nothing
        marked = bench.run("--tracking-uri", bench.uri, "--mark", module="bench.tools.stale")
        assert marked.returncode == 0 and "1 stale (marked KILLED)" in marked.stderr
        (run,) = bench.runs()
        assert run.info.status == "KILLED" and f"pid {proc.pid}" in run.data.tags["error"]
    finally:
        _cleanup(proc, tree)


def test_stale_tool_leaves_a_live_run_alone(bench, tiny, tmp_path):
    proc, run_dir = _start_long_run(bench, tiny, tmp_path, timeout_s=3600)
    tree: list = []
    try:
        _wait_for_rank1_steps(proc, run_dir)
        tree = _tree(proc)
        marked = bench.run("--tracking-uri", bench.uri, "--mark", module="bench.tools.stale")
        assert marked.returncode == 0 and " alive " in marked.stdout and "0 stale" in marked.stderr
        assert bench.runs()[0].info.status == "RUNNING"
    finally:
        _cleanup(proc, tree)


# ---- torchrun ----------------------------------------------------------------------------------


def test_torchrun_ranks_join_and_rank0_reports(bench, tiny, tmp_path):
    run_dir = tmp_path / "run"
    proc = bench.run("--nproc-per-node", "2", "--master-port", str(free_port()), "-m", "bench", *DDP2,
                     f"hydra.run.dir={run_dir}", *tiny, module="torch.distributed.run")
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    # rank 0's final line belongs on stdout (as with the launcher), not on stderr
    assert "radix_metrics" not in proc.stderr, "rank 0 printed its final line to stderr, not stdout"
    assert proc.stdout.count("radix_metrics") == 1, proc.stdout  # rank 0 only
    metrics = bench.metrics(proc)  # the last stdout line
    assert metrics["world_size"] == 2 and metrics["global_batch_size"] == 8
    assert metrics["params_in_sync"] is True
    assert (run_dir / "rank0.log").is_file() and (run_dir / "rank1.log").is_file()
    summary = json.loads((run_dir / "run_summary.json").read_text())
    assert len({r["param_checksum"] for r in summary["ranks"]}) == 1
    (run,) = bench.runs()  # one MLflow run, not one per rank
    assert run.info.status == "FINISHED" and run.data.metrics["world_size"] == 2


def test_two_nodes_launched_by_bench_on_loopback(bench, tiny, tmp_path):
    """Multi-node without torchrun: two `python -m bench` processes (node_rank 0 and 1), one
    worker each, meet at rdzv_endpoint; node 0 holds rank 0 and alone reports and logs. The
    rendezvous timeout is a hang guard: a loaded machine may start the two nodes minutes apart."""
    common = [*tiny, "distributed=ddp", "distributed.nnodes=2", "distributed.nproc_per_node=1",
              f"distributed.rdzv_endpoint=127.0.0.1:{free_port()}", f"distributed.timeout_s={HANG_GUARD_S}"]
    follower = bench.start(*common, "distributed.node_rank=1", f"hydra.run.dir={tmp_path}/node1")
    try:
        leader = bench.run(*common, "distributed.node_rank=0", f"hydra.run.dir={tmp_path}/node0")
        follower_out, follower_err = follower.communicate(timeout=HANG_GUARD_S)
    finally:
        follower.kill()
    metrics = bench.metrics(leader)
    assert metrics["world_size"] == 2 and metrics["params_in_sync"] is True
    assert follower.returncode == 0, follower_err
    assert follower_out == ""  # node 1 neither prints a final line nor writes results
    assert not (tmp_path / "node1" / "run_summary.json").exists()
    assert (tmp_path / "node1" / "rank1.log").is_file()
    (run,) = bench.runs()
    assert run.info.status == "FINISHED"


# ---- config errors -----------------------------------------------------------------------------


@pytest.mark.parametrize("overrides,key", [
    (["distributed=single", "distributed.nproc_per_node=2"], "distributed.nproc_per_node"),
    ([*DDP2, "distributed.scaling=strong", "data.batch_size=5"], "data.batch_size"),
    (["distributed=ddp", "distributed.nnodes=2"], "distributed.rdzv_endpoint"),
    (["distributed=ddp", "distributed.backend=mpi"], "distributed.backend"),
])
def test_distributed_config_errors(bench, tiny, tmp_path, overrides, key):
    proc = bench.run(*tiny, *overrides, f"hydra.run.dir={tmp_path}/run")
    assert proc.returncode == 2, f"{proc.stdout}\n{proc.stderr}"
    errors = bench.error_lines(proc.stderr)
    assert len(errors) == 1 and key in errors[0], proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
    assert proc.stdout.strip() == ""
    assert not bench.db.exists()
