"""Small pieces with exact answers: percentiles, flattening and redaction, environment capture,
NVML degradation on this GPU-less machine, the tracker's failure handling, and the launcher
chosen for each kind of run."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from bench.machine.gpu_monitor import GpuMonitor, nvml_handle
from bench.maths.stats import percentile, step_time_stats
from bench.results import FitFigures
from bench.secrets import flatten, redact
from bench.tracking.environment import collect_environment, nvml_devices
from bench.tracking.store import resolve_tracking_uri


@pytest.mark.parametrize("q", [0, 1, 50, 90, 95, 99, 100])
def test_percentile_matches_numpy(q):
    values = list(np.random.default_rng(0).exponential(10.0, size=257))
    assert percentile(values, q) == pytest.approx(float(np.percentile(values, q)))


def test_a_figure_without_samples_is_absent_not_zero():
    assert percentile([], 50) is None and step_time_stats([]) == {}
    assert FitFigures(fit_to_measure=True, fit_reasons=None).to_metrics() == {"fit_to_measure": True}


def test_step_time_stats_flags_spread():
    steady = step_time_stats([10.0] * 50)
    assert steady["step_time_cv"] == 0 and steady["step_time_ms_p99"] == 10.0
    noisy = step_time_stats([10.0, 30.0] * 25)
    assert noisy["step_time_ms_mean"] == 20.0 and noisy["step_time_cv"] == pytest.approx(0.5)


def test_flatten_drops_secret_looking_keys():
    flat = flatten(
        {
            "storage": {"endpoint": "http://x", "secret_access_key": "s3cr3t", "aws_access_key_id": "AKIA"},
            "tracking": {"token": "t", "uri": "u"},
            "data": {"batch_size": 8, "sizes": [1, 2]},
        }
    )
    assert flat == {"storage.endpoint": "http://x", "tracking.uri": "u", "data.batch_size": 8, "data.sizes": [1, 2]}


def test_redact_uri_hides_credentials():
    assert redact("http://user:pw@mlflow.example:5000") == "http://***@mlflow.example:5000"
    assert redact("sqlite:////tmp/mlflow.db") == "sqlite:////tmp/mlflow.db"


@pytest.mark.parametrize(
    "text, shown",
    [
        ("http://user:pw@mlflow.example:5000/x", "http://***@mlflow.example:5000/x"),
        ("rdzv at u:pw@node0:29400 ok", "rdzv at ***@node0:29400 ok"),
        ("'endpoint': 'u:p@h:1'", "'endpoint': '***@h:1'"),
        ("http://h/?sig=abc&a=1", "http://h/?sig=***&a=1"),
        (
            "https://b.s3/k?X-Amz-Credential=AK%2F1&X-Amz-Signature=ff&versionId=3",
            "https://b.s3/k?X-Amz-Credential=***&X-Amz-Signature=***&versionId=3",
        ),
        ("u=http://h/?access_token=t1;jwt=t2 key", "u=http://h/?access_token=***;jwt=*** key"),
        ("git@github.com:org/repo and a@b.c stay", "git@github.com:org/repo and a@b.c stay"),
        ("checkpoint.on_signal=true, http://h/?page=2", "checkpoint.on_signal=true, http://h/?page=2"),
        ("the run reads env-secret-value-1 here", "the run reads *** here"),
        ("PWD /work/path is not a secret", "PWD /work/path is not a secret"),
    ],
)
def test_one_redaction_rule(monkeypatch, text, shown):
    from bench.secrets import redact

    monkeypatch.setenv("CANARY_API_TOKEN", "env-secret-value-1")
    monkeypatch.setenv("OLD_PWD_X", "/work/path")  # a path is not a secret
    assert redact(text) == shown


def test_credentials_on_the_command_line_are_refused_without_their_value():
    from bench.secrets import command_line_problem, looks_secret

    assert looks_secret("tracking.pwd") and looks_secret("+a.pass") and looks_secret("x.api_key")
    assert not looks_secret("checkpoint.on_signal") and not looks_secret(
        "hydra.job.config.override_dirname.exclude_keys"
    )
    for arg, shown in [
        ("+tracking.pwd=S3CRET", "tracking.pwd=<hidden>"),
        ("distributed.rdzv_endpoint=u:S3CRET@h:1", "<hidden: it carries credentials>"),
        ("storage.endpoint=http://h/?X-Amz-Signature=S3CRET", "<hidden: it carries credentials>"),
        ("tracking.run_name=${oc.env:MY_TOKEN}", "tracking.run_name='${oc.env:MY_TOKEN}'"),
    ]:
        problem = command_line_problem(["model=resnet18", arg])
        assert problem and shown in problem and "S3CRET" not in problem
    assert command_line_problem(["tracking.run_name=${oc.env:USER}", "hydra.searchpath=[file:///a/b]"]) is None


def test_tracking_uri_precedence(tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    assert resolve_tracking_uri(None, tmp_path) == f"sqlite:///{tmp_path.resolve()}/mlflow.db"
    assert resolve_tracking_uri("http://a:1", tmp_path) == "http://a:1"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://b:2")
    assert resolve_tracking_uri("http://a:1", tmp_path) == "http://b:2"


@pytest.mark.parametrize(
    "uri, usable",
    [
        ("sqlite:////tmp/x/mlflow.db", True),
        ("http://host:5000", True),
        ("https://u:pw@host", True),
        ("postgresql+psycopg2://u@db:5432/mlflow", True),
        ("databricks", True),
        ("foo://bar", False),
        ("file:///tmp/mlruns", None),  # MLflow 3 refuses a file store unless MLFLOW_ALLOW_FILE_STORE is set
        ("./mlruns", None),
    ],
)
def test_a_tracking_uri_is_usable_when_mlflows_registry_has_a_store_for_it(monkeypatch, uri, usable):
    import mlflow.environment_variables

    from bench.tracking.store import unusable

    files_gated = hasattr(mlflow.environment_variables, "MLFLOW_ALLOW_FILE_STORE")  # MLflow 3
    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE", raising=False)
    accepted = unusable(uri)
    assert (accepted is None) is (usable if usable is not None else not files_gated), accepted
    if accepted:
        assert "http, https, mssql, mysql, postgresql, sqlite" in accepted and "e.g. sqlite:///mlflow.db" in accepted
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    assert unusable("file:///tmp/mlruns") is None


@pytest.mark.slow  # starts processes inside bench (workers, readers, a fork)
def test_environment_records_versions_and_speed_env_but_no_secrets(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    monkeypatch.setenv("NCCL_SOCKET_IFNAME", "lo")
    monkeypatch.setenv("CUDA_API_TOKEN", "do-not-log")
    env = collect_environment()
    assert env["python"] and env["torch"] and env["torchvision"] and env["cpu_cores"] >= 1
    assert env["env_vars"]["OMP_NUM_THREADS"] == "2" and env["env_vars"]["NCCL_SOCKET_IFNAME"] == "lo"
    assert "CUDA_API_TOKEN" not in env["env_vars"]
    assert "do-not-log" not in repr(env)


def test_a_new_module_under_bench_or_conf_makes_the_checkout_dirty_data_elsewhere_does_not(tmp_path):
    """Issue 40 §10: a run from a tree with a new untracked module under bench/ reported git_dirty False.
    A real checkout (bench/, conf/ and .gitignore committed in a fresh repository), read by a real process."""
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    source = Path(__file__).resolve().parents[2]
    for part in ("bench", "conf"):
        shutil.copytree(source / part, tmp_path / part, ignore=shutil.ignore_patterns("__pycache__"))
    git = ["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t"]
    shutil.copy(source / ".gitignore", tmp_path)  # __pycache__ is not code either
    for command in (["init", "-q"], ["add", "."], ["commit", "-qm", "bench"]):
        subprocess.run([*git, *command], check=True)
    # one process reads the checkout after each step: nothing new, data beside bench/, a module, a config
    steps = ["", "digits/0/a.png", "compare/report.md", "bench/scenarios_extra.py", "conf/model/mine.yaml"]
    read = """
