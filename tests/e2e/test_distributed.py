"""DDP on the CPU (gloo) in real processes: a 2-process run end to end, strong scaling, a
killed and a hung worker, torchrun joining, two nodes on loopback, and the distributed config
errors. Waits are for events (a rank's log line, the job's exit); the timeouts are hang guards."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from bench.rank_context import free_port

HANG_GUARD_S = 900
DDP2 = ["distributed=ddp", "distributed.nproc_per_node=2"]
JOINED = re.compile(r"rank (\d+)/(\d+) \(pid (\d+)\) joined the process group")


# ---- a 2-process run -------------------------------------------------------------------------


def test_two_process_ddp_end_to_end_with_strong_scaling(bench, tiny, tmp_path):
    """One run checks both: DDP end to end, and strong scaling (data.batch_size=8 is the
    global batch, split into 4 per process)."""
    bench.with_store()
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
        sum(
            json.loads((run_dir / "run_summary.json").read_text())["results"][k]
            for k in ("rank_images_per_second_min", "rank_images_per_second_max")
        )
    )

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


# ---- torchrun ----------------------------------------------------------------------------------


def test_torchrun_ranks_join_and_rank0_reports(bench, tiny, tmp_path, repo):
    """launchers/torchrun_multinode.sh as a user runs it on each node (here one node of 2 ranks,
    HEAD on loopback): torchrun's c10d rendezvous, its ranks join and rank 0 alone reports. Its
    rdzv-id once held the run folder's `/`, and torchrun, which makes its log folder from the id,
    failed at every start."""
    bench.with_store()
    run_dir = tmp_path / "run"
    # torchrun beside this interpreter, as an activated environment puts it first on PATH
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
    nodes = {"HEAD": "127.0.0.1", "PORT": str(free_port()), "NNODES": "1", "GPUS": "2", "RUN_DIR": str(run_dir)}
    proc = subprocess.run(
        ["bash", str(repo / "launchers" / "torchrun_multinode.sh"), *tiny],
        cwd=bench.cwd,
        env=bench.env(PATH=path, **nodes),
        capture_output=True,
        text=True,
        timeout=HANG_GUARD_S,
    )
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
    # torchrun's own folder is the run's, named by the id every node shares (not a torchelastic_* in /tmp)
    (attempts,) = (run_dir / "torchrun").iterdir()
    assert attempts.name.startswith(f"bench-127.0.0.1-{nodes['PORT']}_") and (attempts / "attempt_0").is_dir()


def test_two_nodes_launched_by_bench_on_loopback(bench, tiny, tmp_path):
    """Multi-node without torchrun: two `python -m bench` processes (node_rank 0 and 1), one
    worker each, meet at rdzv_endpoint; node 0 holds rank 0 and alone reports and logs. The
    rendezvous timeout is a hang guard: a loaded machine may start the two nodes minutes apart."""
    bench.with_store()
    common = [
        *tiny,
        "distributed=ddp",
        "distributed.nnodes=2",
        "distributed.nproc_per_node=1",
        f"distributed.rdzv_endpoint=127.0.0.1:{free_port()}",
        f"distributed.timeout_s={HANG_GUARD_S}",
    ]
    leader, follower = bench.run_two_nodes(common, tmp_path)
    metrics = bench.metrics(leader)
    assert metrics["world_size"] == 2 and metrics["params_in_sync"] is True
    assert follower.returncode == 0, follower.stderr
    assert follower.stdout == ""  # node 1 neither prints a final line nor writes results
    assert not (tmp_path / "node1" / "run_summary.json").exists()
    assert (tmp_path / "node1" / "rank1.log").is_file()
    (run,) = bench.runs()
    assert run.info.status == "FINISHED"


# ---- config errors -----------------------------------------------------------------------------


# the distributed config's refusals are rows of the bad-input table (tests/reliability/bad_inputs.py)
