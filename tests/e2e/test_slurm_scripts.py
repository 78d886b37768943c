"""Slurm for real, a single-node Slurm started by `.ci/slurm up` (skipped where there is none): the
sbatch scripts in launchers/ on the CPU (GPU requests off). A file apart from test_slurm.py's sweeps,
so that pytest-xdist's workers (a file each, --dist loadfile) share the Slurm tests' time."""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest
from test_slurm import _slurm_job_once_ended

# the `slurm` fixture skips without a running cluster; without Slurm's client at all, say so first
pytestmark = pytest.mark.skipif(shutil.which("sbatch") is None, reason="needs Slurm's sbatch (.ci/slurm up)")
CPUS = f"--cpus-per-task={min(2, os.cpu_count() or 1)}"  # the CPU the sbatch scripts' jobs ask for here


def sbatch(bench, repo, tmp_path, script: str, options: list, overrides: list, **env: str) -> dict:
    """Submit, wait for the job to end, and return the final radix_metrics line of its output.
    (Polled with scontrol: `sbatch --wait` backs off to 30 s between checks.)"""
    out = tmp_path / "slurm-%j.out"
    # stderr apart, as the launchers have it: in one file slurmstepd cut the result line at 1 KiB
    # with a log line from stderr (json: "Expecting ':' delimiter: ... (char 1024)")
    submitted = subprocess.run(
        [
            "sbatch",
            "--parsable",
            f"--output={out}",
            f"--error={tmp_path / 'slurm-%j.err'}",
            "--chdir",
            str(tmp_path),
            *options,
            str(repo / "launchers" / script),
            *overrides,
        ],
        cwd=tmp_path,
        env=bench.env(bench.uri, **env),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert submitted.returncode == 0, submitted.stderr
    job = submitted.stdout.strip().split(";")[0]
    shown, state = _slurm_job_once_ended(job)
    text = (tmp_path / f"slurm-{job}.out").read_text()
    errors = (tmp_path / f"slurm-{job}.err").read_text()
    assert state == "COMPLETED", f"job {job} ended {state}\n{text[-3000:]}\n{errors[-3000:]}"
    assert "ExitCode=0:0" in shown
    lines = [line for line in text.splitlines() if line.startswith('{"radix_metrics"')]
    assert len(lines) == 1, text[-3000:] + errors[-3000:]  # rank 0 only
    return json.loads(lines[0])["radix_metrics"]


def test_slurm_single_gpu_script_on_cpu(slurm, bench, repo, tiny, tmp_path):
    metrics = sbatch(bench, repo, tmp_path, "slurm_single_gpu.sbatch", ["--gpus-per-task=0", CPUS], tiny)
    assert metrics["world_size"] == 1 and metrics["measured_steps"] == 3
    (run,) = bench.runs()
    assert run.info.status == "FINISHED"


def test_slurm_multinode_script_runs_torchrun_ddp(slurm, bench, repo, tiny, tmp_path):
    """srun -> torchrun (c10d at the head node) -> 2 bench ranks that join; rank 0 reports."""
    metrics = sbatch(
        bench,
        repo,
        tmp_path,
        "slurm_ddp_multinode.sbatch",
        ["--nodes=1", "--gpus-per-node=0", CPUS],
        tiny,
        GPUS_PER_NODE="2",
        RUN_DIR=str(tmp_path / "run"),
    )
    assert metrics["world_size"] == 2 and metrics["params_in_sync"] is True
    assert (tmp_path / "run" / "rank0.log").is_file() and (tmp_path / "run" / "rank1.log").is_file()
    # torchrun's folder (its ranks' error files) is the run's, not a torchelastic_* left in the node's /tmp
    (job_output,) = tmp_path.glob("slurm-*.out")
    job = job_output.stem.removeprefix("slurm-")
    assert [p.name.split("_")[0] for p in (tmp_path / "run" / "torchrun").iterdir()] == [job]
    (run,) = bench.runs()
    assert run.info.status == "FINISHED" and run.data.metrics["world_size"] == 2
