"""The Slurm sweep launchers in-process (bench.slurm, conf/hydra/launcher/): what each job
asks Slurm for, resolved against its own config; the overrides that make a task one node of a
multi-node job; the sweep's bookkeeping for jobs that never return, on a real sqlite MLflow store.
Real Slurm runs are in tests/e2e/test_slurm.py."""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import SimpleNamespace
from typing import Optional

import pytest
from omegaconf import OmegaConf

pytest.importorskip("hydra_plugins.hydra_submitit_launcher", reason="needs hydra-submitit-launcher (bench[slurm])")


@pytest.fixture
def launcher_of(tmp_path):
    """launcher_of(preset, *overrides) -> the launcher a multirun with these overrides would use,
    set up as Hydra sets it up (its config loader plans the jobs)."""
    from hydra import compose, initialize_config_dir
    from hydra._internal.callbacks import Callbacks
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.hydra_config import HydraConfig
    from hydra.core.plugins import Plugins
    from hydra.types import HydraContext

    from bench import config_dir
    from bench.config.schema import register_configs
    from bench.launch.preview import register_bench_launchers

    register_configs()
    register_bench_launchers()
    made = []

    def make(preset: str, *overrides: str):
        context = initialize_config_dir(config_dir=config_dir(), version_base="1.3")
        context.__enter__()
        made.append(context)
        cfg = compose(
            "config",
            [f"hydra/launcher={preset}", f"hydra.sweep.dir={tmp_path}/sweep", *overrides],
            return_hydra_config=True,
        )
        HydraConfig.instance().set_config(cfg)
        hydra_context = HydraContext(config_loader=GlobalHydra.instance().config_loader(), callbacks=Callbacks(cfg))
        return Plugins.instance().instantiate_launcher(
            hydra_context=hydra_context, task_function=lambda c: 0, config=cfg
        )

    yield make
    for context in reversed(made):
        context.__exit__(None, None, None)


@pytest.mark.slow  # in-process, but composes a launcher's config and plans its jobs: ~1.4 CPU-s
def test_each_slurm_job_asks_for_what_its_own_config_needs(launcher_of, tmp_path, monkeypatch):
    launcher = launcher_of(
        "slurm",
        "hydra.launcher.partition=gpu",
        "hydra.launcher.account=proj7",
        "hydra.launcher.qos=high",
        "hydra.launcher.timeout_min=90",
        "hydra.launcher.setup=[module load cuda]",
        "+experiment=h100_bf16",
    )
    assert type(launcher).__module__ == "hydra_plugins.bench_launcher.launchers"
    one = launcher._plan(["distributed=ddp", "distributed.nproc_per_node=1"], 0)
    eight = launcher._plan(["distributed=ddp", "distributed.nproc_per_node=8"], 1)
    nodes = launcher._plan(
        [
            "distributed=ddp",
            "distributed.nproc_per_node=8",
            "distributed.nnodes=2",
            "distributed.rdzv_endpoint=placeholder:1",
        ],
        2,
    )
    assert eight.params == {**one.params, "gpus_per_node": 8, "cpus_per_task": 64, "mem_gb": 256}
    assert one.params["gpus_per_node"] == 1 and one.params["cpus_per_task"] == 8 and one.params["mem_gb"] == 32
    assert one.params["nodes"] == 1 and one.params["tasks_per_node"] == 1 and one.params["timeout_min"] == 90
    assert {k: one.params[k] for k in ("slurm_partition", "slurm_account", "slurm_qos", "slurm_setup")} == {
        "slurm_partition": "gpu",
        "slurm_account": "proj7",
        "slurm_qos": "high",
        "slurm_setup": ["module load cuda"],
    }
    assert nodes.params["nodes"] == 2 and nodes.params["tasks_per_node"] == 1 and nodes.params["gpus_per_node"] == 8
    assert eight.job_dir == tmp_path / "sweep" / "1"
    assert "submitit_folder" not in one.params and "_target_" not in one.params

    from bench.slurm import _grouped

    again = launcher._plan(["distributed=ddp", "distributed.nproc_per_node=1", "precision=bf16"], 3)
    assert [[job.num for job in group] for group in _grouped([one, eight, nodes, again])] == [[0, 3], [1], [2]]

    import submitit

    # submitit's Slurm executor will not be made without an srun on PATH (issue 18: this unit test
    # failed on a machine without Slurm); only its parameter check is used, so an srun that is
    # never run stands in (a real one, where installed, is shadowed the same way)
    stand_in = tmp_path / "bin"
    stand_in.mkdir()
    (stand_in / "srun").write_text("#!/bin/sh\necho 'not Slurm: a stand-in of test_slurm_launcher.py' >&2\nexit 1\n")
    (stand_in / "srun").chmod(0o755)
    monkeypatch.setenv("PATH", f"{stand_in}{os.pathsep}{os.environ['PATH']}")
    executor = submitit.AutoExecutor(cluster="slurm", folder=tmp_path / "submitit")
    executor.update_parameters(**eight.params)  # every key is one submitit's Slurm executor takes