import sys
from pathlib import Path
from bench.tracking.environment import code_provenance
for new in sys.argv[1:]:
    if new:
        Path(new).parent.mkdir(parents=True, exist_ok=True)
        Path(new).write_text("x = 1")
    print(code_provenance([])["git_dirty"])
    if new.startswith("bench/"):
        Path(new).unlink()
"""
    env = {**__import__("os").environ, "PYTHONPATH": str(tmp_path)}
    done = subprocess.run([sys.executable, "-c", read, *steps], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert done.stdout.split() == ["False", "False", "False", "True", "True"], done.stderr


def test_installed_packages_read_from_metadata_heads_match_the_full_parser(tmp_path):
    """packages.txt lists name==version from the head of each METADATA: the same list the full
    e-mail parser gives for what is installed here, and for a folded or unusual header too."""
    from importlib import metadata

    from bench.tracking.environment import _name_and_version, installed_packages

    full = sorted(
        {f"{d.metadata['Name']}=={d.version}" for d in metadata.distributions() if d.metadata["Name"]}, key=str.lower
    )
    assert list(installed_packages()) == full and any(p.startswith("torch==") for p in full)
    odd = tmp_path / "odd-1.0.dist-info"
    odd.mkdir()
    (odd / "METADATA").write_text("Metadata-Version: 2.1\nname: odd\nVersion: 1.0\n\nName: not-a-header\n")
    assert _name_and_version(metadata.PathDistribution(odd)) == ("odd", "1.0")  # lower-case key: the full parser
    plain = tmp_path / "plain-2.0.dist-info"
    plain.mkdir()
    (plain / "METADATA").write_text("Metadata-Version: 2.1\nName: plain\nVersion: 2.0\n\nVersion: 9\n")
    assert _name_and_version(metadata.PathDistribution(plain)) == ("plain", "2.0")


def test_the_torchvision_version_without_importing_it_is_the_imported_ones(monkeypatch):
    """environment.json's torchvision version, read from its version.py when torchvision is not
    imported (a run of bench's own model never imports it), is torchvision.__version__ with the
    build tag ('0.29.1+cu130'), and importing it is left undone."""
    import sys

    import torchvision

    from bench.tracking.environment import _torchvision_version

    for name in [n for n in sys.modules if n == "torchvision" or n.startswith("torchvision.")]:
        monkeypatch.delitem(sys.modules, name)
    assert _torchvision_version() == torchvision.__version__
    assert "torchvision" not in sys.modules


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="checks the GPU-less degradation")
def test_nvml_missing_degrades_quietly():
    assert nvml_devices() == []
    monitor = GpuMonitor(0, interval_s=0.01).start()
    assert monitor.stop().figures() == {}


class _FakeNvml:
    def nvmlDeviceGetHandleByIndex(self, index):
        return ("index", index)

    def nvmlDeviceGetHandleByUUID(self, uuid):
        return ("uuid", uuid)


def test_nvml_handle_follows_cuda_visible_devices__mocked_nvml(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,1")
    assert nvml_handle(_FakeNvml(), 0) == ("index", 3)
    assert nvml_handle(_FakeNvml(), 1) == ("index", 1)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-abc")
    assert nvml_handle(_FakeNvml(), 0) == ("uuid", "GPU-abc")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert nvml_handle(_FakeNvml(), 2) == ("index", 2)


@pytest.mark.slow  # in-process, but an unreachable server's retries: ~6 s
def test_tracker_stops_after_first_failure_with_one_warning(tmp_path, caplog):
    """A real sqlite store and a run id it does not have: MLflow raises for real."""
    import logging

    from mlflow import MlflowClient

    from bench.tracking.tracker import Tracker

    uri = f"sqlite:///{tmp_path}/mlflow.db"
    tracker = Tracker(MlflowClient(tracking_uri=uri), "0" * 32, uri)
    with caplog.at_level(logging.WARNING, logger="bench.tracking.tracker"):
        tracker.log_metrics({"images_per_second": 1.0})
        tracker.log_series("step_time_ms", [1.0, 2.0])
        tracker.finish("FINISHED")
    assert not tracker.active
    assert caplog.text.count("no further tracking") == 1
    assert uri in caplog.text


def test_closing_stale_runs_is_housekeeping_a_store_that_stops_answering_ends_it_with_a_debug_line(monkeypatch, caplog):
    """close_stale runs as every run opens; a store that answered the open and not the search (a server
    gone in between: here a free port on loopback, refused, no retries) closes nothing and raises nothing."""
    import logging

    from mlflow import MlflowClient

    from bench.rank_context import free_port
    from bench.tracking.tracker import close_stale

    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    with caplog.at_level(logging.DEBUG, logger="bench"):
        assert close_stale(MlflowClient(f"http://127.0.0.1:{free_port()}"), "0", by="the next bench run") == 0
    assert "stale runs not closed (MlflowException: " in caplog.text


def test_a_stop_inside_an_mlflow_write_still_ends_the_run_killed_and_frees_the_store__stop_injected(tmp_path):
    """A real sqlite store; the Ctrl-C is raised from inside MLflow's write of the params (an SQLAlchemy
    hook on the INSERT, where a real one lands one time in ~15 under load: its timing is what cannot be
    made here). It left that write's transaction open: the KILLED status failed (the broken transaction, or
    "database is locked" after MLflow's 20 s busy timeout; the run stayed RUNNING), as did the next run's writes."""
    from mlflow import MlflowClient
    from sqlalchemy import event

    from bench.tracking.tracker import Tracker

    uri = f"sqlite:///{tmp_path}/mlflow.db"
    tracker = Tracker.start(uri, "e", "interrupted", {})
    engine = tracker.client._tracking_client.store.engine

    def ctrl_c_in_the_insert(conn, cursor, statement, *args):
        if statement.lstrip().upper().startswith("INSERT INTO PARAMS"):
            event.remove(engine, "after_cursor_execute", ctrl_c_in_the_insert)
            raise KeyboardInterrupt

    event.listen(engine, "after_cursor_execute", ctrl_c_in_the_insert)
    try:
        tracker.log_params({f"p{i}": i for i in range(50)})
    except KeyboardInterrupt:
        tracker.finish("KILLED", error="Ctrl-C")
    assert tracker.active, tracker.lost
    assert MlflowClient(tracking_uri=uri).get_run(tracker.run_id).info.status == "KILLED"
    after = Tracker.start(uri, "e", "the next run", {})  # this process's next run writes at once
    after.finish("FINISHED")
    assert after.active and after.client.get_run(after.run_id).info.status == "FINISHED", after.lost


# --- which launcher starts a run's ranks (bench.launch.select_launcher) --------------------------


@pytest.mark.parametrize(
    "overrides, env, in_sweep, expected, reports",
    [
        ([], {}, False, "InProcess", True),
        (["distributed=ddp"], {}, False, "InProcess", True),  # one process: the scaling baseline
        (["distributed=ddp"], {}, True, "Elastic", True),  # every sweep job runs in processes of its own
        (["distributed=ddp", "distributed.nproc_per_node=2"], {}, False, "Elastic", True),
        (
            ["distributed=ddp", "distributed.nnodes=2", "distributed.node_rank=1", "distributed.rdzv_endpoint=h:1"],
            {},
            False,
            "Elastic",
            False,
        ),  # a follower node trains, node 0 reports
        (["distributed=ddp"], {"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0"}, False, "Joined", True),
        (["distributed=ddp"], {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1"}, False, "Joined", False),
        (["distributed=single"], {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1"}, False, "InProcess", True),
    ],
)
def test_select_launcher_is_the_one_place_that_decides(
    compose, monkeypatch, overrides, env, in_sweep, expected, reports
):
    from bench.launch.launchers import select_launcher

    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    launcher = select_launcher(compose(*overrides), has_ranks=True, in_sweep=in_sweep)
    assert type(launcher).__name__ == expected and launcher.reports is reports


def test_a_scenario_without_ranks_runs_in_process(compose):
    from bench.launch.launchers import select_launcher

    config = compose("mode=storage", "distributed=ddp", "distributed.nproc_per_node=2")
    assert type(select_launcher(config, has_ranks=False, in_sweep=True)).__name__ == "InProcess"


# --- one line for a failed launch (bench.launch.launchers) --------------------------------------------


def _failure(local_rank: int, pid: int, exitcode: int, tmp_path, message: str = ""):
    """torch's own ProcessFailure, with an error file like @record writes when the worker raised."""
    import json

    from torch.distributed.elastic.multiprocessing.errors import ProcessFailure

    error_file = tmp_path / f"error{local_rank}.json"
    if message:
        error_file.write_text(json.dumps({"message": {"message": message, "extraInfo": {"timestamp": "1"}}}))
    return ProcessFailure(local_rank=local_rank, pid=pid, exitcode=exitcode, error_file=str(error_file))


