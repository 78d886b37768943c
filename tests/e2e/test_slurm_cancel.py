"""A Slurm job cancelled in the middle of a sweep (a single-node Slurm with accounting, started by
`.ci/slurm up`; skipped where there is none). Apart from test_slurm.py so that the two Slurm sweeps,
each over a minute, run on two pytest workers side by side (`--dist loadfile`)."""

from __future__ import annotations

import subprocess

import pytest
from test_slurm import _report_rows, _sweep_runs


def test_a_cancelled_slurm_job_is_a_failed_child_and_the_sweep_goes_on(slurm, bench, tiny, tmp_path, mlflow_servers):
    """Job 1 trains until it is cancelled (scancel, as a user or a preemption would); the sweep
    counts it failed, its child run on the MLflow server is FAILED with Slurm's state, the report
    says so, and job 0 is unaffected."""
    if not slurm.accounting:
        pytest.skip(
            "needs Slurm accounting (slurmdbd, .ci/slurm up): submitit sees a cancelled job end only through sacct"
        )
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher", reason="needs hydra-submitit-launcher (bench[slurm])")
    mlflow_server = (
        mlflow_servers().url
    )  # started once the test is sure to run (a module's server started even when it skipped)
    sweep_dir = tmp_path / "sweep"
    proc = bench.start(
        "-m",
        *tiny,
        *slurm.sweep_on_cpu,
        "benchmark.log_every=1",
        "train.steps_per_epoch=3,100000",
        f"hydra.sweep.dir={sweep_dir}",
        env=bench.env(mlflow_server),
    )
    bench.wait_for_line(proc, sweep_dir / "1" / "bench.log", "step 2/")  # its one rank, in the job's process
    (array,) = {path.name.split("_")[0] for path in sweep_dir.glob(".submitit/*_1")}
    subprocess.run(["scancel", f"{array}_1"], check=True, timeout=60)
    out, err = proc.communicate(timeout=900)  # a hang guard
    assert proc.returncode == 1, f"{out}\n{err[-5000:]}"
    assert "Traceback" not in err and out.count('{"radix_metrics"') == 1

    parent, children = _sweep_runs(bench, mlflow_server)
    assert parent.data.tags["sweep.jobs"] == "2" and parent.data.tags["sweep.failed_jobs"] == "1"
    assert children["0"].info.status == "FINISHED"
    cancelled = children["1"]
    assert cancelled.info.status == "FAILED"
    assert f"Slurm job {array}_1 ended CANCELLED" in cancelled.data.tags["error"]
    rows = _report_rows(sweep_dir)
    assert rows["0"]["status"] == "FINISHED" and rows["1"]["status"] == "FAILED" and "CANCELLED" in rows["1"]["error"]