def test_the_cores_and_memory_per_process_can_be_set_once_for_every_job(launcher_of):
    launcher = launcher_of(
        "slurm",
        "hydra.launcher.cpus_per_task='${bench.times:2,${distributed.nproc_per_node}}'",
        "hydra.launcher.mem_gb=4",
        "hydra.launcher.gpus_per_node=0",
    )
    params = launcher._plan(["distributed=ddp", "distributed.nproc_per_node=3"], 0).params
    assert (params["cpus_per_task"], params["mem_gb"], params["gpus_per_node"]) == (6, 4, 0)


def test_slurm_local_runs_one_job_at_a_time_with_the_jobs_gpus(launcher_of):
    launcher = launcher_of("slurm_local")
    assert launcher.one_at_a_time and launcher._EXECUTOR == "local"
    params = launcher._plan(["distributed=ddp", "distributed.nproc_per_node=2"], 0).params
    assert params["gpus_per_node"] == 2 and params["nodes"] == 1 and params["tasks_per_node"] == 1


TWO_NODES = {
    "SUBMITIT_EXECUTOR": "slurm",
    "SLURM_JOB_NUM_NODES": "2",
    "SLURM_JOB_NODELIST": "gpu[07-08]",
    "SLURM_JOB_ID": "31234",
}


@pytest.mark.parametrize("node", [0, 1])
def test_a_task_of_a_synthetic_two_node_slurm_job_becomes_that_node_of_the_run(monkeypatch, compose, node):
    """A two-node allocation cannot exist here: its environment is written by hand."""
    from bench.launch.launchers import select_launcher
    from bench.slurm import node_overrides

    for name, value in {**TWO_NODES, "SLURM_NODEID": str(node)}.items():
        monkeypatch.setenv(name, value)
    overrides = node_overrides()
    assert overrides[:2] == [f"distributed.node_rank={node}", "distributed.rdzv_endpoint=gpu07:21234"]
    assert overrides[2:] == ([] if node == 0 else ["hydra.output_subdir=null"])  # node 0 writes .hydra/
    config = compose(
        "+experiment=cpu_smoke",
        "distributed=ddp",
        "distributed.nnodes=2",
        "distributed.nproc_per_node=8",
        *overrides[:2],
    )
    launcher = select_launcher(config, has_ranks=True, in_sweep=True)
    assert type(launcher).__name__ == "Elastic" and launcher.reports == (node == 0)


def test_no_node_overrides_for_a_one_node_job_or_outside_slurm(monkeypatch):
    from bench.slurm import node_overrides

    for name, value in {**TWO_NODES, "SLURM_NODEID": "0", "SLURM_JOB_NUM_NODES": "1"}.items():
        monkeypatch.setenv(name, value)
    assert node_overrides() == []
    monkeypatch.setenv("SLURM_JOB_NUM_NODES", "2")
    monkeypatch.setenv("SUBMITIT_EXECUTOR", "local")
    assert node_overrides() == []


# ---- the sweep's bookkeeping in the submitting process (bench.tracking.sweep) --------------------


def _sweep_config(tmp_path: Path):
    return OmegaConf.create(
        {
            "tracking": {
                "enabled": True,
                "uri": f"sqlite:///{tmp_path}/mlflow.db",
                "experiment": "bench",
                "run_name": None,
                "probe_timeout_s": 5.0,
            },
            "hydra": {"sweep": {"dir": str(tmp_path / "sweep")}, "overrides": {"task": ["precision=fp32,bf16,tf32"]}},
        }
    )


