"""Training runs on real data options as real `python -m bench` processes: the input-pipeline
fields they report, and the one-line errors of datasets that cannot be read."""

from __future__ import annotations

import subprocess
import sys

import pytest
from conftest import TINY, all_runs, bench_env, radix_metrics, run_bench, sqlite_uri
from data_builders import CLASSES, cifar100, image_folder, imagenet_layout

# TINY minus its class count: each dataset brings its own
BASE = [arg for arg in TINY if not arg.startswith("data.num_classes=")] + ["data.num_workers=1"]


def check_input_pipeline_fields(metrics: dict) -> None:
    assert metrics["au"] == pytest.approx(1 - metrics["data_wait_fraction"])
    assert 0 <= metrics["au"] <= 1
    assert metrics["input_bound"] is (metrics["au"] < 0.90)
    assert metrics["data_wait_seconds"] > 0  # a real pipeline is never free


def run_ok(tmp_path, args) -> dict:
    db = sqlite_uri(tmp_path / "mlflow.db")
    replaced = {arg.split("=")[0] for arg in args}
    base = [arg for arg in BASE if arg.split("=")[0] not in replaced]
    metrics = radix_metrics(run_bench(tmp_path, [*base, *args, f"hydra.run.dir={tmp_path}/run"],
                                      env=bench_env(tracking_uri=db)))
    (run,) = all_runs(db)
    assert run.info.status == "FINISHED"
    assert run.data.metrics["au"] == pytest.approx(metrics["au"])
    return metrics


def test_imagefolder_run_reports_data_wait_au_and_skips_a_corrupt_image(tmp_path):
    imagenet_layout(tmp_path / "imagenet", train=20, val=4)
    (tmp_path / "imagenet" / "train" / "class002" / "broken.jpg").write_bytes(b"\xff\xd8\xff not a jpeg")
    # one batch is the whole shuffled epoch, so the broken file is met whatever the order
    metrics = run_ok(tmp_path, ["data=imagefolder", f"data.root={tmp_path / 'imagenet'}", "data.num_classes=10",
                                "data.batch_size=21"])
    check_input_pipeline_fields(metrics)
    assert metrics["data"] == "imagefolder" and metrics["measured_steps"] == 3 and metrics["batch_size"] == 21
    assert metrics["dataset_size"] == 21 and metrics["dataset_classes"] == CLASSES
    assert metrics["corrupt_skipped"] == 1


def test_cifar100_run(tmp_path):
    cifar100(tmp_path / "cifar")
    metrics = run_ok(tmp_path, ["data=cifar100", f"data.root={tmp_path / 'cifar'}", "data.num_classes=100"])
    check_input_pipeline_fields(metrics)
    assert metrics["dataset_size"] == 40 and metrics["dataset_classes"] == 100 and metrics["image_size"] == 32


def test_shards_run_after_prepare(tmp_path):
    image_folder(tmp_path / "flat", images=24)
    prepared = subprocess.run([sys.executable, "-m", "bench.data", "prepare", "--src", str(tmp_path / "flat"),
                               "--dst", str(tmp_path / "shards"), "--size", "40", "--shard-size", "10"],
                              capture_output=True, text=True, timeout=120)
    assert prepared.returncode == 0, prepared.stderr
    metrics = run_ok(tmp_path, ["data=shards", f"data.root={tmp_path / 'shards'}", "data.num_classes=10"])
    check_input_pipeline_fields(metrics)
    assert metrics["dataset_size"] == 24 and metrics["dataset_shards"] == 3 and metrics["shard_image_size"] == 40


def one_error_line(proc: subprocess.CompletedProcess, code: int) -> str:
    assert proc.returncode == code, proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
    errors = [line for line in proc.stderr.splitlines() if "[ERROR]" in line]
    assert len(errors) == 1, proc.stderr
    return errors[0]


@pytest.mark.parametrize("case,expected", [
    ("missing", "data.root='{root}' does not exist"),
    ("empty", "{root} is empty: expected one sub-folder per class"),
    ("too_many_classes", "{root} has 4 classes but data.num_classes=3"),
    ("no_root", "data.root=None is not valid"),
    ("bad_split", "data.split='test' is not valid: accepted one of train, val"),
    ("negative_workers", "data.num_workers=-1 is not valid: accepted an integer >= 0"),
])
def test_dataset_errors_before_any_run(tmp_path, case, expected):
    root = tmp_path / "data"
    if case == "empty":
        root.mkdir()
    elif case == "too_many_classes":
        image_folder(root, images=8)
    elif case in ("bad_split", "negative_workers"):
        image_folder(root, images=4)
    args = ["data=imagefolder", "data.num_classes=3"] + ([] if case == "no_root" else [f"data.root={root}"])
    args += {"bad_split": ["data.split=test"], "negative_workers": ["data.num_workers=-1"]}.get(case, [])
    db = tmp_path / "mlflow.db"
    proc = run_bench(tmp_path, [*BASE, *args, f"hydra.run.dir={tmp_path}/run"], env=bench_env(sqlite_uri(db)))
    assert expected.format(root=root) in one_error_line(proc, 2)
    assert not db.exists()  # refused before an MLflow run was opened


def test_strict_stops_at_a_corrupt_image_naming_it(tmp_path):
    image_folder(tmp_path / "flat", images=8)
    bad = tmp_path / "flat" / "class000" / "broken.jpg"
    bad.write_bytes(b"\xff\xd8\xff not a jpeg")
    db = sqlite_uri(tmp_path / "mlflow.db")
    proc = run_bench(tmp_path, [*BASE, "data=imagefolder", f"data.root={tmp_path / 'flat'}", "data.num_classes=10",
                                "data.strict=true", "data.split=val", f"hydra.run.dir={tmp_path}/run"],
                     env=bench_env(db))
    assert f"corrupt image {bad}" in one_error_line(proc, 1)
    (run,) = all_runs(db)
    assert run.info.status == "FAILED"


def prepare(src, dst) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "bench.data", "prepare", "--src", str(src), "--dst", str(dst),
                           "--workers", "1"], capture_output=True, text=True, timeout=60)


def test_prepare_errors_are_one_line(tmp_path):
    assert f"--src '{tmp_path / 'nope'}' does not exist" in one_error_line(prepare(tmp_path / "nope", tmp_path), 2)
    image_folder(tmp_path / "flat", images=4)
    blocker = tmp_path / "a-file"
    blocker.write_text("x")  # the destination cannot be a directory
    assert "[ERROR] prepare failed: " in one_error_line(prepare(tmp_path / "flat", blocker), 1)