def test_a_killed_rank_is_named_with_its_signal(tmp_path):
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

    from bench.launch.launchers import describe_failure

    killed = ChildFailedError(
        "bench", {1: _failure(1, 222, -9, tmp_path), 0: _failure(0, 111, 1, tmp_path, "peer gone")}
    )
    assert describe_failure(killed) == "worker rank 1 (pid 222) was killed by SIGKILL"


def test_the_reapers_own_kill_is_never_the_cause(tmp_path):
    """Rank 0 timed out in a collective; the reaper then SIGKILLed rank 1 (stopped, hung): the
    failure is rank 0's timeout, not the kill bench made itself."""
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

    from bench.launch.launchers import describe_failure

    exc = ChildFailedError(
        "bench",
        {0: _failure(0, 111, 1, tmp_path, "RuntimeError: Timed out waiting 8000ms"), 1: _failure(1, 222, -9, tmp_path)},
    )
    assert (
        describe_failure(exc, killed=[222])
        == "worker rank 0 (pid 111) exited with code 1: RuntimeError: Timed out waiting 8000ms"
    )
    assert "SIGKILL" in describe_failure(exc)  # without knowing, the signal would have been blamed


def test_a_hung_rank_names_the_watchdog(tmp_path):
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

    from bench.launch.launchers import EXIT_HUNG, describe_failure

    exc = ChildFailedError("bench", {0: _failure(0, 111, EXIT_HUNG, tmp_path)})
    assert "saw no training step finish for distributed.timeout_s" in describe_failure(exc)