@pytest.mark.slow  # in-process, but ~10 s
def test_jobs_that_never_returned_are_failed_children_and_counted(tmp_path, monkeypatch):
    """Job 1 opened its child run and was cancelled (left RUNNING); job 2 never started. Both end
    FAILED children of the one parent, with the reason, counted; the report has their rows."""
    from mlflow import MlflowClient

    from bench.tracking import sweep
    from bench.tracking.tracker import Tracker

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    callback, config = sweep.MlflowSweepCallback(), _sweep_config(tmp_path)
    callback.on_multirun_start(config)
    carried = json.loads(os.environ[sweep.SWEEP_ENV])
    parent_id = carried["parent_run_id"]
    assert parent_id and carried["launch_dir"] == str(tmp_path.resolve()) and carried["tracking_down"] is None
    hydra_job = OmegaConf.create({"job": {"num": 1}, "sweep": {"dir": "sweep"}})
    assert sweep.current_job(hydra_job).parent_run_id == parent_id  # what a job on any node reads

    uri = config.tracking.uri
    running = Tracker.start(uri, "bench", "resnet50-job1", {"sweep.job": "1"}, parent_run_id=parent_id)
    (tmp_path / "sweep" / "1" / ".hydra").mkdir(parents=True)
    (tmp_path / "sweep" / "1" / ".hydra" / "overrides.yaml").write_text("- precision=bf16\n")
    (tmp_path / "sweep" / "1" / ".hydra" / "config.yaml").write_text("precision: {name: bf16}\n")
    sweep.job_lost(
        1, ["precision=bf16"], tmp_path / "sweep" / "1", "Slurm job 7_1 ended CANCELLED by 0 without a result"
    )
    sweep.job_lost(2, ["precision=tf32"], tmp_path / "sweep" / "2", "Slurm job 7_2 ended TIMEOUT without a result")
    # job 3's run failed on its own as scancel reached its rank first: a symptom, said after the cancel
    symptom = "WorkerFailure: worker rank 0 (pid 25216) exited with code 255"
    failed = Tracker.start(uri, "bench", "resnet50-job3", {"sweep.job": "3"}, parent_run_id=parent_id)
    failed.finish("FAILED", error=symptom)
    (tmp_path / "sweep" / "3" / ".hydra").mkdir(parents=True)
    (tmp_path / "sweep" / "3" / ".hydra" / "overrides.yaml").write_text("- precision=fp32\n")
    (tmp_path / "sweep" / "3" / ".hydra" / "config.yaml").write_text("precision: {name: fp32}\n")
    (tmp_path / "sweep" / "3" / "error.txt").write_text(f"Traceback (most recent call last):\n{symptom}\n")
    cancelled = "Slurm job 7_3 ended CANCELLED by 0 without a result"
    sweep.job_lost(3, ["precision=fp32"], tmp_path / "sweep" / "3", cancelled)
    assert sweep.failed_jobs() == 3
    callback.on_multirun_end(config)
    assert sweep.SWEEP_ENV not in os.environ

    client = MlflowClient(tracking_uri=uri)
    runs = {
        r.data.tags.get("sweep.job", "parent"): r
        for r in client.search_runs([e.experiment_id for e in client.search_experiments()])
    }
    assert set(runs) == {"parent", "1", "2", "3"}
    assert runs["parent"].data.tags["sweep.jobs"] == "3" and runs["parent"].data.tags["sweep.failed_jobs"] == "3"
    assert runs["3"].info.status == "FAILED" and runs["3"].data.tags["error"] == f"{cancelled}; the run said: {symptom}"
    assert runs["1"].info.run_id == running.run_id and runs["1"].info.status == "FAILED"
    assert "CANCELLED" in runs["1"].data.tags["error"]
    assert runs["2"].info.status == "FAILED" and "TIMEOUT" in runs["2"].data.tags["error"]
    assert runs["2"].data.params["precision"] == "tf32" and runs["2"].data.tags["overrides"] == "precision=tf32"
    for child in (runs["1"], runs["2"]):
        assert child.data.tags["mlflow.parentRunId"] == parent_id
    rows = {row["job"]: row for row in _csv(tmp_path / "sweep" / "report" / "report.csv")}
    assert rows["1"]["status"] == rows["2"]["status"] == "FAILED"
    assert "CANCELLED" in rows["1"]["error"] and "TIMEOUT" in rows["2"]["error"]
    assert rows["3"]["error"] == f"{cancelled}; the run said: {symptom}"


def _csv(path: Path) -> list:
    import csv

    with path.open() as fh:
        return list(csv.DictReader(fh))


def test_a_sweep_without_tracking_still_tells_its_jobs_where_it_started(tmp_path, monkeypatch):
    from bench.tracking import sweep

    monkeypatch.chdir(tmp_path)
    config = _sweep_config(tmp_path)
    config.tracking.enabled = False
    sweep.MlflowSweepCallback().on_multirun_start(config)
    try:
        job = sweep.current_job(OmegaConf.create({"job": {"num": 0}, "sweep": {"dir": "s"}}))
        assert job.parent_run_id is None and job.launch_dir == str(tmp_path.resolve())
    finally:
        os.environ.pop(sweep.SWEEP_ENV, None)


