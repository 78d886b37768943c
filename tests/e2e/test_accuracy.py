"""Training for accuracy, as real processes: the digits preset trains to its target and stops
there (time-to-accuracy), progressive resizing switches at the right epochs, and 2-process DDP
validation counts every val image once; the digits run's MLPerf log passes MLPerf's own checker.

And the data those runs train on: `python -m bench.data digits` (scikit-learn's 8x8 digits written
as an image folder): the layout and counts, the images, a rerun that does nothing, one-line errors
for a bad destination. The digits at the defaults are written once for the module: the digits
command's tests and the training runs read the same folder (no run writes into it)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image

CLASSES = [str(c) for c in range(10)]


def run_digits(bench, dst, *extra, module="bench.data"):
    return bench.run("digits", "--dst", str(dst), *extra, module=module)


def one_error_line(bench, proc) -> str:
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
    errors = bench.error_lines(proc.stderr)
    assert len(errors) == 1, proc.stderr
    return errors[0]


def images_in(root: Path) -> dict:
    """{split: {class: [file names]}}"""
    return {
        split: {c: sorted(os.listdir(root / split / c)) for c in sorted(os.listdir(root / split))}
        for split in ("train", "val")
    }


@pytest.fixture(scope="module")
def written(bench_at, tmp_path_factory):
    """The digits at the defaults (32x32 png, 0.2 val, seed 0), written once for the module."""
    bench = bench_at(tmp_path_factory.mktemp("digits"))
    dst = bench.cwd / "digits"
    proc = run_digits(bench, dst)
    assert proc.returncode == 0, proc.stderr
    return bench, dst, proc


@pytest.fixture(scope="module")
def digits(written) -> Path:
    """The folder the training runs read (data.root)."""
    return written[1]


# ---- python -m bench.data digits ------------------------------------------------------------------


def test_digits_layout_counts_and_images(written):
    _, dst, proc = written
    assert proc.stdout.strip() == f"wrote 1437 train and 360 val images (10 classes, 32x32 png) to {dst}"
    found = images_in(dst)
    assert list(found["train"]) == CLASSES and list(found["val"]) == CLASSES
    train = sum(len(files) for files in found["train"].values())
    val = sum(len(files) for files in found["val"].values())
    assert (train, val) == (1437, 360)
    names = [name for split in found.values() for files in split.values() for name in files]
    assert len(set(names)) == 1797 and all(name.endswith(".png") for name in names)  # each image once
    for c in CLASSES:  # stratified: every class in val, about a fifth of it
        share = len(found["val"][c]) / (len(found["val"][c]) + len(found["train"][c]))
        assert 0.18 < share < 0.22, (c, share)
    manifest = json.loads((dst / "digits.json").read_text())
    assert (manifest["train"], manifest["val"], manifest["classes"]) == (1437, 360, 10)
    assert (manifest["size"], manifest["format"], manifest["seed"], manifest["val_fraction"]) == (32, "png", 0, 0.2)
    for split in ("train", "val"):
        for c in ("0", "7"):
            with Image.open(dst / split / c / found[split][c][0]) as image:
                image.load()
                assert (image.format, image.size, image.mode) == ("PNG", (32, 32), "RGB")
                assert image.getextrema()[0][1] > 128  # a real digit, not a blank
    assert not [p for p in dst.parent.iterdir() if ".tmp-" in p.name]  # no temporary dir left


def test_digits_rerun_is_a_no_op(written):
    bench, dst, _ = written
    before = {p: p.stat().st_mtime_ns for p in dst.rglob("*")}
    again = run_digits(bench, dst)
    assert again.returncode == 0, again.stderr
    assert again.stdout.strip() == (
        f"{dst} already holds the digits: 1437 train and 360 val images (10 classes, 32x32 png); nothing to do"
    )
    assert {p: p.stat().st_mtime_ns for p in dst.rglob("*")} == before
    other = run_digits(bench, dst, "--size", "16")  # other options on the same folder: refused, nothing touched
    assert "--dst=" in one_error_line(bench, other) and "32x32 png" in other.stderr
    assert {p: p.stat().st_mtime_ns for p in dst.rglob("*")} == before


def test_digits_options_jpeg_size_fraction_seed(bench, tmp_path):
    dst = tmp_path / "nested" / "digits16"
    proc = run_digits(
        bench,
        dst,
        "--format",
        "jpeg",
        "--size",
        "16",
        "--val-fraction",
        "0.5",
        "--seed",
        "3",
        module="bench.tools.data",
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"wrote 898 train and 899 val images (10 classes, 16x16 jpeg) to {dst}"
    found = images_in(dst)
    assert all(found["val"][c] and found["train"][c] for c in CLASSES)
    first = dst / "val" / "3" / found["val"]["3"][0]
    with Image.open(first) as image:
        assert (image.format, image.size, image.mode) == ("JPEG", (16, 16), "RGB")
    # the seed picks the split: seed 3 and seed 0 put different images in val. The seed-0 run writes
    # into an empty directory that exists already, which is filled (the case of the test below: one
    # write of the 1,797 images shows both)
    default = tmp_path / "seed0"
    default.mkdir()
    assert run_digits(bench, default, "--val-fraction", "0.5", "--size", "8").returncode == 0
    assert (default / "digits.json").is_file()
    assert images_in(default)["val"] != {
        c: [n.replace(".jpg", ".png") for n in files] for c, files in found["val"].items()
    }


# digits' bad flags (and that they write nothing) are rows of the bad-input table (tests/reliability/bad_inputs.py)


def test_digits_dst_that_is_a_file_or_holds_other_files(bench, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    assert "--dst=" in one_error_line(bench, run_digits(bench, blocker)) and blocker.read_text() == "x"
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "mine.txt").write_text("keep")
    assert "no digits.json" in one_error_line(bench, run_digits(bench, busy))
    assert os.listdir(busy) == ["mine.txt"]
    # an empty directory is filled: the seed-0 run of test_digits_options_jpeg_size_fraction_seed writes into one


# ---- training for accuracy on them ---------------------------------------------------------------


def test_digits_trains_to_its_target_and_stops_there(bench, digits, tmp_path):
    """8 px, the digits' own size (scikit-learn's 8x8 images), instead of the preset's 32 keeps the
    test short (16 px cost twice the CPU and learnt nothing more); the preset's own figures are in
    docs/performance.md."""
    run_dir = tmp_path / "run"
    proc = bench.run(
        "+experiment=digits_tta",
        f"data.root={digits}",
        "data.image_size=8",
        "train.epochs=12",
        "benchmark.progress=false",
        "train.mlperf_log=true",
        f"hydra.run.dir={run_dir}",
    )
    metrics = bench.metrics(proc)
    assert metrics["reached_target"] is True and metrics["target_accuracy"] == 0.95
    assert metrics["val_top1"] >= 0.95  # really learnt: 360 real val digits, 10 classes
    assert metrics["val_images"] == 360 and metrics["dataset_size"] == 1437
    epochs = bench.epochs(run_dir)
    assert len(epochs) == metrics["epochs_to_target"] < 12  # stopped at the first evaluation reaching it
    assert all(e["val_top1"] < 0.95 for e in epochs[:-1]) and epochs[-1]["val_top1"] >= 0.95
    assert metrics["time_to_target_seconds"] == pytest.approx(epochs[-1]["wall_seconds"])
    reached = f"target reached at epoch {len(epochs)}: val top-1 {metrics['val_top1']:.4f} >= 0.95 after "
    assert f"{reached}{metrics['time_to_target_seconds']:.1f} s: the run stops here" in proc.stderr  # issue 40.5
    assert metrics["steps_per_epoch"] == 1437 // 64 and all(e["steps"] == 1437 // 64 for e in epochs)
    # evaluation is not training time: the window is shorter than the wall time to the target
    assert metrics["elapsed_seconds"] < metrics["time_to_target_seconds"]
    assert metrics["eval_seconds"] > 0 and metrics["evaluations"] == len(epochs)
    # bench's own CPU defaults fit the cores, and say so (issue 34.3): the preset sets neither key
    assert metrics["fit_cpu_demand"] <= metrics["fit_usable_cores"], metrics["fit_reasons"]
    assert f"data.num_workers={metrics['data_workers']}: bench's choice on the CPU" in proc.stderr

    run = bench.runs()[0]
    assert run.info.status == "FINISHED" and run.data.metrics["reached_target"] == 1.0
    assert run.data.params["train.target_accuracy"] == "0.95"
    from mlflow import MlflowClient

    history = MlflowClient(tracking_uri=bench.uri).get_metric_history(run.info.run_id, "val_top1")
    assert sorted(m.step for m in history if m.step > 0) == [e["epoch"] for e in epochs]
    check_mlperf_log(run_dir / "mlperf.log", epochs, metrics)
    assert "mlperf.log" in {a.path for a in MlflowClient(tracking_uri=bench.uri).list_artifacts(run.info.run_id)}


# What MLPerf Training's closed division asks of ResNet that a digits run with bench's config
# cannot give: listed, not hidden (docs/training.md says the same).
CLOSED_RULES_A_DIGITS_RUN_MISSES = {
    "CHECK for 'sgd_opt_end_learning_rate' failed",  # closed: 0.0001; bench's cosine floor is 0
    "CHECK for 'sgd_opt_weight_decay' failed",  # closed: 1e-4 x a power of 2; the preset's 5e-4
    "Required EXACTLY_ONE occurrence of 'sgd_opt_learning_rate_decay_poly_power' but found 0",  # no poly schedule
}


def compliance(log: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "mlperf_logging.compliance_checker",
            "--usage",
            "training",
            "--ruleset",
            "4.0.0",
            str(log),
        ],
        capture_output=True,
        text=True,
        cwd=log.parent,
        timeout=300,
    )


def check_mlperf_log(log: Path, epochs: list, metrics: dict) -> None:
    """train.mlperf_log=true: MLPerf's own checker reads every line; under the closed division's
    ResNet rules it names exactly the rules a digits run cannot meet, under the open division's
    the same log passes: no format error."""
    events = [json.loads(line.split(":::MLLOG ", 1)[1]) for line in log.read_text().splitlines()]
    keys = [e["key"] for e in events]
    assert keys[:2] == ["cache_clear", "init_start"] and keys[-1] == "run_stop"
    assert events[-1]["metadata"]["status"] == "success"  # the target was reached
    accuracies = [e["value"] for e in events if e["key"] == "eval_accuracy"]
    assert accuracies == pytest.approx([e["val_top1"] for e in epochs])
    assert keys.count("epoch_start") == keys.count("epoch_stop") == len(epochs)
    run_start = next(e["time_ms"] for e in events if e["key"] == "run_start")
    # MLPerf's clock is bench's time-to-accuracy clock: from the first step to the reaching evaluation
    assert (events[-1]["time_ms"] - run_start) / 1000 == pytest.approx(metrics["time_to_target_seconds"], abs=1.0)

    # issue 30.9: the open division by default (train.mlperf_division), so the docs' command passes
    assert next(e["value"] for e in events if e["key"] == "submission_division") == "open"
    as_open = compliance(log)
    assert as_open.returncode == 0 and "SUCCESS" in as_open.stdout + as_open.stderr, as_open.stdout + as_open.stderr
    closed_log = log.with_name("mlperf-closed.log")  # what train.mlperf_division=closed writes there
    closed_log.write_text(
        log.read_text().replace(
            '"key": "submission_division", "value": "open"', '"key": "submission_division", "value": "closed"'
        )
    )
    closed = compliance(closed_log)
    output = closed.stdout + closed.stderr
    found = {
        line.strip()
        for line in output.splitlines()
        if line.strip().startswith(("CHECK for", "Required", "WARNING -  CHECK for"))
    }
    found = {line.replace("WARNING -  ", "").split(" in line")[0] for line in found}
    assert found == CLOSED_RULES_A_DIGITS_RUN_MISSES, output
    assert closed.returncode != 0 and "Traceback" not in output


def test_a_target_not_reached_is_a_result_not_an_error(bench, digits, tmp_path):
    run_dir = tmp_path / "run"
    proc = bench.run(
        "+experiment=digits_tta",
        f"data.root={digits}",
        "data.image_size=8",
        "train.epochs=1",
        "train.steps_per_epoch=4",  # a few steps: not reaching the target depends on no step count
        "train.target_accuracy=0.999",
        "tracking.enabled=false",
        "train.mlperf_log=true",
        f"hydra.run.dir={run_dir}",
    )
    metrics = bench.metrics(proc)
    assert metrics["reached_target"] is False and metrics["time_to_target_seconds"] is None
    last = json.loads((run_dir / "mlperf.log").read_text().splitlines()[-1].split(":::MLLOG ", 1)[1])
    assert last["key"] == "run_stop" and last["metadata"]["status"] == "aborted"  # MLPerf's word for it
    assert metrics["epochs_to_target"] is None and len(bench.epochs(run_dir)) == 1


def test_a_billion_epochs_start_training_at_once(bench, digits):
    """Issue 39 §10: the steps planned were summed epoch by epoch: the MLflow run opened and nothing
    happened for minutes. The timeout is a hang guard (the run takes seconds)."""
    bench.with_store()
    proc = bench.run(
        "+experiment=digits_tta",
        f"data.root={digits}",
        "data.image_size=8",
        "train.epochs=1000000000",
        "benchmark.measure_steps=2",
        "train.eval_every=0",
        timeout=120,
    )
    metrics = bench.metrics(proc)
    assert metrics["epochs"] == 10**9 and metrics["measured_steps"] == 2
    assert "laid over 22000000002 optimizer steps" in proc.stderr  # the schedule's span, in closed form


def test_progressive_resizing_switches_at_the_epochs_asked(bench, tiny, tmp_path):
    run_dir = tmp_path / "run"
    # unquoted, as a user types it: the commas are one schedule, not a sweep
    proc = bench.run(
        *tiny,
        "data.progressive=0,32,4;1,48,2;3,32,6",
        "train.epochs=4",
        "train.steps_per_epoch=2",
        "tracking.enabled=false",
        f"hydra.run.dir={run_dir}",
    )
    metrics = bench.metrics(proc)
    epochs = bench.epochs(run_dir)
    assert [(e["image_size"], e["batch_size"]) for e in epochs] == [(32, 4), (48, 2), (48, 2), (32, 6)]
    assert [e["images"] for e in epochs] == [8, 4, 4, 12]
    assert metrics["total_images"] == 28  # each step counted with its own batch
    assert (metrics["phase1_image_size"], metrics["phase2_image_size"], metrics["phase3_batch_size"]) == (32, 48, 6)
    assert all(metrics[f"phase{n}_images_per_second"] > 0 for n in (1, 2, 3))


def test_ddp_validation_counts_every_val_image_once(bench, datasets, tmp_path):
    root = tmp_path / "data"
    datasets.imagenet_layout(root, train=16, val=9)  # 9: not a multiple of 2 ranks or of the batch
    run_dir = tmp_path / "run"
    proc = bench.run(
        "allow_cpu=true",
        "model=resnet18",
        "data=imagefolder",
        f"data.root={root}",
        "data.num_classes=4",
        "data.image_size=32",
        "data.batch_size=4",
        "data.num_workers=0",
        "distributed=ddp",
        "distributed.nproc_per_node=2",
        "train.epochs=2",
        "train.steps_per_epoch=null",
        "train.eval_every=1",
        "benchmark.warmup_steps=1",
        "benchmark.progress=false",
        "tracking.enabled=false",
        f"hydra.run.dir={run_dir}",
    )
    metrics = bench.metrics(proc)
    assert metrics["val_images"] == 9 and metrics["world_size"] == 2
    assert metrics["steps_per_epoch"] == 16 // 2 // 4
    assert [e["epoch"] for e in bench.epochs(run_dir)] == [1, 2] and 0.0 <= metrics["val_top1"] <= 1.0
    assert metrics["params_in_sync"] is True


def test_ddp_validation_on_shards_counts_every_val_image_once(bench, datasets, tmp_path):
    """3 val shards over 2 ranks; fewer shards than readers is tests/unit/test_accuracy_parts.py's."""
    shard_size = 4
    datasets.imagenet_layout(tmp_path / "images", train=16, val=9)
    prepared = bench.run(
        "prepare",
        "--src",
        str(tmp_path / "images"),
        "--dst",
        str(tmp_path / "shards"),
        "--size",
        "40",
        "--shard-size",
        str(shard_size),
        "--workers",
        "1",  # one encoding process a split for 25 images (the CPU count, 2 here, spawned 4 interpreters)
        "--no-progress",
        module="bench.data",
    )
    assert prepared.returncode == 0, prepared.stderr
    proc = bench.run(
        "allow_cpu=true",
        "model=small_cnn",  # the torchvision model under DDP: the test above
        "data=shards",
        f"data.root={tmp_path / 'shards'}",
        "data.num_classes=4",
        "data.image_size=32",
        "data.batch_size=4",
        "data.num_workers=0",
        "distributed=ddp",
        "distributed.nproc_per_node=2",
        "train.epochs=1",
        "train.steps_per_epoch=2",
        "train.eval_every=1",
        "benchmark.warmup_steps=1",
        "benchmark.progress=false",
        "tracking.enabled=false",
        f"hydra.run.dir={tmp_path}/run",
    )
    metrics = bench.metrics(proc)
    assert metrics["val_images"] == 9 and 0.0 <= metrics["val_top1"] <= 1.0
