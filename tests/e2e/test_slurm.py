"""Slurm for real, a single-node Slurm started by `.ci/slurm up` (skipped where there is none):
sweeps whose jobs are Slurm jobs (hydra/launcher=slurm; launchers/' sbatch scripts: test_slurm_scripts.py),
with GPU requests turned off on the command line so they run on the CPU with gloo. And where
there is no Slurm (its commands taken off PATH): hydra/launcher=slurm refused in one line."""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from pathlib import Path

import pytest

# ---- sweeps whose jobs are Slurm jobs (hydra/launcher=slurm) -------------------------------------------


def _sweep_runs(bench, uri=None) -> tuple:
    runs = bench.runs(uri)
    (parent,) = [run for run in runs if run.data.tags.get("sweep") == "parent"]
    children = {run.data.tags["sweep.job"]: run for run in runs if "sweep.job" in run.data.tags}
    assert len(runs) == 1 + len(children)
    for child in children.values():
        assert child.data.tags["mlflow.parentRunId"] == parent.info.run_id
        assert child.data.tags["bench.pid"] != parent.data.tags["bench.pid"]  # it ran in a Slurm job
    return parent, children


def _report_rows(sweep_dir) -> dict:
    import csv

    with (sweep_dir / "report" / "report.csv").open() as fh:
        return {row["job"]: row for row in csv.DictReader(fh)}


def _slurm_job_once_ended(job_id: str, hang_guard_s: float = 900) -> tuple[str, str]:
    """`scontrol show job` once the job has left the running states, and its final state. A sweep's
    launcher reads a job's result file before Slurm has ended that job (its epilog, its step's exit),
    so a just-finished sweep's job may still show RUNNING for a moment: wait for the state, not a time."""
    deadline = time.monotonic() + hang_guard_s
    while True:
        shown = subprocess.run(["scontrol", "show", "job", job_id], capture_output=True, text=True, timeout=30).stdout
        state = re.search(r"JobState=(\w+)", shown).group(1)
        if state not in ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING"):
            return shown, state
        assert time.monotonic() < deadline, f"job {job_id} still {state} after {hang_guard_s:.0f} s"
        time.sleep(0.5)


SLURM_COMMANDS = ("sbatch", "srun")


def path_without_slurm(shadows: Path) -> str:
    """$PATH with every folder that holds sbatch or srun replaced by a folder of links to all
    its other programs (Slurm may be installed in /usr/bin here, by .ci/slurm)."""
    folders = []
    for number, folder in enumerate(os.environ["PATH"].split(os.pathsep)):
        if folder and any(os.path.exists(os.path.join(folder, command)) for command in SLURM_COMMANDS):
            shadow = shadows / str(number)
            shadow.mkdir(parents=True)
            for entry in os.scandir(folder):
                if entry.name not in SLURM_COMMANDS:
                    (shadow / entry.name).symlink_to(entry.path)
            folder = str(shadow)
        folders.append(folder)
    return os.pathsep.join(folders)


def test_a_slurm_sweep_without_slurm_is_one_line_before_any_run(bench, tiny, tmp_path):
    """Issue 18: a 17-frame traceback ("Could not detect srun") and the sweep's MLflow parent
    left KILLED "interrupted"; now one line and exit 2 before the parent run or the sweep dir."""
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher", reason="needs hydra-submitit-launcher (bench[slurm])")
    path = path_without_slurm(tmp_path / "path")
    proc = bench.run(
        "-m",
        *tiny,
        "hydra/launcher=slurm",
        "precision=fp32,bf16",
        f"hydra.sweep.dir={tmp_path}/sweep",
        env=bench.env(PATH=path),
    )
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and not proc.stdout
    assert bench.error_lines(proc.stderr) == [
        "[ERROR] hydra/launcher=slurm needs Slurm's sbatch and srun on PATH; not found: sbatch, srun. Use "
        "hydra/launcher=slurm_local to run the jobs through submitit's local executor, or run on a Slurm login node"
    ]
    assert not bench.db.exists() and not (tmp_path / "sweep").exists()  # no MLflow store, no run, no sweep dir


