"""Secrets never leak: canary values planted where users keep credentials, then every path a run
takes (a sweep with a failing job and its report, the same with its jobs run by submitit, a
storage run on S3, a run that fails mid-way) is searched — stdout, stderr, every file written
(run and sweep dirs, .hydra/, reports, logs, submitit's folder of pickled jobs and job logs, the
MLflow server's database and artifact store) and the MLflow params and tags.

Credentials typed on the command line are refused before anything is written: the bad-inputs
table (bad_inputs.py) holds those rows, and the last test here checks nothing was saved.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

CANARIES = {
    "TORCH_CANARY_AUTH": f"canary-auth-{uuid.uuid4().hex[:8]}",  # a speed prefix, but a credential's name
    "NCCL_IB_KEY": f"canary-key-{uuid.uuid4().hex[:8]}",
    "CUDA_API_TOKEN": f"canary-token-{uuid.uuid4().hex[:8]}",
    "OMP_PROXY_PASSWORD": f"canary-pass-{uuid.uuid4().hex[:8]}",
}
URI_PASSWORD = f"canary-uri-{uuid.uuid4().hex[:8]}"


def _everything_written(root: Path) -> list:
    return [path for path in root.rglob("*") if path.is_file()]


def _assert_nowhere(secrets: list, texts: list, root: Path) -> None:
    for secret in secrets:
        for text in texts:
            assert secret not in text, f"{secret} leaked into output: ...{text[max(0, text.find(secret) - 200):][:400]}"
        for path in _everything_written(root):
            assert secret.encode() not in path.read_bytes(), f"{secret} leaked into {path}"


@pytest.fixture
def leaky_env(bench, mlflow_servers):
    """The environment of a user who keeps credentials in it, tracking to a server whose URI
    carries a password (MLflow sends it as basic auth; this server ignores it)."""
    server = mlflow_servers()
    uri = server.url.replace("http://", f"http://bench-user:{URI_PASSWORD}@")
    return server, bench.env(uri, **CANARIES)


def test_canaries_on_a_sweep_with_a_failing_job_and_its_report(bench, tiny, tmp_path, leaky_env):
    server, env = leaky_env
    proc = bench.run("-m", *tiny, "precision=fp32,amp_fp16", f"hydra.sweep.dir={tmp_path}/sweep", env=env)
    assert proc.returncode == 1, proc.stderr  # amp_fp16 cannot run on a CPU: one failed job
    assert proc.stdout.count('{"radix_metrics"') == 1 and "View run" not in proc.stdout
    assert (tmp_path / "sweep" / "report" / "report.html").is_file()
    runs = bench.runs(server.url)
    assert len(runs) == 3  # the parent and two children, on the server
    tracked = [str(run.data.params) + str(run.data.tags) for run in runs]
    _assert_nowhere([*CANARIES.values(), URI_PASSWORD], [proc.stdout, proc.stderr, *tracked], tmp_path)
    child = next(run for run in runs if run.data.tags.get("sweep.job") == "0")
    assert "env.env_vars.TORCH_CANARY_AUTH" not in child.data.tags  # filtered by name, not logged blank


# where credentials for S3 and an MLflow server live (the server here ignores them)
CREDENTIAL_CANARIES = {"AWS_ACCESS_KEY_ID": f"canary-akid-{uuid.uuid4().hex[:8]}",
                       "AWS_SECRET_ACCESS_KEY": f"canary-aws-{uuid.uuid4().hex[:8]}",
                       "AWS_SESSION_TOKEN": f"canary-session-{uuid.uuid4().hex[:8]}",
                       "MLFLOW_TRACKING_PASSWORD": f"canary-mlpass-{uuid.uuid4().hex[:8]}",
                       "MLFLOW_TRACKING_TOKEN": f"canary-mltoken-{uuid.uuid4().hex[:8]}",
                       "HF_TOKEN": f"canary-hf-{uuid.uuid4().hex[:8]}"}


def test_canaries_on_a_submitit_sweep_and_its_folder(bench, tiny, tmp_path, leaky_env, slurm_or_none):
    """Jobs pickled by submitit and run in processes of their own, as Slurm jobs where a Slurm runs
    (.ci/slurm up), else by submitit's local executor: the submitit folder (generated job scripts,
    pickled jobs and results, job logs) joins the places searched."""
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher", reason="needs hydra-submitit-launcher (bench[slurm])")
    server, env = leaky_env
    env = {**env, **CREDENTIAL_CANARIES, "MLFLOW_TRACKING_USERNAME": "bench-user"}
    launcher = slurm_or_none.sweep_on_cpu if slurm_or_none else ("hydra/launcher=slurm_local",)
    proc = bench.run("-m", *tiny, *launcher, "precision=fp32,amp_fp16", f"hydra.sweep.dir={tmp_path}/sweep", env=env)
    assert proc.returncode == 1, proc.stderr[-5000:]
    submitit_files = [p.name for p in (tmp_path / "sweep" / ".submitit").rglob("*") if p.is_file()]
    assert sum(name.endswith("_submitted.pkl") for name in submitit_files) == 2
    assert sum(name.endswith("_log.err") for name in submitit_files) == 2
    assert sum(name.endswith("_submission.sh") for name in submitit_files) == (1 if slurm_or_none else 0)
    runs = bench.runs(server.url)
    assert len(runs) == 3  # the parent and two children, on the server
    tracked = [str(run.data.params) + str(run.data.tags) for run in runs]
    secrets = [*CANARIES.values(), *CREDENTIAL_CANARIES.values(), URI_PASSWORD]
    _assert_nowhere(secrets, [proc.stdout, proc.stderr, *tracked], tmp_path)


def test_canaries_on_a_storage_run_against_s3(bench, tmp_path, s3_server, leaky_env):
    server, env = leaky_env
    bucket = s3_server.new_bucket()
    storage = ["mode=storage", "storage.workload.num_files=4", "storage.workload.samples_per_file=2",
               "storage.workload.record_size=1024", "storage.workload.batch_size=2", "storage.workload.checkpoint_size_mb=1"]
    proc = bench.run(*storage, *s3_server.overrides(bucket), f"hydra.run.dir={tmp_path}/run",
                     env={**env, **s3_server.credentials})
    bench.metrics(proc)
    tracked = [str(run.data.params) + str(run.data.tags) for run in bench.runs(server.url)]
    _assert_nowhere([*CANARIES.values(), URI_PASSWORD, s3_server.secret], [proc.stdout, proc.stderr, *tracked], tmp_path)


def test_canaries_on_a_run_that_fails_mid_way(bench, tiny, datasets, tmp_path, leaky_env):
    server, env = leaky_env
    datasets.image_folder(tmp_path / "flat", images=8)
    (tmp_path / "flat" / "class003" / "zz-gone.jpg").symlink_to(tmp_path / "nowhere.jpg")
    proc = bench.run(*tiny, "data=imagefolder", f"data.root={tmp_path / 'flat'}", "data.split=val", "data.batch_size=9",
                     "data.num_workers=0", f"hydra.run.dir={tmp_path}/run", env=env)
    assert proc.returncode == 1 and (tmp_path / "run" / "error.txt").is_file()
    (run,) = bench.runs(server.url)
    assert run.info.status == "FAILED"
    _assert_nowhere([*CANARIES.values(), URI_PASSWORD], [proc.stdout, proc.stderr, str(run.data.tags)], tmp_path)


def test_a_credential_on_the_command_line_is_refused_before_anything_is_saved(bench, tiny, tmp_path):
    secret = f"canary-cli-{uuid.uuid4().hex[:8]}"
    for args in ([*tiny, f"storage.endpoint=http://u:{secret}@minio:9000", f"hydra.run.dir={tmp_path}/run"],
                 ["-m", *tiny, f"tracking.uri=http://u:{secret}@h:5000,http://h:5001", f"hydra.sweep.dir={tmp_path}/sweep"],
                 [*tiny, f"+tracking.password={secret}", f"hydra.run.dir={tmp_path}/run"]):
        proc = bench.run(*args)
        assert proc.returncode == 2 and len(bench.error_lines(proc.stderr)) == 1, proc.stderr
        _assert_nowhere([secret], [proc.stdout, proc.stderr], tmp_path)
    assert not (tmp_path / "run").exists() and not (tmp_path / "sweep").exists()  # no .hydra/ holding it