def test_a_stopped_rank_is_named_not_the_peer_that_timed_out(tmp_path):
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

    from bench.launch.launchers import describe_failure

    exc = ChildFailedError(
        "bench",
        {
            0: _failure(0, 111, 1, tmp_path, "RuntimeError: Application timeout caused pair closure"),
            1: _failure(1, 222, -9, tmp_path),
        },
    )
    assert describe_failure(exc, killed=[222], stopped=(1, 222)) == (
        "worker rank 1 (pid 222) was stopped (SIGSTOP or a debugger) and stopped stepping; rank 0 then gave up "
        "waiting for it after distributed.timeout_s: RuntimeError: Application timeout caused pair closure"
    )


def test_the_final_line_is_strict_json_even_with_non_finite_figures():
    """A diverged run's loss is nan: the final line still parses with a strict parser (null)."""
    import json

    from bench.results import final_line

    line = final_line({"final_loss": float("nan"), "images_per_second": 10.0, "x": [float("inf")]})

    def refuse(constant):
        raise ValueError(f"not JSON: {constant}")

    parsed = json.loads(line, parse_constant=refuse)
    assert parsed == {"radix_metrics": {"final_loss": None, "images_per_second": 10.0, "x": [None]}}


@pytest.mark.slow  # starts processes inside bench (workers, readers, a fork)
def test_environment_records_the_torch_build_it_ran_on_cpu():
    """On this CPU machine: the torch version, and the CUDA and cuDNN versions its build carries
    (a CUDA wheel has them without a GPU; a CPU wheel has none, and then none is recorded)."""
    import torch

    env = collect_environment()
    assert env["torch"] == torch.__version__ and env["cuda_available"] is torch.cuda.is_available()
    assert env.get("cuda") == torch.version.cuda
    if torch.backends.cudnn.is_available():
        assert env["cudnn"] == str(torch.backends.cudnn.version())
    else:
        assert "cudnn" not in env


