"""Tracking over HTTP against a real `mlflow server` on 127.0.0.1: a DDP sweep lands as a parent
run with its children and the report. (A server that cannot be reached or goes away mid-run:
tests/reliability/test_tracking_faults.py.)"""

from __future__ import annotations

from pathlib import Path

from mlflow import MlflowClient

# a sweep of process counts and precisions: no batch axis, so no throughput_vs_batch.png
REPORT_FILES = {
    "report.csv",
    "report.md",
    "report.html",
    "throughput_vs_gpus.png",
    "scaling_efficiency.png",
    "step_time_distribution.png",
}


def test_ddp_sweep_lands_on_the_tracking_server(mlflow_server, bench, tiny, tmp_path):
    proc = bench.run(
        "-m",
        *tiny,
        "distributed=ddp",
        "distributed.nproc_per_node=1,2",
        f"hydra.sweep.dir={tmp_path}/sweep",
        env=bench.env(mlflow_server),
    )
    assert proc.returncode == 0, f"{proc.stdout}\n{proc.stderr}"
    assert proc.stdout.count('{"radix_metrics"') == 2
    assert mlflow_server in proc.stderr  # the runs name the server they went to
    assert not (tmp_path / "mlflow.db").exists() and not (tmp_path / "mlruns").exists()

    runs = bench.runs(mlflow_server)
    parents = [r for r in runs if r.data.tags.get("sweep") == "parent"]
    children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    assert len(parents) == 1 and len(children) == 2 and len(runs) == 3
    parent = parents[0]
    assert parent.info.status == "FINISHED"
    assert parent.data.params["distributed.nproc_per_node"] == "1,2"
    for child in children:
        assert child.data.tags["mlflow.parentRunId"] == parent.info.run_id
        assert child.info.status == "FINISHED"
    assert sorted(c.data.metrics["world_size"] for c in children) == [1.0, 2.0]

    client = MlflowClient(tracking_uri=mlflow_server)
    logged = {Path(a.path).name for a in client.list_artifacts(parent.info.run_id, "report")}
    assert logged >= REPORT_FILES
    # the artifacts really went through the server (proxied to --artifacts-destination)
    local = client.download_artifacts(parent.info.run_id, "report/report.csv", str(tmp_path))
    assert Path(local).read_text().count("\n") == 3  # header + 2 rows
    child_artifacts = {a.path for a in client.list_artifacts(children[0].info.run_id)}
    assert "run_summary.json" in child_artifacts
