"""Secrets never leak: canary values planted where users keep credentials, then every path a run
takes (a sweep with a failing job and its report, the same with its jobs run by submitit, a
storage run on S3, a run that fails mid-way, a config file that holds credentials, an upload
after the fact) is searched — stdout, stderr, every file written (run and sweep dirs, .hydra/,
reports, logs, submitit's folder of pickled jobs and job logs, the MLflow server's database and
artifact store, a local mlflow.db) and the MLflow params, tags and run names.

Credentials typed on the command line are refused before anything is written: the bad-inputs
table (bad_inputs.py) holds those rows, and the last test here checks nothing was saved. What
a config file or the environment holds is shown as *** wherever it would leave bench.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest
from mlflow import MlflowClient

CANARIES = {
    "TORCH_CANARY_AUTH": f"canary-auth-{uuid.uuid4().hex[:8]}",  # a speed prefix, but a credential's name
    "NCCL_IB_KEY": f"canary-key-{uuid.uuid4().hex[:8]}",
    "CUDA_API_TOKEN": f"canary-token-{uuid.uuid4().hex[:8]}",
    "OMP_PROXY_PASSWORD": f"canary-pass-{uuid.uuid4().hex[:8]}",
}
URI_PASSWORD = f"canary-uri-{uuid.uuid4().hex[:8]}"


def _everything_written(root: Path) -> list:
    return [path for path in root.rglob("*") if path.is_file()]


def _assert_nowhere(secrets: list, texts: list, *roots: Path) -> None:
    for secret in secrets:
        for text in texts:
            assert secret not in text, (
                f"{secret} leaked into output: ...{text[max(0, text.find(secret) - 200) :][:400]}"
            )
        for root in roots:
            for path in _everything_written(root):
                assert secret.encode() not in path.read_bytes(), f"{secret} leaked into {path}"


@dataclass
class LeakyServer:
    """The module's MLflow server (its database and artifact store under `root`, searched too) and
    this test's experiment on it: `tracking` is the override that files the test's runs there."""

    url: str
    root: Path
    experiment: str

    @property
    def tracking(self) -> str:
        return f"tracking.experiment={self.experiment}"

    def runs(self) -> list:
        client = MlflowClient(self.url)
        experiment = client.get_experiment_by_name(self.experiment)
        return client.search_runs([experiment.experiment_id]) if experiment else []


@pytest.fixture
def leaky_env(bench, module_mlflow_server, request):
    """The environment of a user who keeps credentials in it, tracking to a server whose URI
    carries a password (MLflow sends it as basic auth; this server ignores it). One server for the
    module, an experiment per test."""
    server = LeakyServer(module_mlflow_server.url, module_mlflow_server.root, f"canaries-{uuid.uuid4().hex[:8]}")
    uri = server.url.replace("http://", f"http://bench-user:{URI_PASSWORD}@")
    return server, bench.env(uri, **CANARIES)


def test_canaries_on_a_sweep_with_a_failing_job_and_its_report(bench, tiny, tmp_path, leaky_env):
    server, env = leaky_env
    proc = bench.run(
        "-m", *tiny, server.tracking, "precision=fp32,amp_fp16", f"hydra.sweep.dir={tmp_path}/sweep", env=env
    )
    assert proc.returncode == 1, proc.stderr  # amp_fp16 cannot run on a CPU: one failed job
    assert proc.stdout.count('{"radix_metrics"') == 1 and "View run" not in proc.stdout
    assert (tmp_path / "sweep" / "report" / "report.html").is_file()
    runs = server.runs()
    assert len(runs) == 3  # the parent and two children, on the server
    tracked = [str(run.data.params) + str(run.data.tags) for run in runs]
    _assert_nowhere([*CANARIES.values(), URI_PASSWORD], [proc.stdout, proc.stderr, *tracked], tmp_path, server.root)
    child = next(run for run in runs if run.data.tags.get("sweep.job") == "0")
    assert "env.env_vars.TORCH_CANARY_AUTH" not in child.data.tags  # filtered by name, not logged blank


# where credentials for S3 and an MLflow server live (the server here ignores them)
CREDENTIAL_CANARIES = {
    "AWS_ACCESS_KEY_ID": f"canary-akid-{uuid.uuid4().hex[:8]}",
    "AWS_SECRET_ACCESS_KEY": f"canary-aws-{uuid.uuid4().hex[:8]}",
    "AWS_SESSION_TOKEN": f"canary-session-{uuid.uuid4().hex[:8]}",
    "MLFLOW_TRACKING_PASSWORD": f"canary-mlpass-{uuid.uuid4().hex[:8]}",
    "MLFLOW_TRACKING_TOKEN": f"canary-mltoken-{uuid.uuid4().hex[:8]}",
    "HF_TOKEN": f"canary-hf-{uuid.uuid4().hex[:8]}",
}


def test_canaries_on_a_submitit_sweep_and_its_folder(bench, tiny, tmp_path, leaky_env, slurm_or_none):
    """Jobs pickled by submitit and run in processes of their own, as Slurm jobs where a Slurm runs
    (.ci/slurm up), else by submitit's local executor: the submitit folder (generated job scripts,
    pickled jobs and results, job logs) joins the places searched."""
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher", reason="needs hydra-submitit-launcher (bench[slurm])")
    server, env = leaky_env
    env = {**env, **CREDENTIAL_CANARIES, "MLFLOW_TRACKING_USERNAME": "bench-user"}
    launcher = slurm_or_none.sweep_on_cpu if slurm_or_none else ("hydra/launcher=slurm_local",)
    proc = bench.run(
        "-m", *tiny, *launcher, server.tracking, "precision=fp32,amp_fp16", f"hydra.sweep.dir={tmp_path}/sweep", env=env
    )
    assert proc.returncode == 1, proc.stderr[-5000:]
    submitit_files = [p.name for p in (tmp_path / "sweep" / ".submitit").rglob("*") if p.is_file()]
    assert sum(name.endswith("_submitted.pkl") for name in submitit_files) == 2
    assert sum(name.endswith("_log.err") for name in submitit_files) == 2
    assert sum(name.endswith("_submission.sh") for name in submitit_files) == (1 if slurm_or_none else 0)
    runs = server.runs()
    assert len(runs) == 3  # the parent and two children, on the server
    tracked = [str(run.data.params) + str(run.data.tags) for run in runs]
    secrets = [*CANARIES.values(), *CREDENTIAL_CANARIES.values(), URI_PASSWORD]
    _assert_nowhere(secrets, [proc.stdout, proc.stderr, *tracked], tmp_path, server.root)


def test_canaries_on_a_storage_run_against_s3(bench, tmp_path, s3_server, leaky_env):
    server, env = leaky_env
    bucket = s3_server.new_bucket()
    storage = [
        "mode=storage",
        "storage.workload.num_files=4",
        "storage.workload.samples_per_file=2",
        "storage.workload.record_size=1024",
        "storage.workload.batch_size=2",
        "storage.workload.checkpoint_size_mb=1",
    ]
    proc = bench.run(
        *storage,
        *s3_server.overrides(bucket),
        server.tracking,
        f"hydra.run.dir={tmp_path}/run",
        env={**env, **s3_server.credentials},
    )
    bench.metrics(proc)
    (run,) = server.runs()
    tracked = [str(run.data.params) + str(run.data.tags)]
    _assert_nowhere(
        [*CANARIES.values(), URI_PASSWORD, s3_server.secret],
        [proc.stdout, proc.stderr, *tracked],
        tmp_path,
        server.root,
    )


def test_canaries_on_a_run_that_fails_mid_way(bench, tiny, datasets, tmp_path, leaky_env):
    server, env = leaky_env
    datasets.image_folder(tmp_path / "flat", images=8)
    (tmp_path / "flat" / "class003" / "zz-gone.jpg").symlink_to(tmp_path / "nowhere.jpg")
    proc = bench.run(
        *tiny,
        "data=imagefolder",
        f"data.root={tmp_path / 'flat'}",
        "data.split=val",
        "data.batch_size=9",
        "data.num_workers=0",
        server.tracking,
        f"hydra.run.dir={tmp_path}/run",
        env=env,
    )
    assert proc.returncode == 1 and (tmp_path / "run" / "error.txt").is_file()
    (run,) = server.runs()
    assert run.info.status == "FAILED"
    _assert_nowhere(
        [*CANARIES.values(), URI_PASSWORD], [proc.stdout, proc.stderr, str(run.data.tags)], tmp_path, server.root
    )


def test_a_credential_on_the_command_line_is_refused_before_anything_is_saved(bench, tiny, tmp_path):
    """One real process per refusal path: a sweep (a password in one of its URIs) and a single run
    (a secret read from the environment into the run name: the value planted here, which the table's
    row cannot plant). The other credentials typed on a command line are rows of the bad-input table
    (bad_inputs.py), run in-process with the same checks (one [ERROR] line, exit 2, CANARY in no output,
    nothing written where the command pointed): "S3 endpoint with a password" (also a real process
    there), "password key", "a password key by a short name", "rendezvous endpoint with a password",
    "signed query in an endpoint"."""
    secret = f"canary-cli-{uuid.uuid4().hex[:8]}"
    env = bench.env(AWS_SECRET_ACCESS_KEY=secret)
    for args in (
        ["-m", *tiny, f"tracking.uri=http://u:{secret}@h:5000,http://h:5001", f"hydra.sweep.dir={tmp_path}/sweep"],
        [*tiny, "tracking.run_name=${oc.env:AWS_SECRET_ACCESS_KEY}", f"hydra.run.dir={tmp_path}/run"],
    ):
        proc = bench.run(*args, env=env)
        assert proc.returncode == 2 and len(bench.error_lines(proc.stderr)) == 1, proc.stderr
        _assert_nowhere([secret], [proc.stdout, proc.stderr], tmp_path)
    assert not (tmp_path / "run").exists() and not (tmp_path / "sweep").exists()  # no .hydra/ holding it


def _user_config(tmp_path_factory, text: str) -> list:
    """The overrides that add a config file of the user's (outside the searched test dir: it holds
    the canaries on purpose) on top of the others."""
    root = tmp_path_factory.mktemp("user-conf")
    (root / "experiment").mkdir()
    (root / "experiment" / "leaky.yaml").write_text("# @package _global_\n" + text)
    return ["+experiment@_global_=leaky", f"hydra.searchpath=[file://{root}]"]


QUERY_CANARIES = {
    "TORCH_CANARY_URL": f"http://h/hub?token=canary-qtoken-{uuid.uuid4().hex[:8]}",
    "OMP_CANARY_URL": f"http://h/x?a=1&sig=canary-qsig-{uuid.uuid4().hex[:8]}",
}


def test_canaries_in_a_config_file_and_query_strings_then_an_upload(bench, tiny, tmp_path, tmp_path_factory, leaky_env):
    """A config file reads a secret-looking variable into the run name (oc.env), holds a rendezvous
    endpoint with user:password and an endpoint with a signed query; speed variables carry ?token=
    and &sig=. The run keeps every key, each credential shown as ***. Then the upload of that run,
    to the server by a URI with user:password, prints no "View run ... at <URI>"."""
    server, env = leaky_env
    secrets = {
        "aws": f"canary-aws-{uuid.uuid4().hex[:8]}",
        "rdzv": f"canary-rdzv-{uuid.uuid4().hex[:8]}",
        "sig": f"canary-sig-{uuid.uuid4().hex[:8]}",
        "amz": f"canary-amz-{uuid.uuid4().hex[:8]}",
    }
    conf = _user_config(
        tmp_path_factory,
        f"""tracking:
  run_name: ${{oc.env:AWS_SECRET_ACCESS_KEY}}