@pytest.mark.slow  # starts processes inside bench (workers, readers, a fork)
def test_environment_records_cuda_cudnn_nccl_and_driver_versions_cuda_mocked(monkeypatch):
    """What a GPU run records, with torch's CUDA queries and NVML mocked (no GPU here): CUDA,
    cuDNN, NCCL (a tuple in recent torch, an int in older ones) and the driver, as its tags."""
    import sys
    import types

    import torch

    monkeypatch.setattr(torch.version, "cuda", "12.8")
    monkeypatch.setattr(torch.backends.cudnn, "is_available", lambda: True)
    monkeypatch.setattr(torch.backends.cudnn, "version", lambda: 91002)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda index=0: "NVIDIA H200")
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda index=0: (9, 0))
    monkeypatch.setattr(torch.cuda.nccl, "version", lambda: (2, 27, 3))

    class Memory:
        total = 143771 * 2**20

    nvml = types.ModuleType("pynvml")
    nvml.nvmlInit = lambda: None  # type: ignore[attr-defined]
    nvml.nvmlShutdown = lambda: None  # type: ignore[attr-defined]
    nvml.nvmlSystemGetDriverVersion = lambda: "580.95.05"  # type: ignore[attr-defined]
    nvml.nvmlDeviceGetCount = lambda: 1  # type: ignore[attr-defined]
    nvml.nvmlDeviceGetHandleByIndex = lambda index: index  # type: ignore[attr-defined]
    nvml.nvmlDeviceGetName = lambda handle: "NVIDIA H200"  # type: ignore[attr-defined]
    nvml.nvmlDeviceGetMemoryInfo = lambda handle: Memory()  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "pynvml", nvml)

    env = collect_environment()
    assert (env["cuda"], env["cudnn"], env["nccl"], env["gpu_driver"]) == ("12.8", "91002", "2.27.3", "580.95.05")
    assert (env["gpu_name"], env["gpu_count"], env["gpu_capability"], env["gpu_memory_mb"]) == (
        "NVIDIA H200",
        1,
        "9.0",
        143771,
    )
    monkeypatch.setattr(torch.cuda.nccl, "version", lambda: 2708)  # older torch: one int
    assert collect_environment()["nccl"] == "2708"