def test_a_slurm_sweep_is_one_parent_with_a_child_per_slurm_job_and_counts_its_failures(slurm, bench, tiny, tmp_path):
    """4 jobs as 2 job arrays (1- and 2-process jobs ask for 1 and 2 cores); amp_fp16 cannot run on
    a CPU: 2 FINISHED and 2 FAILED children of one parent, in the default sqlite store of the launch
    directory, which every job reaches (one node: a shared filesystem)."""
    bench.with_store()
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher", reason="needs hydra-submitit-launcher (bench[slurm])")
    sweep_dir = tmp_path / "sweep"
    proc = bench.run(
        "-m",
        *tiny,
        *slurm.sweep_on_cpu,
        "distributed=ddp",
        "distributed.nproc_per_node=1,2",
        "precision=fp32,amp_fp16",
        f"hydra.sweep.dir={sweep_dir}",
    )
    assert proc.returncode == 2, f"{proc.stdout}\n{proc.stderr[-5000:]}"  # two failed jobs
    assert "Traceback" not in proc.stderr
    finals = [json.loads(line)["radix_metrics"] for line in proc.stdout.splitlines() if line.startswith('{"radix')]
    assert sorted(m["world_size"] for m in finals) == [1, 2]  # each finished job's line, echoed

    parent, children = _sweep_runs(bench)
    assert parent.info.status == "FINISHED"
    assert parent.data.tags["sweep.jobs"] == "4" and parent.data.tags["sweep.failed_jobs"] == "2"
    assert parent.data.params["precision"] == "fp32,amp_fp16"
    for num, (procs, precision) in enumerate([(1, "fp32"), (1, "amp_fp16"), (2, "fp32"), (2, "amp_fp16")]):
        child = children[str(num)]
        assert child.data.params["precision.name"] == precision
        if precision == "fp32":
            assert child.info.status == "FINISHED" and child.data.metrics["world_size"] == procs
        else:
            assert child.info.status == "FAILED" and "amp_fp16" in child.data.tags["error"]
    rows = _report_rows(sweep_dir)
    assert [rows[str(n)]["status"] for n in range(4)] == ["FINISHED", "FAILED", "FINISHED", "FAILED"]

    # what Slurm was asked for and gave: one array per request, one task per node, the cores per job
    scripts = sorted(sweep_dir.glob(".submitit/*/*_submission.sh"))
    assert len(scripts) == 2, scripts
    arrays = {}
    for script in scripts:
        text = script.read_text()
        assert "#SBATCH --nodes=1" in text and "#SBATCH --ntasks-per-node=1" in text and "#SBATCH --time=60" in text
        cores = int(re.search(r"#SBATCH --cpus-per-task=(\d+)", text).group(1))
        arrays[cores] = script.parent.name
        assert "#SBATCH --array=0-1%2" in text
    assert set(arrays) == {1, 2}
    for cores, array in arrays.items():
        for task in (0, 1):
            shown, state = _slurm_job_once_ended(f"{array}_{task}", hang_guard_s=120)
            assert state == "COMPLETED" and f"NumCPUs={cores}" in shown, shown


def test_a_sweep_that_sbatch_refuses_is_one_line_and_a_failed_parent(slurm, bench, tiny, tmp_path):
    """A job asking for a GPU on this CPU-only node: sbatch refuses it ("Invalid generic resource").
    That was submitit's traceback and the parent run KILLED "interrupted"; now one [ERROR] line with
    sbatch's own words, exit 1, and the parent run FAILED with them."""
    bench.with_store()
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher", reason="needs hydra-submitit-launcher (bench[slurm])")
    proc = bench.run(
        "-m",
        *tiny,
        "hydra/launcher=slurm",
        "hydra.launcher.gpus_per_node=1",
        "seed=1,2",
        f"hydra.sweep.dir={tmp_path}/sweep",
        f"hydra.launcher.submitit_folder={tmp_path}/submitit",
    )
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    (line,) = bench.error_lines(proc.stderr)
    assert line.startswith("[ERROR] Slurm refused the sweep's jobs #0..#1: sbatch: error:"), line
    (parent,) = bench.runs()
    assert parent.info.status == "FAILED" and "sbatch: error:" in parent.data.tags["error"]