distributed:
  rdzv_endpoint: u:{secrets["rdzv"]}@127.0.0.1:29400
storage:
  endpoint: http://127.0.0.1:9/?sig={secrets["sig"]}&X-Amz-Credential={secrets["amz"]}
""",
    )
    env = {**env, **QUERY_CANARIES, "AWS_SECRET_ACCESS_KEY": secrets["aws"]}
    run_dir = tmp_path / "run"
    proc = bench.run(*tiny, "cpu_threads=1", *conf, server.tracking, f"hydra.run.dir={run_dir}", env=env)
    bench.metrics(proc)
    (run,) = server.runs()
    assert run.info.run_name == "***" and run.data.params["distributed.rdzv_endpoint"] == "***@127.0.0.1:29400"
    assert run.data.params["storage.endpoint"] == "http://127.0.0.1:9/?sig=***&X-Amz-Credential=***"
    assert run.data.tags["env.env_vars.TORCH_CANARY_URL"] == "http://h/hub?token=***"

    MlflowClient(server.url).update_run(run.info.run_id, status="RUNNING")  # as if the server lost the run's end
    uri = server.url.replace("http://", f"http://bench-user:{URI_PASSWORD}@")
    uploaded = bench.run(str(run_dir), "--tracking-uri", uri, module="bench.tools.upload", env=env)
    assert uploaded.returncode == 0 and f"completed run {run.info.run_id}" in uploaded.stdout, uploaded.stderr
    assert "View run" not in uploaded.stdout + uploaded.stderr
    (run,) = server.runs()  # the same run, completed
    assert run.info.status == "FINISHED"
    tracked = [str(run.data.params) + str(run.data.tags) + run.info.run_name]
    canaries = [*secrets.values(), *(value.rsplit("=", 1)[1] for value in QUERY_CANARIES.values()), URI_PASSWORD]
    _assert_nowhere(
        canaries, [proc.stdout, proc.stderr, uploaded.stdout, uploaded.stderr, *tracked], tmp_path, server.root
    )


def test_canaries_in_a_signed_endpoint_of_a_storage_run_that_fails(bench, tmp_path, tmp_path_factory):
    """The endpoint's signed query reaches the one [ERROR] line, error.txt, bench.log, .hydra/ and
    the local mlflow.db (params, the FAILED run's error tag, its artifacts) only as ***."""
    bench.with_store()
    secrets = {"sig": f"canary-sig-{uuid.uuid4().hex[:8]}", "token": f"canary-amztoken-{uuid.uuid4().hex[:8]}"}
    conf = _user_config(
        tmp_path_factory,
        f"""storage:
  endpoint: http://127.0.0.1:9/?sig={secrets["sig"]}&X-Amz-Security-Token={secrets["token"]}
""",
    )
    storage = [
        "mode=storage",
        "storage=s3",
        "storage.bucket=canary",
        "storage.max_attempts=1",
        "storage.timeout_s=5",
        "storage.workload.num_files=4",
        "storage.workload.samples_per_file=2",
        "storage.workload.record_size=1024",
        "storage.workload.batch_size=2",
    ]
    env = bench.env(
        AWS_ACCESS_KEY_ID="canary-id",
        AWS_SECRET_ACCESS_KEY=f"canary-aws-{uuid.uuid4().hex[:8]}",
        AWS_DEFAULT_REGION="us-east-1",
    )
    proc = bench.run(*storage, *conf, f"hydra.run.dir={tmp_path}/run", env=env)
    (line,) = bench.error_lines(proc.stderr)
    assert proc.returncode == 1 and "sig=***&X-Amz-Security-Token=***" in line, proc.stderr
    assert (tmp_path / "run" / "error.txt").is_file()
    (run,) = bench.runs()
    assert run.info.status == "FAILED"
    tracked = str(run.data.params) + str(run.data.tags)
    _assert_nowhere([*secrets.values(), env["AWS_SECRET_ACCESS_KEY"]], [proc.stdout, proc.stderr, tracked], tmp_path)