def test_store_errors_are_one_line_naming_the_innermost_cause():
    """Issue 28 item 9: MLflow wraps SQLAlchemy wraps sqlite3; the warning names sqlite's reason."""
    import sqlite3

    from bench.tracking.store import store_error

    try:
        try:
            raise sqlite3.OperationalError("database or disk is full")
        except sqlite3.OperationalError as inner:
            raise RuntimeError("(raised as a result of Query-invoked autoflush; ...)\n[SQL: INSERT ...]") from inner
    except RuntimeError as outer:
        assert store_error(outer) == "OperationalError: database or disk is full"
    assert store_error(ValueError("at http://u:pw@host/x\nmore")) == "ValueError: at http://***@host/x"


def _schema(db) -> dict:
    """Each table's and index's definition, its clauses in any order (MLflow's migrations write a table's
    constraints in an order that depends on what the process imported before)."""
    import sqlite3

    with sqlite3.connect(db) as reader:
        rows = reader.execute("SELECT type, name, sql FROM sqlite_master")
        return {(kind, name): sorted(" ".join(c.split()) for c in (sql or "").split(",")) for kind, name, sql in rows}


@pytest.mark.slow  # in-process, but MLflow's migrations run once: ~5 s
def test_a_new_store_starts_as_a_copy_of_the_empty_one_this_mlflow_made_first(tmp_path, monkeypatch):
    """The first new sqlite store runs MLflow's migrations and keeps a copy in $XDG_CACHE_HOME/bench;
    the next starts as that copy (the same file: no migration), and MLflow opens it. A kept file that
    is not a whole empty store (damaged, or a store someone tracked to) is never copied: MLflow migrates
    and the copy is made anew. Without room for the copy and 64 MiB more, or where the cache cannot be
    written, nothing is kept and nothing is raised; a relative XDG_CACHE_HOME is no cache; a copy a
    killed process left half-written is removed. (One
    migration: the first store's.)"""
    from mlflow import MlflowClient

    from bench.tracking import store

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    kept = store.empty_store()
    assert kept.parent == tmp_path / "cache" / "bench"
    kept.parent.mkdir(parents=True)
    kept.write_bytes(b"not a database")  # damaged: never copied
    first, second = tmp_path / "first.db", tmp_path / "second.db"
    store.create_whole(first)
    assert store.whole_schema(first) and kept.read_bytes() == first.read_bytes()  # made anew
    store.create_whole(second)
    assert second.read_bytes() == kept.read_bytes() and _schema(second) == _schema(first)
    client = MlflowClient(tracking_uri=f"sqlite:///{second}")
    client.create_experiment("opened")
    assert {e.name for e in client.search_experiments()} == {"Default", "opened"}
    assert not store.whole_schema(second)  # it holds experiments now: never a copy's source
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cache", "first.db", "second.db"]  # no temporary left

    kept.unlink()
    no_pid = int(Path("/proc/sys/kernel/pid_max").read_text())  # pids are below it: no process has it
    left = kept.with_name(f"{kept.name}.tmp{no_pid}")  # a copy its killed writer left
    left.write_bytes(b"half a copy")
    monkeypatch.setattr(store, "EMPTY_STORE_ROOM", 1 << 60)  # less room than the copy needs
    store.keep_empty_store(first, kept)
    assert not kept.exists() and not left.exists()
    store.keep_empty_store(first, first / "bench" / kept.name)  # a cache under a file: no error
    assert list(kept.parent.iterdir()) == []
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/cache")  # not a cache (the XDG spec): none is kept
    assert store.empty_store() is None


