"""End-to-end training runs in real subprocesses on the CPU, checked through their files, their
final stdout line and the MLflow run read back from the sqlite store."""

from __future__ import annotations

import csv
import json
import math
from types import SimpleNamespace

import pytest
from mlflow import MlflowClient

REQUIRED = [
    "images_per_second",
    "total_images",
    "elapsed_seconds",
    "lr",
    "batch_size",
    "epochs",
    "steps_per_epoch",
    "step_time_ms_p50",
    "step_time_ms_p95",
    "step_time_ms_p99",
    "world_size",
    "precision",
    "model",
    "device",
]


def test_cpu_smoke_end_to_end(bench, tmp_path):
    """The README's main job: files, final JSON line, and an MLflow run in ./mlflow.db by default."""
    run_dir = tmp_path / "run"
    proc = bench.run("+experiment=cpu_smoke", f"hydra.run.dir={run_dir}")
    metrics = bench.metrics(proc)

    # stdout carries only the final line; logs go to stderr; no progress bar when not a TTY
    assert len(proc.stdout.strip().splitlines()) == 1
    assert "step/s" not in proc.stderr
    for key in REQUIRED:
        assert key in metrics, key
    assert metrics["model"] == "resnet18" and metrics["device"] == "cpu" and metrics["world_size"] == 1
    assert metrics["cpu_malloc_reuse"] is True  # glibc (Linux): freed memory kept for the next step
    assert metrics["epochs"] == 2 and metrics["steps_per_epoch"] == 5 and metrics["batch_size"] == 16
    assert metrics["measured_steps"] == 10 and metrics["total_images"] == 160
    assert metrics["images_per_second"] == pytest.approx(metrics["total_images"] / metrics["elapsed_seconds"])
    assert 0 < metrics["step_time_ms_p50"] <= metrics["step_time_ms_p95"] <= metrics["step_time_ms_p99"]
    assert metrics["peak_memory_mb"] > 0

    epochs = [json.loads(line) for line in (run_dir / "metrics_epoch.jsonl").read_text().splitlines()]
    assert [e["epoch"] for e in epochs] == [1, 2]
    assert sum(e["images"] for e in epochs) == 160
    assert sum(e["seconds"] for e in epochs) == pytest.approx(metrics["elapsed_seconds"], rel=1e-6)

    summary = json.loads((run_dir / "run_summary.json").read_text())
    assert summary["results"]["images_per_second"] == pytest.approx(metrics["images_per_second"])
    assert summary["config"]["model"]["arch"] == "resnet18"
    assert summary["config"]["precision"]["name"] == "fp32"  # choices are saved as plain strings
    assert summary["environment"]["torch"] and summary["environment"]["python"]
    assert "env_vars" in summary["environment"]
    # what to reproduce it with (issue 21): bench's version, the commit of this checkout, the packages
    environment = summary["environment"]
    assert environment["bench_version"] and len(environment["packages_sha256"]) == 16
    assert len(environment["git_commit"]) == 40 and isinstance(environment["git_dirty"], bool)
    packages = (run_dir / "packages.txt").read_text().splitlines()
    assert any(line.startswith("torch==") for line in packages) and packages == sorted(packages, key=str.lower)

    rows = list(csv.DictReader((run_dir / "summary.csv").open()))
    assert len(rows) == 1 and float(rows[0]["images_per_second"]) == pytest.approx(metrics["images_per_second"])
    steps = list(csv.DictReader((run_dir / "step_times.csv").open()))
    assert len(steps) == 10
    assert sum(float(s["step_time_ms"]) for s in steps) / 1000 == pytest.approx(metrics["elapsed_seconds"], rel=1e-3)
    assert (run_dir / "bench.log").read_text().count("step 5/10") == 1
    assert not list(run_dir.glob(".*.tmp*"))  # every file written whole, no temporary left

    # MLflow: the default store is an absolute sqlite file in the launch directory
    assert bench.db.is_file()
    client = MlflowClient(tracking_uri=bench.uri)
    experiment = client.get_experiment_by_name("bench")
    (run,) = client.search_runs([experiment.experiment_id])
    # the UI opens it as model training (not on MLflow 3's GenAI overview), and the run says where to look
    assert experiment.tags["mlflow.experimentKind"] == "custom_model_development"
    # (MLflow 3.x reads workflowType from the link, not that tag: issue 30 item 6)
    assert (
        f"MLflow UI: mlflow ui --backend-store-uri {bench.uri}, then open http://127.0.0.1:5000/#/experiments/"
        f"{experiment.experiment_id}/runs?workflowType=machine_learning&viewStateShareKey=bench-runs"
    ) in proc.stderr
    view = json.loads(experiment.tags["mlflow.sharedViewState.bench-runs"])  # the saved view that link opens
    assert {key: view.pop(key) for key in ("runsPinned", "runsHidden", "runsExpanded", "groupBy")} == {
        "runsPinned": [],
        "runsHidden": [],
        "runsExpanded": {},
        "groupBy": None,
    }  # MLflow 2.x replaces its page state with the view's: without these its runs page fails (issue 34 §1)
    assert (
        {
            "selectedColumns": ["metrics.`images/s`", "tags.`error`"],
            "columnOrder": ["attributes.`Run Name`", "metrics.`images/s`", "tags.`error`"],
            "columnWidths": {"attributes.`Run Name`": 330, "tags.`error`": 400},
            "orderByKey": "metrics.`images_per_second`",
            "orderByAsc": False,
        }.items()
        <= view.items()
        and "searchFilter" not in view
        and "compareRunCharts" not in view
    )
    assert run.data.metrics["images/s"] == round(
        metrics["images_per_second"], 3 - math.floor(math.log10(metrics["images_per_second"]))
    )  # the rounded copy the view shows (4 significant digits)
    assert run.info.status == "FINISHED"
    assert run.data.params["model.arch"] == "resnet18"
    assert run.data.params["data.batch_size"] == "16"
    assert run.data.params["precision.name"] == "fp32"
    assert run.data.metrics["images_per_second"] == pytest.approx(metrics["images_per_second"])
    assert run.data.metrics["total_images"] == 160
    assert len(client.get_metric_history(run.info.run_id, "epoch_images_per_second")) == 2
    assert len(client.get_metric_history(run.info.run_id, "step_time_ms")) == 10
    assert run.data.tags["env.torch"] and run.data.tags["env.python"]
    assert run.data.tags["env.git_commit"] == environment["git_commit"]
    assert run.data.tags["env.packages_sha256"] == environment["packages_sha256"]
    artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert {
        "run_summary.json",
        "summary.csv",
        "metrics_epoch.jsonl",
        "step_times.csv",
        ".hydra",
        "packages.txt",
    } <= artifacts
    hydra_artifacts = {a.path for a in client.list_artifacts(run.info.run_id, ".hydra")}
    assert ".hydra/config.yaml" in hydra_artifacts


