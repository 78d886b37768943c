"""Tracking over HTTP against a real `mlflow server` on 127.0.0.1: a DDP sweep lands as a
parent run with its children and the report; an unreachable server costs no results."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
from mlflow import MlflowClient

from bench.launch.context import free_port
REPORT_FILES = {"report.csv", "report.md", "report.html", "throughput_vs_gpus.png", "scaling_efficiency.png",
                "throughput_vs_batch.png", "step_time_distribution.png"}



def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


@pytest.fixture(scope="module")
def mlflow_server(tmp_path_factory):
    root = tmp_path_factory.mktemp("mlflow-server")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    mlflow_cli = shutil.which("mlflow")
    assert mlflow_cli, "the mlflow command is not on PATH"
    log = (root / "server.log").open("w")
    server = subprocess.Popen([mlflow_cli, "server", "--backend-store-uri", f"sqlite:///{root}/srv.db",
                               "--artifacts-destination", str(root / "art"), "--host", "127.0.0.1",
                               "--port", str(port), "--workers", "1"],
                              cwd=root, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.time() + 600  # a hang guard: the server answers /health when it is up
        while not _healthy(url):
            if server.poll() is not None or time.time() > deadline:
                pytest.fail(f"mlflow server did not come up (exit {server.poll()}):\n"
                            f"{(root / 'server.log').read_text()[-3000:]}")
            time.sleep(0.5)
        yield url
    finally:
        for sig, wait in ((signal.SIGTERM, 3), (signal.SIGKILL, 15)):
            try:
                os.killpg(server.pid, sig)
            except ProcessLookupError:
                break
            try:
                server.wait(timeout=wait)
                break
            except subprocess.TimeoutExpired:
                continue
        log.close()


def test_ddp_sweep_lands_on_the_tracking_server(mlflow_server, bench, tiny, tmp_path):
    proc = bench.run("-m", *tiny, "distributed=ddp", "distributed.nproc_per_node=1,2",
                     f"hydra.sweep.dir={tmp_path}/sweep", env=bench.env(mlflow_server))
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


def test_unreachable_server_keeps_ddp_results(bench, tiny, tmp_path):
    """The tracker gives up at its first failure (one warning naming the server) instead of
    paying every later call's retries; the results stay in the run directory."""
    uri = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    run_dir = tmp_path / "run"
    proc = bench.run(*tiny, "distributed=ddp", "distributed.nproc_per_node=2", f"hydra.run.dir={run_dir}",
                     env=bench.env(uri, MLFLOW_HTTP_REQUEST_MAX_RETRIES="0", MLFLOW_HTTP_REQUEST_TIMEOUT="5"))
    metrics = bench.metrics(proc)
    assert metrics["world_size"] == 2 and metrics["params_in_sync"] is True
    warnings = [line for line in proc.stderr.splitlines() if uri in line and "WARNING" in line]
    assert len(warnings) == 1 and "results are kept in the output directory" in warnings[0], proc.stderr
    summary = json.loads((run_dir / "run_summary.json").read_text())
    assert summary["results"]["world_size"] == 2
    assert not bench.db.exists()
