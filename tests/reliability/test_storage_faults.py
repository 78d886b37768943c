"""Faults survived: S3 that is not there, refuses, or dies mid-run. Each ends the run with one
line naming the bucket and the endpoint (exit 1), a FAILED MLflow run, and no hang: against
moto's S3 server on 127.0.0.1 (real HTTP), and a port where nothing listens."""

from __future__ import annotations

import subprocess
import time

HANG_GUARD_S = 900
TINY = [
    "mode=storage",
    "storage.workload.num_files=8",
    "storage.workload.samples_per_file=4",
    "storage.workload.record_size=4096",
    "storage.workload.batch_size=4",
    "storage.workload.epochs=2",
    "storage.workload.read_threads=2",
    "storage.workload.computation_time=0.005",
    "storage.prepare_workers=2",
    "storage.workload.checkpoint_size_mb=0",
]


def test_missing_bucket_fails_the_run_with_one_line(bench, tmp_path, s3_server):
    bench.with_store()
    proc = bench.run(
        *TINY, *s3_server.overrides("no-such-bucket"), f"hydra.run.dir={tmp_path}/run", env=s3_server.env()
    )
    line = bench.single_error(proc)
    assert "the bucket does not exist" in line and "'no-such-bucket'" in line and s3_server.endpoint in line
    (run,) = bench.runs()
    assert run.info.status == "FAILED" and "bucket does not exist" in run.data.tags["error"]


def test_unreachable_endpoint_fails_with_one_line(bench, tmp_path, s3_server):
    endpoint = "http://127.0.0.1:9"  # discard port: nothing listens
    proc = bench.run(
        *TINY,
        "storage=s3",
        f"storage.endpoint={endpoint}",
        "storage.bucket=some-bucket",
        "storage.max_attempts=1",
        "tracking.enabled=false",
        f"hydra.run.dir={tmp_path}/run",
        env=s3_server.env(),
    )
    line = bench.single_error(proc)
    assert "the endpoint cannot be reached" in line and endpoint in line and "'some-bucket'" in line


def test_s3_server_that_dies_mid_read_fails_the_run_in_one_line(bench, tmp_path):
    """The S3 server stops answering while the read phase runs: the reader's request fails after
    its bounded retries, the run ends FAILED naming the endpoint and the bucket, nothing hangs.
    (A server of this test's own: the module's shared one must outlive it.)"""
    import boto3
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    credentials = {
        "AWS_ACCESS_KEY_ID": "benchtestkey",
        "AWS_SECRET_ACCESS_KEY": "dies-mid-run",
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    boto3.session.Session(
        aws_access_key_id="benchtestkey", aws_secret_access_key="dies-mid-run", region_name="us-east-1"
    ).client("s3", endpoint_url=endpoint).create_bucket(Bucket="dies")
    run_dir = tmp_path / "run"
    proc = bench.start(
        *TINY,
        "storage.workload.epochs=100000",
        "storage=s3",
        f"storage.endpoint={endpoint}",
        "storage.bucket=dies",
        "storage.max_attempts=2",
        "storage.timeout_s=5",
        "storage.connect_timeout_s=2",
        f"hydra.run.dir={run_dir}",
        env=bench.env(bench.uri, **credentials),
    )
    try:
        bench.wait_for_line(proc, run_dir / "bench.log", "read:")
        time.sleep(0.5)  # reading
    finally:
        server.stop()
    out, err = proc.communicate(timeout=HANG_GUARD_S)
    line = bench.single_error(subprocess.CompletedProcess(proc.args, proc.returncode, out, err))
    assert proc.returncode == 1 and "StorageError" in line and endpoint in line and "'dies'" in line, err
    (run,) = bench.runs()
    assert run.info.status == "FAILED" and endpoint in run.data.tags["error"]