# fp32's case (its autocast "none", channels_last) is test_tracking_uri_from_config's run: the run that
# shows MLFLOW_TRACKING_URI winning over tracking.uri is this one, whatever the precision
@pytest.mark.parametrize("precision,dtype", [("bf16", "bfloat16")])
def test_precision_on_cpu(bench, tiny, tmp_path, precision, dtype):
    env_db = tmp_path / "env.db"
    ignored = tmp_path / "config.db"
    proc = bench.run(
        *tiny,
        f"precision={precision}",
        "precision.channels_last=true",
        f"tracking.uri=sqlite:///{ignored}",
        f"hydra.run.dir={tmp_path}/run",
        env=bench.env(f"sqlite:///{env_db}"),
    )
    metrics = bench.metrics(proc)
    assert metrics["precision"] == precision and metrics["autocast_dtype"] == dtype
    assert metrics["channels_last"] is True
    assert metrics["final_loss"] == metrics["final_loss"]  # not NaN
    # MLFLOW_TRACKING_URI wins over tracking.uri
    assert not ignored.exists()
    (run,) = bench.runs(f"sqlite:///{env_db}")
    assert run.data.params["precision.name"] == precision
    assert run.info.status == "FINISHED"


def test_tracking_uri_from_config(bench, tiny, tmp_path):
    """tracking.uri where no MLFLOW_TRACKING_URI is set; the same run is fp32 with channels_last (the
    fp32 case of test_precision_on_cpu: one run instead of two)."""
    db = tmp_path / "from-config.db"
    proc = bench.run(
        *tiny,
        "precision=fp32",
        "precision.channels_last=true",
        f"tracking.uri=sqlite:///{db}",
        "tracking.experiment=custom",
        "tracking.run_name=my-run",
        f"hydra.run.dir={tmp_path}/run",
    )
    metrics = bench.metrics(proc)
    assert metrics["precision"] == "fp32" and metrics["autocast_dtype"] == "none"
    assert metrics["channels_last"] is True
    assert metrics["final_loss"] == metrics["final_loss"]  # not NaN
    (run,) = bench.runs(f"sqlite:///{db}")
    assert run.info.run_name == "my-run"
    assert MlflowClient(f"sqlite:///{db}").get_experiment(run.info.experiment_id).name == "custom"
    assert run.data.params["precision.name"] == "fp32"
    assert run.info.status == "FINISHED"
    assert not bench.db.exists()


