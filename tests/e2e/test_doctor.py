"""`python -m bench.doctor` (issue 20, part 3) as real processes on the CPU: a JPEG folder read with
data.num_workers=0 is input-bound with decode the costliest stage; synthetic data with a small model
is compute-bound, its what-ifs measured as runs; every rung a child of one MLflow parent run; the
page opens in a real browser; the DDP rung all-reduces over gloo between two real processes."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest
from mlflow import MlflowClient

from bench.data.sample_images import write_image_folder

RUNGS = ["compute", "loader", "storage", "full", "allreduce"]
# a model far faster than photo-sized JPEGs decode: 8 px images through bench's 4-layer CNN
FAST_MODEL = ["allow_cpu=true", "model=small_cnn", "data.image_size=8", "data.batch_size=64"]


@dataclass
class Doctored:
    proc: object
    out: Path
    uri: str
    report: dict


@pytest.fixture(scope="module")
def jpeg_folder_doctored(bench_at, tmp_path_factory) -> Doctored:
    root = tmp_path_factory.mktemp("doctor-jpegs")
    write_image_folder(str(root / "photos" / "train"), 64, 4)  # 500x375, compressed like photographs
    bench = bench_at(root).with_store()
    out = root / "doctor"
    proc = bench.run(
        *FAST_MODEL,
        "data=imagefolder",
        f"data.root={root / 'photos'}",
        "data.num_workers=0",
        "data.num_classes=4",
        "doctor.budget_s=12",
        "doctor.what_ifs=false",
        f"doctor.out={out}",
        module="bench.doctor",
        env=bench.env(bench.uri),
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return Doctored(proc, out, bench.uri, json.loads((out / "doctor.json").read_text()))


def test_a_jpeg_folder_without_workers_is_input_bound_with_decode_on_top(jpeg_folder_doctored):
    report, stdout = jpeg_folder_doctored.report, jpeg_folder_doctored.proc.stdout
    # on a busy machine (this box under pytest -n) the verdict says so and calls no bound (issue 30.3);
    # the figures' own verdict is kept beside it either way
    assert report["verdict"] in ("input-bound", "unfit"), report["sentence"]
    assert report["figures_verdict"] == "input-bound", report["figures_sentence"]
    if report["verdict"] == "unfit":
        assert report["sentence"].startswith("not fit to measure: the machine was busy during the ")
    else:
        assert report["sentence"] == report["figures_sentence"]
    assert stdout.startswith(f"verdict: {report['sentence']}\ntime: ")
    assert "decode is" in report["figures_sentence"] and "of the loader's CPU time" in report["figures_sentence"]
    loader = next(r for r in report["rungs"] if r["name"] == "loader")
    stages = loader["figures"]["stage_cpu_ms"]
    assert set(stages) == {"read", "decode", "augment", "collate", "host_to_device"}
    assert max(stages, key=stages.get) == "decode"
    assert loader["figures"]["workers"] == 0 and loader["images_per_second"] > 0
    storage = next(r for r in report["rungs"] if r["name"] == "storage")
    assert storage["figures"]["dataset_files"] == 64 and storage["figures"]["cache"] in ("warm", "cold")
    assert [r["name"] for r in report["rungs"]] == RUNGS
    for name in RUNGS[:4]:  # each measured: a rate in the table's row
        rung = next(r for r in report["rungs"] if r["name"] == name)
        assert rung["images_per_second"] > 0 and f"{rung['images_per_second']:,.0f}" in stdout
    assert "skipped: one process: DDP has nothing to all-reduce" in stdout
    assert {p.name for p in jpeg_folder_doctored.out.iterdir()} >= {
        "doctor.md",
        "doctor.html",
        "doctor.png",
        "doctor.json",
        "1-compute",
        "4-full",
    }


def test_every_rung_is_a_child_of_one_mlflow_parent_run(jpeg_folder_doctored):
    client = MlflowClient(tracking_uri=jpeg_folder_doctored.uri)
    runs = client.search_runs([e.experiment_id for e in client.search_experiments()])
    parents = [r for r in runs if r.data.tags.get("doctor") == "parent"]
    assert len(parents) == 1
    parent = parents[0]
    assert parent.info.status == "FINISHED"
    assert parent.data.tags["doctor.verdict"] == jpeg_folder_doctored.report["verdict"]
    assert parent.data.tags["doctor.sentence"] == jpeg_folder_doctored.report["sentence"]
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
    assert sorted(c.data.tags["doctor.rung"] for c in children) == sorted(RUNGS)
    by_rung = {c.data.tags["doctor.rung"]: c for c in children}
    for name in RUNGS[:4]:
        rung = next(r for r in jpeg_folder_doctored.report["rungs"] if r["name"] == name)
        assert by_rung[name].data.metrics["images_per_second"] == pytest.approx(rung["images_per_second"])
        assert parent.data.metrics[f"{name}_images_per_second"] == pytest.approx(rung["images_per_second"])
    assert by_rung["allreduce"].data.tags["doctor.skipped"] == "one process: DDP has nothing to all-reduce"
    # named by what they are (issue 40 §10): not "...-job1-compute"; the parent by its directory
    assert by_rung["compute"].info.run_name == "small_cnn-fp32-bs64 (doctor 1-compute)"
    assert by_rung["full"].info.run_name == "small_cnn-fp32-bs64 (doctor 4-full)"
    assert parent.info.run_name.startswith("doctor-20") and parent.info.run_name.endswith("-doctor")
    logged = {Path(a.path).name for a in client.list_artifacts(parent.info.run_id)}
    assert logged >= {"doctor.md", "doctor.html", "doctor.png", "doctor.json"}


def test_the_doctor_page_opens_in_a_real_browser(jpeg_folder_doctored, browser):
    """Issue 20, part 4: doctor.html in headless Chromium: no console error, the chart decoded, the
    table holding each measured rung's images/s; issue 30.2: the page alone, moved, still whole."""
    moved = jpeg_folder_doctored.out.parent / "moved" / "doctor.html"
    moved.parent.mkdir(exist_ok=True)
    moved.write_bytes((jpeg_folder_doctored.out / "doctor.html").read_bytes())
    page = browser.open(moved)
    assert page.console_errors == []
    assert len(page.images) == 1 and all(loaded and width > 100 for loaded, width, _ in page.images), page.images
    for rung in jpeg_folder_doctored.report["rungs"]:
        if rung["images_per_second"]:
            assert f"{rung['images_per_second']:,.0f}" in page.cells, (rung, page.cells)


