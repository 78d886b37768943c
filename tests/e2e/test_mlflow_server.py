"""Tracking over HTTP against a real `mlflow server` on 127.0.0.1: a DDP sweep lands as a
parent run with its children and the report; a server that cannot be reached, or that goes
away mid-run, costs no results, and `python -m bench.tools.upload` sends them later."""

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


class MlflowServer:
    """`mlflow server` on 127.0.0.1 with a sqlite backend in `root`; stop() and start() again keep the store."""

    def __init__(self, root: Path, port: int):
        self.root, self.port = root, port
        self.url = f"http://127.0.0.1:{port}"
        self.process = None

    def start(self) -> "MlflowServer":
        mlflow_cli = shutil.which("mlflow")
        assert mlflow_cli, "the mlflow command is not on PATH"
        log = (self.root / "server.log").open("a")
        self.process = subprocess.Popen([mlflow_cli, "server", "--backend-store-uri", f"sqlite:///{self.root}/srv.db",
                                         "--artifacts-destination", str(self.root / "art"), "--host", "127.0.0.1",
                                         "--port", str(self.port), "--workers", "1"],
                                        cwd=self.root, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        deadline = time.time() + 600  # a hang guard: the server answers /health when it is up
        while not _healthy(self.url):
            if self.process.poll() is not None or time.time() > deadline:
                pytest.fail(f"mlflow server did not come up (exit {self.process.poll()}):\n"
                            f"{(self.root / 'server.log').read_text()[-3000:]}")
            time.sleep(0.5)
        return self

    def stop(self, sig: int = signal.SIGTERM) -> None:
        for signum, wait in ((sig, 3), (signal.SIGKILL, 15)):
            try:
                os.killpg(self.process.pid, signum)
            except ProcessLookupError:
                break
            try:
                self.process.wait(timeout=wait)
                break
            except subprocess.TimeoutExpired:
                continue


@pytest.fixture(scope="module")
def mlflow_server(tmp_path_factory):
    server = MlflowServer(tmp_path_factory.mktemp("mlflow-server"), free_port()).start()
    try:
        yield server.url
    finally:
        server.stop()


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
    """A short probe at start finds nobody at the server's port: one line says so, the run goes
    on without tracking and keeps its results (issue 9: MLflow's retries cost minutes)."""
    uri = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    run_dir = tmp_path / "run"
    proc = bench.run(*tiny, "distributed=ddp", "distributed.nproc_per_node=2", f"hydra.run.dir={run_dir}",
                     env=bench.env(uri))
    metrics = bench.metrics(proc)
    assert metrics["world_size"] == 2 and metrics["params_in_sync"] is True
    warnings = [line for line in proc.stderr.splitlines() if "WARNING" in line]
    assert len(warnings) == 1, proc.stderr
    assert f"MLflow server at {uri} cannot be reached" in warnings[0]
    assert f"python -m bench.tools.upload {run_dir}" in warnings[0]
    summary = json.loads((run_dir / "run_summary.json").read_text())
    assert summary["results"]["world_size"] == 2 and summary["mlflow_run_id"] is None
    assert not bench.db.exists()


def test_results_kept_while_the_server_was_down_upload_later(mlflow_server, bench, tiny, tmp_path):
    run_dir = tmp_path / "run"
    metrics = bench.metrics(bench.run(*tiny, f"hydra.run.dir={run_dir}", env=bench.env(f"http://127.0.0.1:{free_port()}")))
    uploaded = bench.run(str(run_dir), "--tracking-uri", mlflow_server, module="bench.tools.upload")
    assert uploaded.returncode == 0 and "uploaded as run" in uploaded.stdout, uploaded.stderr
    run_id = json.loads((run_dir / "run_summary.json").read_text())["mlflow_run_id"]
    client = MlflowClient(tracking_uri=mlflow_server)
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED" and run.data.params["model.arch"] == "resnet18"
    assert run.data.metrics["images_per_second"] == pytest.approx(metrics["images_per_second"])
    assert len(client.get_metric_history(run_id, "step_time_ms")) == metrics["measured_steps"]
    assert {"run_summary.json", "step_times.csv", ".hydra"} <= {a.path for a in client.list_artifacts(run_id)}
    again = bench.run(str(run_dir), "--tracking-uri", mlflow_server, module="bench.tools.upload")
    assert again.returncode == 0 and "already in MLflow" in again.stdout  # no second copy


def test_a_sweep_probes_the_server_once(bench, tiny, tmp_path):
    uri = f"http://127.0.0.1:{free_port()}"
    proc = bench.run("-m", *tiny, "seed=1,2", f"hydra.sweep.dir={tmp_path}/sweep", env=bench.env(uri))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count('{"radix_metrics"') == 2
    assert proc.stderr.count("cannot be reached") == 1, proc.stderr  # at the sweep's start, not per job
    assert all((tmp_path / "sweep" / job / "run_summary.json").is_file() for job in ("0", "1"))


def test_server_that_dies_mid_run_costs_no_results_and_upload_completes_the_run(bench, tiny, tmp_path):
    """The server goes away after the run opened: the run finishes on its own (one warning, its
    final line, its files); the server comes back with the run left RUNNING, and the upload
    completes that same run instead of making another."""
    server = MlflowServer(tmp_path / "server", free_port())
    (tmp_path / "server").mkdir()
    server.start()
    run_dir = tmp_path / "run"
    try:
        proc = bench.start(*tiny, "train.steps_per_epoch=60", "benchmark.log_every=1", f"hydra.run.dir={run_dir}",
                           env=bench.env(server.url))
        log = run_dir / "bench.log"
        deadline = time.monotonic() + 900  # hang guard; the event: the run is open and training
        while proc.poll() is None and time.monotonic() < deadline and not (log.exists() and "step 2/" in log.read_text()):
            time.sleep(0.1)
        server.stop(signal.SIGKILL)
        out, err = proc.communicate(timeout=900)
        assert proc.returncode == 0, err
        metrics = json.loads(out.strip().splitlines()[-1])["radix_metrics"]
        assert "no further tracking for this run; upload the results later" in err
        run_id = json.loads((run_dir / "run_summary.json").read_text())["mlflow_run_id"]

        server.start()
        client = MlflowClient(tracking_uri=server.url)
        assert client.get_run(run_id).info.status == "RUNNING"  # nobody could end it
        uploaded = bench.run(str(run_dir), "--tracking-uri", server.url, module="bench.tools.upload")
        assert uploaded.returncode == 0 and f"completed run {run_id}" in uploaded.stdout, uploaded.stderr
        run = client.get_run(run_id)
        assert run.info.status == "FINISHED"
        assert run.data.metrics["images_per_second"] == pytest.approx(metrics["images_per_second"])
        assert "run_summary.json" in {a.path for a in client.list_artifacts(run_id)}
    finally:
        server.stop()