def test_the_ui_figure_is_rounded_to_four_significant_digits_and_sweeps_say_how_many_failed():
    from bench.analysis.render import failure_sentence
    from bench.report_view import rounded

    assert [rounded(v) for v in (4692.43, 7.32608716, 284.62942742846934, 0.00123456, 0.0)] == [
        4692,
        7.326,
        284.6,
        0.001235,
        0.0,
    ]
    assert failure_sentence(4, 0, ["x"]) == ""
    assert failure_sentence(4, 4, ["", "TypeError: bad"]) == "all 4 jobs failed: TypeError: bad"
    assert failure_sentence(4, 1) == "1 of 4 jobs failed"


def test_a_latency_sweeps_view_and_compare_link_put_the_fastest_job_first_and_chart_each_job(bench):
    """Issue 34 §1 on a real sqlite store: an inference sweep's figure is a latency, lowest first; its
    view lists the parent and each job ungrouped and charts a bar per job (the parent hidden where
    MLflow 2.x would draw it empty), the compare link names the jobs lowest latency first; a sweep
    whose jobs have no figure is sorted by name (by start time MLflow would fold the jobs away)."""
    import json
    from urllib.parse import unquote

    from mlflow import MlflowClient

    from bench.infer.scenario import VIEW
    from bench.tracking.ui_view import jobs_compare_link, runs_link

    uri = bench.with_store().uri  # a made store's copy: no migrations
    client = MlflowClient(tracking_uri=uri)
    experiment = client.create_experiment("bench")
    parent = client.create_run(experiment, run_name="sweep").info.run_id
    jobs = {}
    for latency in (9.5, 2.25, 4.0):
        job = client.create_run(experiment, tags={"mlflow.parentRunId": parent, "bench.parent": parent}).info.run_id
        client.log_metric(job, "latency_ms_p50", latency)
        jobs[latency] = job

    link = runs_link(client, uri, experiment, parent, ["data.batch_size"], VIEW.sample)
    assert link.endswith(
        f"#/experiments/{experiment}/runs?workflowType=machine_learning&viewStateShareKey=bench-sweep-{parent[:12]}"
    )
    state = json.loads(client.get_experiment(experiment).tags[f"mlflow.sharedViewState.bench-sweep-{parent[:12]}"])
    assert (state["orderByKey"], state["orderByAsc"]) == ("metrics.`latency_ms_p50`", True)
    # the runs grouped under the sweep's name, the group's row the lowest latency; the bars one per job
    by_sweep = [{"mode": "tag", "groupByData": "bench.sweep"}]
    assert state["groupBy"] == {"aggregateFunction": "min", "groupByKeys": by_sweep}
    assert state["useGroupedValuesInCharts"] is False
    assert {client.get_run(run).data.tags["bench.sweep"] for run in [parent, *jobs.values()]} == {"sweep"}
    assert state["selectedColumns"][:3] == ["metrics.`latency p50 ms`", "tags.`error`", "params.`data.batch_size`"]
    assert [(c["type"], c.get("metricKey"), c.get("selectedParams")) for c in state["compareRunCharts"]] == [
        ("BAR", "latency p50 ms", None),  # the rounded copy: the bars show the report table's digits
        ("PARALLEL", None, ["data.batch_size"]),
    ]
    assert (state["runsHiddenMode"], state["runsHidden"]) == ("CUSTOM", [parent])

    compare = unquote(jobs_compare_link(client, uri, experiment, parent, VIEW.sample) or "")
    ordered = json.dumps([jobs[2.25], jobs[4.0], jobs[9.5]], separators=(",", ":"))
    assert compare.endswith(f'/#/compare-runs?runs={ordered}&experiments=["{experiment}"]'), compare
    assert compare.startswith(f"MLflow compare: mlflow ui --backend-store-uri {uri}, then open http://127.0.0.1:5000/")

    failed = client.create_run(experiment, run_name="all failed").info.run_id  # its one job has no figure
    client.create_run(experiment, tags={"mlflow.parentRunId": failed, "bench.parent": failed})
    runs_link(client, uri, experiment, failed, (), VIEW.sample)
    state = json.loads(client.get_experiment(experiment).tags[f"mlflow.sharedViewState.bench-sweep-{failed[:12]}"])
    assert (state["orderByKey"], state["orderByAsc"]) == ("tags.`mlflow.runName`", True)
    assert [c["type"] for c in state["compareRunCharts"]] == ["BAR"]  # nothing swept: no parallel coordinates