def test_synthetic_data_with_a_small_model_is_compute_bound_and_its_what_ifs_are_measured(bench, tmp_path):
    out = tmp_path / "doctor"
    proc = bench.run(
        *FAST_MODEL,
        "data.num_classes=10",
        "tracking.enabled=false",
        "doctor.budget_s=12",  # windows of 1.2 s (compute, full) and 1 s (a what-if): hundreds of 8 px steps each
        f"doctor.out={out}",
        module="bench.doctor",
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads((out / "doctor.json").read_text())
    training = [r for r in report["rungs"] if r["name"] in ("compute", "full")]
    if any(r["fit"] is False for r in training):  # a busy machine (this box under pytest -n): said first, no bound
        # called (the compute ceiling's window alone unfit counts too: the full run's alone was the case asked)
        assert report["verdict"] == "unfit" and report["sentence"].startswith("not fit to measure: "), report
        assert report["figures_verdict"] not in ("input-bound", "storage-bound")  # no input pipeline to blame
    else:
        assert report["verdict"] == report["figures_verdict"] == "compute-bound", report["sentence"]
        assert "the data is synthetic (no input pipeline)" in report["sentence"]
    assert report["wall_s"] >= report["elapsed_s"] >= report["setup_s"] > 0
    assert f"time: {report['wall_s']:,.0f} s wall time of a 12 s budget" in proc.stdout
    skipped = {r["name"]: r["skipped"] for r in report["rungs"] if r["skipped"]}
    assert set(skipped) == {"loader", "storage", "allreduce"}
    what_ifs = {w["name"]: w for w in report["what_ifs"]}
    assert list(what_ifs) == ["channels_last", "precision=bf16", "data.batch_size=128"]  # compute side only
    first = what_ifs["channels_last"]  # the first what-if runs whatever the budget left
    assert first["images_per_second"] > 0 and first["before"] > 0 and not first["failed"]
    for what_if in what_ifs.values():
        assert what_if["images_per_second"] or what_if["skipped"].startswith("not measured: "), what_if
        if what_if["fit"] is False:  # a busy machine: the row says its gain was measured unfit (issue 34.3)
            row = next(line for line in proc.stdout.splitlines() if line.startswith(f"| {what_if['name']} | "))
            assert "x (unfit) | measured as the full run; not fit to measure: " in row, row
    assert "| channels_last |" in proc.stdout and not (tmp_path / "mlflow.db").exists()


@pytest.mark.slow  # bench.doctor.ladder.allreduce_rung starts the two processes
def test_the_ddp_rung_all_reduces_the_gradient_size_between_real_processes():
    from bench.config import compose
    from bench.doctor.figures import AllreduceFigures
    from bench.doctor.ladder import allreduce_rung

    config = compose("allow_cpu=true", "distributed=ddp", "distributed.nproc_per_node=2")
    rung = allreduce_rung(config, parameters=1_000_000, step_ms=100.0)
    assert rung.measured, rung
    figures = rung.figures
    assert isinstance(figures, AllreduceFigures)
    assert figures.backend == "gloo" and figures.processes == 2 and figures.megabytes == 4.0
    assert figures.milliseconds > 0 and figures.bus_gigabytes_per_second > 0
    assert figures.share_of_step == pytest.approx(figures.milliseconds / 100.0)


def test_the_ceiling_of_a_recipe_shrunk_for_a_test_box_runs_the_users_schedule(bench, tmp_path):
    """Issue 40.2: the compute ceiling dropped the user's data.progressive, so imagenet_fast's own
    (batch 512 at 128 px) ran for minutes on a 90 s budget. The ceiling is the run on synthetic
    data: the user's schedule, sizes and classes (bench's small CNN and no compile keep it short)."""
    out = tmp_path / "doctor"
    shrunk = "+experiment=imagenet_fast data=synthetic allow_cpu=true train.eval_every=0 train.steps_per_epoch=4"
    small = "model=small_cnn compile=false train.epochs=2 data.num_classes=10 tracking.enabled=false"
    doctor = f"doctor.budget_s=20 doctor.what_ifs=false doctor.out={out}"
    proc = bench.run(
        *shrunk.split(), *small.split(), 'data.progressive="0,16,4;1,32,2"', *doctor.split(), module="bench.doctor"
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads((out / "doctor.json").read_text())
    for job, name in (("1-compute", "compute"), ("4-full", "full")):
        summary = json.loads((out / job / "run_summary.json").read_text())
        assert summary["config"]["data"]["progressive"] == "0,16,4;1,32,2", job
        assert summary["config"]["data"]["num_classes"] == 10 and summary["config"]["data"]["name"] == "synthetic"
        assert (summary["epochs"][0]["image_size"], summary["epochs"][0]["batch_size"]) == (16, 4), job
        rung = next(r for r in report["rungs"] if r["name"] == name)
        assert rung["images_per_second"] > 0 and not rung["skipped"], rung