def test_a_jobs_return_is_read_through_hydras_public_accessor(monkeypatch):
    """A return is counted by its status and value (an exit code); a task that raised is said by
    what it raised, read through JobReturn.return_value (Hydra's accessor), not its private field."""
    from hydra.core.utils import JobReturn, JobStatus

    from bench import slurm
    from bench.tracking import sweep

    monkeypatch.setattr(sweep, "_state", sweep.SweepState())
    for code, failed in ((0, False), (1, True)):
        returned = JobReturn(status=JobStatus.COMPLETED)
        returned.return_value = code
        assert sweep.job_returned(code, returned) is failed
    raised = JobReturn(status=JobStatus.FAILED)
    raised.return_value = RuntimeError("the task broke")
    assert sweep.job_returned(2, raised) is True
    assert (sweep.failed_jobs(), sweep._state.jobs) == (2, 3)
    assert slurm._raised(raised) == "RuntimeError: the task broke"


class _EndedJob:
    """A job the launcher waits for and collects, as submitit's Job shows one that has ended: its
    state, its result file's path, and what results() raises (submitit's real exceptions)."""

    job_id = "7_0"

    def __init__(self, tmp_path: Path, state: str, raised: Optional[Exception] = None):
        self.state, self.raised = state, raised
        self.paths = SimpleNamespace(result_pickle=tmp_path / "7_0_result.pkl")

    def done(self, force_check: bool = False) -> bool:
        return True

    def results(self) -> list:
        raise self.raised


@pytest.mark.parametrize(
    "state, result_written, lost_at_once",
    [
        ("CANCELLED by 0", False, True),  # scancel, a preemption: Slurm's own words
        ("TIMEOUT", False, True),
        ("INTERRUPTED", False, True),  # a slurm_local job ended by a signal
        ("CANCELLED by 0", True, False),  # its result landed before the cancel: read it
        ("FAILED", False, False),  # the task's trace is on its way in its result file: wait for it
        ("COMPLETED", False, False),  # a slow shared filesystem: wait for the result
    ],
)
def test_a_job_stopped_from_outside_is_lost_without_waiting_for_a_result_file(
    tmp_path, state, result_written, lost_at_once
):
    """submitit's results() waits 15 s for a result file a cancelled job never writes; the sweep
    counts such a job failed as soon as its state says so (the whole path: tests/e2e/test_slurm_cancel.py)."""
    from bench import slurm

    handle = _EndedJob(tmp_path, state)
    if result_written:
        handle.paths.result_pickle.write_bytes(b"")
    assert slurm._ended_without_result(handle) is lost_at_once


def test_a_job_whose_task_raised_or_left_no_result_is_a_failed_job_named_by_submitits_words(tmp_path, monkeypatch):
    """What results() raises once a job ended: FailedJobError (the job's Python raised outside the
    task's own catch: its trace's last line is the reason) and UncompletedJobError (a FAILED job whose
    result file never came: its state is). Both are failed jobs of the sweep, which goes on."""
    from submitit.core.utils import FailedJobError, UncompletedJobError

    from bench import slurm
    from bench.tracking import sweep

    monkeypatch.setattr(sweep, "_state", sweep.SweepState())
    launcher = type("SlurmLauncher", (slurm.SweepLauncher,), {"_EXECUTOR": "slurm", "cluster": "Slurm"})()
    trace = 'Traceback (most recent call last):\n  File "x.py", line 1\nMemoryError: the node ran out'
    raised = FailedJobError(
        f"Job (task=0) failed during processing with trace:\n----------------------\n{trace}\n"
        "----------------------\nYou can check full logs with 'job.stderr(0)' and 'job.stdout(0)'"
        "or at paths:\n  - e\n  - o"
    )
    for num, (job, reason) in enumerate(
        [
            (_EndedJob(tmp_path, "FAILED", raised), "Slurm job 7_0 failed: MemoryError: the node ran out"),
            (
                _EndedJob(tmp_path, "FAILED", UncompletedJobError("no output")),
                "Slurm job 7_0 ended FAILED without a result",
            ),
        ]
    ):
        planned = slurm.PlannedJob(num, ["precision=fp32"], {}, tmp_path / "sweep" / str(num))
        returned = launcher._collect(planned, job)
        assert returned.return_value == slurm.EXIT_FAILED
        assert (planned.job_dir / "error.txt").read_text().splitlines()[-1] == reason
    assert (sweep.failed_jobs(), sweep._state.jobs) == (2, 2)