# One run (tracking off) read by the three tests below: a window capped by benchmark.measure_steps with a
# cosine schedule, torch.compile rejecting its mode (the run goes on eager), and a checkpoint written to
# local storage. A torchvision model: the checkpoint's keys are its (fc.weight). Was three runs.
@pytest.fixture(scope="module")
def recipe_run(tmp_path_factory, bench_at, tiny_args):
    root = tmp_path_factory.mktemp("recipe")
    bench = bench_at(root)
    proc = bench.run(
        *tiny_args,
        "model=resnet18",
        "train.epochs=3",
        "benchmark.measure_steps=4",
        "scheduler=cosine",
        "optimizer.nesterov=true",
        "model.norm=none",
        "compile=true",
        "compile_mode=no-such-mode",
        "storage.save_checkpoint=true",
        f"storage.root={root / 'ckpt'}",
        "tracking.enabled=false",
        f"hydra.run.dir={root}/run",
    )
    return SimpleNamespace(root=root, bench=bench, proc=proc, run_dir=root / "run", ckpt_dir=root / "ckpt")


def test_measure_steps_caps_the_window_and_schedule_runs(recipe_run):
    bench, run_dir = recipe_run.bench, recipe_run.run_dir
    metrics = bench.metrics(recipe_run.proc)
    assert metrics["measured_steps"] == 4 and metrics["total_images"] == 16
    # the recipe knobs that change the run are in the result line, not only in the config (issue 21)
    assert metrics["optimizer"] == "sgd" and metrics["nesterov"] is True and metrics["norm"] == "none"
    epochs = (run_dir / "metrics_epoch.jsonl").read_text().splitlines()
    assert [json.loads(e)["steps"] for e in epochs] == [3, 1]
    assert metrics["final_lr"] < metrics["lr"]  # cosine decayed
    assert not bench.db.exists()


def test_checkpoint_written_to_local_storage(recipe_run):
    import torch

    ckpt_dir = recipe_run.ckpt_dir
    metrics = recipe_run.bench.metrics(recipe_run.proc)
    state = torch.load(ckpt_dir / "checkpoint.pt", weights_only=True)
    assert "fc.weight" in state["model"] and state["optimizer"]["state"]
    assert metrics["checkpoint_bytes"] == (ckpt_dir / "checkpoint.pt").stat().st_size
    assert metrics["checkpoint_write_gbps"] > 0
    assert sorted(p.name for p in ckpt_dir.iterdir()) == ["checkpoint.pt"]  # no temporary file left


def test_failure_mid_run_ends_failed_with_reason(bench, tiny, datasets, tmp_path):
    """A genuine failure after the MLflow run opened: an image the loader cannot read (a dangling
    link, met in training, after preflight decoded the first images fine)."""
    bench.with_store()
    datasets.image_folder(tmp_path / "flat", images=8)
    (tmp_path / "flat" / "class003" / "zz-gone.jpg").symlink_to(tmp_path / "nowhere.jpg")
    proc = bench.run(
        *tiny,
        "data=imagefolder",
        f"data.root={tmp_path / 'flat'}",
        "data.split=val",
        "data.batch_size=9",
        "data.num_workers=0",
        f"hydra.run.dir={tmp_path}/run",
    )
    assert proc.returncode == 1
    assert "[ERROR] run failed: DataError: cannot read" in proc.stderr and "zz-gone.jpg" in proc.stderr
    assert "Traceback" not in proc.stderr and "radix_metrics" not in proc.stdout
    (run,) = bench.runs()
    assert run.info.status == "FAILED"
    assert "DataError" in run.data.tags["error"]
    assert "Traceback" in (tmp_path / "run" / "error.txt").read_text()


def test_compile_failure_falls_back_to_eager_and_says_so(recipe_run):
    """torch.compile rejects an unknown mode for real; the run goes on eager and records why."""
    proc = recipe_run.proc
    metrics = recipe_run.bench.metrics(proc)
    assert metrics["compile"] is False
    assert "no-such-mode" in metrics["compile_fallback"]
    assert "torch.compile failed" in proc.stderr
    summary = json.loads((recipe_run.run_dir / "run_summary.json").read_text())
    assert summary["compile"]["requested"] is True and summary["compile"]["active"] is False