@pytest.mark.slow  # in-process, but a composed config, a real MLflow store and its run: ~3 CPU-s
def test_a_second_stop_landing_in_the_killed_runs_marking_still_ends_it_killed(tmp_path):
    """A slurm_local job SIGKILLed with its sweep got two SIGTERMs (its controller's death and its
    own): the second landed inside the MLflow write that marked the run KILLED and cut it short,
    and the run stayed RUNNING. Here the command's own SIGTERM handler is called inside that write
    (sys.settrace, as Python calls it between two lines): the run ends KILLED, exit 143."""
    import signal
    import sys

    from mlflow import MlflowClient

    from bench.app import _fail
    from bench.config import compose
    from bench.errors import Interrupted
    from bench.machine.children import sigterm_raises
    from bench.tracking.tracker import Tracker, open_run

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    config = compose(f"tracking.uri={uri}")
    tracker = open_run(config.tracking, tmp_path, "stopped", {}, {}, [])
    landed = []

    def in_the_write(frame, event, _arg):
        if event == "line" and frame.f_code is Tracker._call.__code__ and not landed and "getattr" in _line(frame):
            landed.append(frame.f_locals["method"])
            signal.getsignal(signal.SIGTERM)(signal.SIGTERM, frame)  # the second SIGTERM, as Python delivers it
        return in_the_write

    with sigterm_raises():
        tracer = sys.gettrace()  # put back after, not removed: coverage's or a debugger's
        sys.settrace(lambda frame, _event, _arg: in_the_write if frame.f_code is Tracker._call.__code__ else None)
        try:
            code = _fail(Interrupted("SIGTERM"), config.scenario, config, tmp_path, tracker)
        finally:
            sys.settrace(tracer)
    assert landed == ["log_batch"] and code == 143  # it landed in the error tag's write, the first of two
    run = MlflowClient(uri).get_run(str(tracker.run_id))
    assert run.info.status == "KILLED" and run.data.tags["error"] == "terminated by signal SIGTERM"


def test_a_ctrl_c_landing_as_mlflow_makes_the_run_still_ends_it_killed(tmp_path, monkeypatch):
    """gpu_check's Ctrl-C test, on a loaded machine: the run showed RUNNING, the test sent SIGINT, and it
    landed in MLflow's create_run after its commit. No tracker held the run yet, so nothing marked it and
    it stayed RUNNING. Here the command's SIGINT handler is called as MLflow's create_run returns: the
    Ctrl-C still ends the command (KeyboardInterrupt), and the run it made ends KILLED."""
    import signal

    from mlflow import MlflowClient

    from bench.config import compose
    from bench.machine.children import sigterm_raises
    from bench.tracking.tracker import open_run

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    config = compose(f"tracking.uri={uri}")
    make = MlflowClient.create_run

    def made_then_ctrl_c(client, *args, **kwargs):
        run = make(client, *args, **kwargs)
        signal.getsignal(signal.SIGINT)(signal.SIGINT, None)  # Ctrl-C, as Python delivers it
        return run

    monkeypatch.setattr(MlflowClient, "create_run", made_then_ctrl_c)
    with sigterm_raises(), pytest.raises(KeyboardInterrupt):
        open_run(config.tracking, tmp_path, "stopped", {}, {}, [])
    monkeypatch.undo()
    client = MlflowClient(uri)
    (run,) = client.search_runs([client.get_experiment_by_name(config.tracking.experiment).experiment_id])
    assert run.info.status == "KILLED" and run.data.tags["error"] == "KeyboardInterrupt"


def _line(frame) -> str:
    import linecache

    return linecache.getline(frame.f_code.co_filename, frame.f_lineno)
