"""Sweeps (`python -m bench -m ...`): one MLflow parent run, a child per job, a failing job
that does not stop the sweep, and the report (at the end of the sweep and standalone)."""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from types import SimpleNamespace

import pytest
from mlflow import MlflowClient

from bench.analysis.runs import MISSING
from bench.report_view import DISPLAY, as_shown

# a sweep of process counts and precisions: no batch axis, so no throughput_vs_batch.png
REPORT_FILES = {
    "report.csv",
    "report.md",
    "report.html",
    "throughput_vs_gpus.png",
    "scaling_efficiency.png",
    "step_time_distribution.png",
}


def _split(runs: list) -> tuple:
    parents = [r for r in runs if r.data.tags.get("sweep") == "parent"]
    children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    return parents, children


def _csv_rows(path: Path) -> list:
    with path.open() as fh:
        return list(csv.DictReader(fh))


def _check_scaling(rows: list) -> None:
    """2-process rows: speedup and efficiency from the 1-process row of the same precision."""
    by_key = {(r["precision"], int(float(r["world_size"]))): r for r in rows}
    assert set(by_key) == {("fp32", 1), ("fp32", 2), ("bf16", 1), ("bf16", 2)}, rows
    for precision in ("fp32", "bf16"):
        one, two = by_key[(precision, 1)], by_key[(precision, 2)]
        speedup = float(two["images_per_second"]) / float(one["images_per_second"])
        assert float(two["speedup"]) == pytest.approx(speedup, rel=1e-6)
        assert float(two["scaling_efficiency"]) == pytest.approx(speedup / 2, rel=1e-6)
        assert float(one["speedup"]) == pytest.approx(1.0)


# ---- a 4-job sweep into an sqlite store, shared by the tests below ----------------------------


@pytest.fixture(scope="module")
def sweep(tmp_path_factory, bench_at, tiny_args):
    root = tmp_path_factory.mktemp("sweep")
    bench = bench_at(root).with_store()
    proc = bench.run(
        "-m",
        *tiny_args,
        "distributed=ddp",
        "distributed.nproc_per_node=1,2",
        "precision=fp32,bf16",
        f"hydra.sweep.dir={root}/sweep",
    )
    runs = bench.runs()
    parents, children = _split(runs)
    return SimpleNamespace(
        root=root,
        uri=bench.uri,
        proc=proc,
        dir=root / "sweep",
        runs=runs,
        parents=parents,
        children=children,
        bench=bench,
    )


def test_sweep_is_one_parent_with_a_child_per_job(sweep):
    proc = sweep.proc
    assert proc.returncode == 0, f"{proc.stdout}\n{proc.stderr}"
    finals = [line for line in proc.stdout.splitlines() if line.startswith('{"radix_metrics"')]
    assert len(finals) == 4, proc.stdout

    assert len(sweep.parents) == 1 and len(sweep.children) == 4 and len(sweep.runs) == 5
    # Hydra's basic launcher runs every job in the sweep's process: even a one-process job's rank is an
    # elastic worker of its own (fresh allocator, fresh autotune), with its rank log
    assert (sweep.dir / "0" / "rank0.log").is_file() and len(list((sweep.dir / "0" / "workers").iterdir())) == 1
    # one UI link at the sweep's end, to its children fastest first (none per job), and one to MLflow's
    # compare page of the jobs, fastest first (issue 34 §1)
    (parent,) = sweep.parents
    links = [line for line in proc.stderr.splitlines() if "MLflow UI:" in line]
    view = f"bench-sweep-{parent.info.run_id[:12]}"
    assert len(links) == 1 and links[0].endswith(f"/runs?workflowType=machine_learning&viewStateShareKey={view}")
    fastest = sorted(sweep.children, key=lambda child: -child.data.metrics["images_per_second"])
    runs = "%2C".join(f"%22{child.info.run_id}%22" for child in fastest)
    compare = f"/#/compare-runs?runs=%5B{runs}%5D&experiments=%5B%22{parent.info.experiment_id}%22%5D"
    (compare_link,) = [line for line in proc.stderr.splitlines() if "MLflow compare:" in line]
    assert compare_link.endswith(compare)
    # the saved view the link opens: throughput (rounded), the error and the swept keys as columns, fastest
    # first, the parent and each child a run of its own (issue 30 item 6, issue 34 §1), grouped under the
    # sweep's name, the group's row the fastest job's (issue 40 §6), the charts a bar per job
    state = json.loads(
        MlflowClient(tracking_uri=sweep.uri)
        .get_experiment(parent.info.experiment_id)
        .tags[f"mlflow.sharedViewState.{view}"]
    )
    assert state["selectedColumns"][:2] == ["metrics.`images/s`", "tags.`error`"]
    assert state["orderByKey"] == "metrics.`images_per_second`" and state["orderByAsc"] is False
    assert {"params.`precision.name`", "params.`distributed.nproc_per_node`"} <= set(state["selectedColumns"])
    assert state["searchFilter"] == f"tags.`bench.parent` = '{parent.info.run_id}'"
    by_sweep = [{"mode": "tag", "groupByData": "bench.sweep"}]
    assert state["groupBy"] == {"aggregateFunction": "max", "groupByKeys": by_sweep}
    assert state["useGroupedValuesInCharts"] is False and state["runsHidden"] == [parent.info.run_id]
    assert {run.data.tags["bench.sweep"] for run in sweep.runs} == {parent.info.run_name}
    # chart mode: a bar per job of the figure, then the swept keys against it
    bar, swept = state["compareRunCharts"]
    assert bar["type"] == "BAR" and bar["metricKey"] == "images/s"  # the rounded copy (issue 40 §6)
    assert swept["type"] == "PARALLEL" and swept["selectedMetrics"] == ["images/s"]
    assert {"precision.name", "distributed.nproc_per_node"} <= set(swept["selectedParams"])
    assert parent.data.tags["bench.parent"] == parent.info.run_id
    parent = sweep.parents[0]
    assert parent.info.status == "FINISHED"
    assert parent.data.params["distributed.nproc_per_node"] == "1,2"
    assert parent.data.params["precision"] == "fp32,bf16"
    assert parent.data.tags["sweep.jobs"] == "4" and parent.data.tags["sweep.failed_jobs"] == "0"
    assert parent.data.metrics["sweep_failed_jobs"] == 0 and "failed" not in parent.info.run_name
    for child in sweep.children:
        assert child.data.tags["mlflow.parentRunId"] == child.data.tags["bench.parent"] == parent.info.run_id
        assert child.info.status == "FINISHED"
        assert "error" not in child.data.tags
        assert child.data.metrics["world_size"] == float(child.data.params["distributed.nproc_per_node"])
    assert sorted(c.data.tags["sweep.job"] for c in sweep.children) == ["0", "1", "2", "3"]
    combos = {(c.data.params["precision.name"], c.data.params["distributed.nproc_per_node"]) for c in sweep.children}
    assert combos == {("fp32", "1"), ("fp32", "2"), ("bf16", "1"), ("bf16", "2")}


def test_sweep_report_matches_mlflow(sweep):
    report = sweep.dir / "report"
    assert {p.name for p in report.iterdir()} >= REPORT_FILES
    assert not (report / "throughput_vs_batch.png").exists()  # one batch size: no batch axis (issue 21)
    for name in REPORT_FILES:
        assert (report / name).stat().st_size > 0, name
    rows = _csv_rows(report / "report.csv")
    assert len(rows) == 4
    assert all(r["status"] == "FINISHED" for r in rows)
    children = {c.data.tags["sweep.job"]: c for c in sweep.children}
    for row in rows:
        child = children[row["job"]]
        assert float(row["images_per_second"]) == pytest.approx(child.data.metrics["images_per_second"], rel=1e-6)
    _check_scaling(rows)

    page = (report / "report.html").read_text()
    assert page.count("data:image/png;base64,") == 3  # no batch axis in this sweep
    assert "<img" in page and 'src="throughput' not in page  # embedded, not linked
    assert "images/s" in (report / "report.md").read_text()
    assert "images/s" in sweep.proc.stdout or "images/s" in sweep.proc.stderr  # the table was printed

    client = MlflowClient(tracking_uri=sweep.uri)
    logged = {Path(a.path).name for a in client.list_artifacts(sweep.parents[0].info.run_id, "report")}
    assert logged >= REPORT_FILES


def test_the_sweep_reports_images_per_second_has_the_digits_mlflow_shows(sweep):
    """Issue 40 §6: the report printed 10.1 images/s where MLflow's chart showed 10.15. Each job's cell
    in the printed table and report.md is what MLflow shows of the job (its rounded copy, the one the
    view's column and bar chart read), to the digit."""
    charts = json.loads(
        MlflowClient(tracking_uri=sweep.uri)
        .get_experiment(sweep.parents[0].info.experiment_id)
        .tags[f"mlflow.sharedViewState.bench-sweep-{sweep.parents[0].info.run_id[:12]}"]
    )["compareRunCharts"]
    assert charts[0]["metricKey"] == DISPLAY["images_per_second"] == "images/s"
    rows = [line.strip("| ").split(" | ") for line in (sweep.dir / "report" / "report.md").read_text().splitlines()]
    at = next(i for i, row in enumerate(rows) if row[0] == "job")  # notes (an unfit job's) may come first
    column = rows[at].index("images/s")
    cells = {row[0]: row[column] for row in rows[at + 2 : at + 6]}
    for child in sweep.children:
        shown = repr(child.data.metrics["images/s"]).removesuffix(".0")  # what MLflow's page prints
        assert cells[child.data.tags["sweep.job"]] == shown, (cells, shown)
        assert f" {shown} " in sweep.proc.stdout  # the printed table too


def test_the_sweep_report_page_opens_in_a_real_browser(sweep, browser):
    """Issue 20, part 4: report.html in headless Chromium: no console error, every plot loads (its
    pixels decoded), and the table holds each job's images/s as the run reported it."""
    page = browser.open(sweep.dir / "report" / "report.html")
    assert page.console_errors == []
    assert len(page.images) == 3 and all(loaded and width > 100 for loaded, width, _ in page.images), page.images
    for row in _csv_rows(sweep.dir / "report" / "report.csv"):
        assert as_shown(float(row["images_per_second"])) in page.cells, (row, page.cells)


def test_report_cli_rebuilds_the_table_from_mlflow(sweep, bench, tmp_path):
    parent_id = sweep.parents[0].info.run_id
    out = tmp_path / "from-mlflow"
    proc = bench.run("--sweep", parent_id, "--tracking-uri", sweep.uri, "--out", str(out), module="bench.report")
    assert proc.returncode == 0, proc.stderr
    assert {p.name for p in out.iterdir()} >= REPORT_FILES
    rows = _csv_rows(out / "report.csv")
    assert len(rows) == 4 and all(r["status"] == "FINISHED" for r in rows)
    children = {c.data.tags["sweep.job"]: c for c in sweep.children}
    for row in rows:
        assert float(row["images_per_second"]) == pytest.approx(
            children[row["job"]].data.metrics["images_per_second"], rel=1e-6
        )
    _check_scaling(rows)
    assert "images/s" in proc.stdout and "speedup" in proc.stdout  # the table on stdout
    assert not (tmp_path / "mlflow.db").exists()  # --tracking-uri was used, no default store created


@pytest.mark.parametrize("target", ["0123456789abcdef0123456789abcdef"])
def test_report_cli_rejects_an_unknown_sweep(sweep, bench, tmp_path, target):
    """Neither a directory nor a run of the (real, populated) store: exit 2, one line. A path that is
    no directory (the case `/nonexistent/sweep` once here) is the bad-input table's row "report of no
    sweep" (tests/reliability/bad_inputs.py: exit 2, the one line, nothing written), run in-process."""
    proc = bench.run("--sweep", target, "--tracking-uri", sweep.uri, module="bench.report")
    assert proc.returncode == 2, f"{proc.stdout}\n{proc.stderr}"
    errors = bench.error_lines(proc.stderr)
    assert len(errors) == 1 and target in errors[0], proc.stderr
    assert "Traceback" not in proc.stderr
    assert not list(tmp_path.glob("report*"))


def test_a_report_of_a_sweep_still_running_says_running_and_pending_and_flags_a_summary_off_its_overrides(
    sweep, bench, tmp_path
):
    """Issue 39 item 15: the report of a sweep still running called its running job FAILED and the
    next MISSING, and a summary that disagrees with its job's overrides went unsaid. The sweep here is
    a copy of the 4-job one: job 1 is a real run still running (an echo run, its .hydra job 1's),
    jobs 2 and 3 have not started, job 0's run_summary.json is job 3's."""
    from bench.analysis.runs import read_sweep_dir
    from bench.results import running

    fake = tmp_path / "sweep"
    shutil.copytree(sweep.dir, fake, ignore=shutil.ignore_patterns("report"))
    for job in ("1", "2", "3"):
        shutil.rmtree(fake / job)
    shutil.copyfile(sweep.dir / "3" / "run_summary.json", fake / "0" / "run_summary.json")
    alive = bench.start("scenario=echo", "scenario.steps=100000", "tracking.enabled=false", f"hydra.run.dir={fake}/1")
    while not running(fake / "1"):  # the event: the run holds its lock (bench.results.room_kept)
        assert alive.poll() is None, alive.communicate()
        time.sleep(0.05)
    shutil.rmtree(fake / "1" / ".hydra")
    shutil.copytree(sweep.dir / "1" / ".hydra", fake / "1" / ".hydra")  # job 1 of the sweep, as it started
    proc = bench.run("--sweep", str(fake), module="bench.report")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[:2] == [
        "the sweep is still running: job 1 (distributed.nproc_per_node=1 precision=bf16) RUNNING, "
        "2 jobs not started yet (PENDING)",  # the overrides the jobs differ in, as in the table
        "job 0: run_summary.json does not match the job's overrides: distributed.nproc_per_node 1 in its "
        "overrides, 2 in the file; precision.name fp32 in its overrides, bf16 in the file",
    ], proc.stdout
    rows = {r["job"]: (r["status"], r["error"]) for r in _csv_rows(fake / "report" / "report.csv")}
    assert [rows[job][0] for job in "0123"] == ["FINISHED", "RUNNING", "PENDING", "PENDING"]
    assert rows["2"][1] == "not started yet" and rows["0"][1].startswith("run_summary.json does not match")
    alive.terminate()  # the run ends: job 1 failed (killed), 2 and 3 never ran
    alive.communicate()
    frame = read_sweep_dir(fake)
    assert list(frame["status"]) == ["FINISHED", "FAILED", MISSING, MISSING] and not running(fake / "1")


def test_compare_of_two_jobs_names_baseline_then_candidate_whole_and_the_keys_they_differ_in(sweep, bench, tmp_path):
    """Issue 39 item 5, as a real process: job 0 (fp32) against job 1 (bf16)."""
    proc = bench.run(str(sweep.dir / "0"), str(sweep.dir / "1"), "--out", str(tmp_path / "cmp"), module="bench.compare")
    assert proc.returncode in (0, 1, 3), proc.stderr  # the verdict is the machine's; the names are the subject
    assert proc.stdout.splitlines()[1].startswith("small_cnn fp32 bs=4 vs small_cnn bf16 bs=4 "), proc.stdout
    said = proc.stderr.splitlines()
    differ = next(i for i, line in enumerate(said) if line.startswith("the configs differ: "))
    assert said[differ].startswith("the configs differ: precision.autocast_dtype None → bfloat16, precision.name")
    assert "precision.name fp32 → bf16" in said[differ] and said[differ + 1].startswith("verdict: ")


# ---- a sweep with a failing job ------------------------------------------------------------------


def _has_submitit_launcher() -> bool:
    try:
        import hydra_plugins.hydra_submitit_launcher  # noqa: F401
    except ImportError:
        return False
    return True


@pytest.fixture(scope="module")
def failing_sweep(tmp_path_factory, bench_at, tiny_args):
    """fp32 (runs) then amp_fp16 (fails on a CPU), into a store of its own. On submitit's local executor
    (hydra/launcher=slurm_local: every job in processes of its own) where bench[slurm] is installed, so
    the slurm_local test reads this one sweep too; on Hydra's basic launcher without it. The basic
    launcher's failing jobs keep their proof in all_failed's sweep (both jobs fail in the sweep's own
    process, the second still runs)."""
    root = tmp_path_factory.mktemp("failing")
    bench = bench_at(root).with_store()
    launcher = ["hydra/launcher=slurm_local"] if _has_submitit_launcher() else []
    proc = bench.run("-m", *tiny_args, *launcher, "precision=fp32,amp_fp16", f"hydra.sweep.dir={root}/sweep")
    return SimpleNamespace(uri=bench.uri, proc=proc, dir=root / "sweep", bench=bench, launcher=launcher)


def test_failing_job_does_not_stop_the_sweep(failing_sweep):
    proc = failing_sweep.proc
    assert proc.returncode == 1, f"{proc.stdout}\n{proc.stderr}"  # one failed job
    assert proc.stdout.count('{"radix_metrics"') == 1
    parents, children = _split(failing_sweep.bench.runs())
    assert len(parents) == 1 and len(children) == 2
    assert parents[0].data.tags["sweep.failed_jobs"] == "1"
    # some failed, not all: FINISHED, the count in its name, description and a metric (issue 27 §4, 30 item 1)
    assert parents[0].info.status == "FINISHED" and parents[0].info.run_name.endswith(" (1 of 2 failed)")
    assert parents[0].data.metrics["sweep_failed_jobs"] == 1
    assert parents[0].data.tags["mlflow.note.content"].startswith("1 of 2 jobs failed: precision='amp_fp16'")
    by_precision = {c.data.params["precision.name"]: c for c in children}
    assert by_precision["fp32"].info.status == "FINISHED"
    failed = by_precision["amp_fp16"]
    assert failed.info.status == "FAILED"
    assert "amp" in failed.data.tags["error"] and "CPU" in failed.data.tags["error"]
    assert failed.data.tags["mlflow.parentRunId"] == parents[0].info.run_id

    rows = {r["job"]: r for r in _csv_rows(failing_sweep.dir / "report" / "report.csv")}
    assert len(rows) == 2
    assert rows["0"]["status"] == "FINISHED" and float(rows["0"]["images_per_second"]) > 0
    assert rows["1"]["status"] == "FAILED"
    report = (failing_sweep.dir / "report" / "report.md").read_text()
    assert "FAILED" in report and report.splitlines()[2].startswith("1 of 2 jobs failed: precision='amp_fp16'")


def test_sweep_report_gives_the_failed_jobs_reason(failing_sweep):
    """The report built at the end of the sweep says why a job failed (as its MLflow run does)."""
    rows = {r["job"]: r for r in _csv_rows(failing_sweep.dir / "report" / "report.csv")}
    assert "amp_fp16" in rows["1"]["error"], rows["1"]


def test_a_report_after_a_job_directory_was_deleted_names_it_and_keeps_the_fuller_report(
    failing_sweep, bench, tmp_path
):
    """Issue 33.5: with job 0's directory deleted, `bench.report --sweep` said "1 of 1 jobs" and
    overwrote the 2-job report. Now the job is named from multirun.yaml, counted, and the report
    that held it is kept: this one goes beside it (into report-partial)."""
    sweep = tmp_path / "sweep"
    shutil.copytree(failing_sweep.dir, sweep)
    shutil.rmtree(sweep / "0")
    proc = bench.run("--sweep", str(sweep), module="bench.report")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "report of 1 of 2 jobs: job 0 (precision=fp32): its directory is gone", proc.stdout
    assert lines[1].startswith("1 of 2 jobs failed: precision='amp_fp16'")
    assert (
        f"the report in {sweep}/report holds job(s) 0, whose directories are gone: it is kept, and this report "
        f"goes beside it, into {sweep}/report-partial"
    ) in proc.stderr
    kept = {r["job"]: r["status"] for r in _csv_rows(sweep / "report" / "report.csv")}
    assert kept == {"0": "FINISHED", "1": "FAILED"}  # as the sweep wrote it
    rows = {r["job"]: r for r in _csv_rows(sweep / "report-partial" / "report.csv")}
    assert (rows["0"]["status"], rows["0"]["error"]) == ("MISSING", "its directory is gone")
    assert rows["1"]["status"] == "FAILED"
    assert (sweep / "report-partial" / "report.md").read_text().splitlines()[2] == lines[0]


# ---- a sweep whose every job failed (issue 27 §4, issue 30 item 1) ----------------------------------


@pytest.fixture(scope="module")
def all_failed(sweep, tiny_args):
    """Both jobs refused (amp_fp16 on a CPU: no training, cheap), into the 4-job sweep's store, so one
    `mlflow ui` serves both in the browser test."""
    proc = sweep.bench.run("-m", *tiny_args, "precision=amp_fp16", "seed=1,2", f"hydra.sweep.dir={sweep.root}/failed")
    (parent,) = [
        r
        for r in sweep.bench.runs()
        if r.data.tags.get("sweep") == "parent" and r.data.tags["sweep.dir"] == str(sweep.root / "failed")
    ]
    return SimpleNamespace(proc=proc, parent=parent, dir=sweep.root / "failed")


def test_a_sweep_whose_every_job_failed_is_failed(all_failed, sweep):
    """Its parent was FINISHED (a green tick over four failures): now FAILED with the reason, the count in
    its name, tags and a metric; the report says it first; the exit code is as before (2: both refused)."""
    proc, parent = all_failed.proc, all_failed.parent
    assert proc.returncode == 2, proc.stderr
    assert parent.info.status == "FAILED" and parent.info.run_name.endswith(" (2 of 2 failed)")
    assert parent.data.tags["error"].startswith("all 2 jobs failed: precision='amp_fp16' is not valid")
    assert parent.data.tags["sweep.failed_jobs"] == "2" and parent.data.metrics["sweep_failed_jobs"] == 2
    assert proc.stdout.splitlines()[0].startswith("all 2 jobs failed: precision='amp_fp16'")
    assert (all_failed.dir / "report" / "report.md").read_text().splitlines()[2].startswith("all 2 jobs failed")
    state = json.loads(
        MlflowClient(tracking_uri=sweep.uri)
        .get_experiment(parent.info.experiment_id)
        .tags[f"mlflow.sharedViewState.bench-sweep-{parent.info.run_id[:12]}"]
    )
    assert state["orderByKey"] == "tags.`mlflow.runName`"  # no run has the figure: by name, not by it
    assert "tags.`error`" in state["selectedColumns"]


def test_a_preset_that_sets_hydra_mode_multirun_sweeps_without_dash_m_and_says_its_folder_holds_an_earlier_sweep(
    all_failed, bench, tiny_args, tmp_path
):
    """bench skips Hydra's compose that reads hydra.mode (a fifth of a small run) where only -m can set
    it; a --config-dir preset still can, and its hydra.mode=MULTIRUN makes a sweep (its job refused
    here, amp_fp16 on a CPU: cheap), as Hydra's own get_mode decides.

    Issue 39 probe F5, in the same sweep: a second sweep given a finished sweep's hydra.sweep.dir wrote
    over its jobs and reported them with its own without a word. Said before the parent run. The first
    sweep is all_failed's (into a new folder: nothing said there); its multirun.yaml, what marks an
    earlier sweep, is copied into this sweep's folder (its job folders are not: the report of this
    1-job sweep would list them), so the second sweep writes there in a store of its own and the shared
    sweep's folder and store stay as the other tests read them. (One sweep for both: they were two
    sweeps of one refused job each.)"""
    first = all_failed.proc
    assert first.returncode == 2 and "earlier sweep" not in first.stderr
    (tmp_path / "s").mkdir()
    shutil.copyfile(all_failed.dir / "multirun.yaml", tmp_path / "s" / "multirun.yaml")
    (tmp_path / "cfg" / "experiment").mkdir(parents=True)
    (tmp_path / "cfg" / "experiment" / "as_sweep.yaml").write_text(
        "# @package _global_\ndefaults:\n  - cpu_smoke\nhydra:\n  mode: MULTIRUN\n"
    )
    tiny = [arg for arg in tiny_args if not arg.startswith("+experiment=")]
    proc = bench.run(
        "--config-dir", str(tmp_path / "cfg"), *tiny, "+experiment=as_sweep", "precision=amp_fp16",
        f"hydra.sweep.dir={tmp_path}/s",
    )  # fmt: skip
    assert proc.returncode == 1, proc.stderr
    assert proc.stdout.splitlines()[0].startswith("all 1 jobs failed: precision='amp_fp16'"), proc.stdout
    # written by this sweep: its multirun.yaml (not the earlier one's copy) and its job's folder
    assert "+experiment=as_sweep" in (tmp_path / "s" / "multirun.yaml").read_text()
    assert (tmp_path / "s" / "0").is_dir()
    (said,) = [line for line in proc.stderr.splitlines() if "holds an earlier sweep" in line]
    assert f"hydra.sweep.dir={tmp_path}/s " in said and "give each sweep its own folder" in said


# ---- jobs in processes of their own: hydra/launcher=slurm_local (submitit's local executor) -------


def test_a_slurm_local_sweep_runs_each_job_apart_one_at_a_time_under_one_parent(failing_sweep):
    """What a Slurm sweep does, without Slurm: every job in processes of its own (a pickled job, as
    on a cluster node), their child runs still under the one parent, counted where the sweep started.
    The sweep is failing_sweep's (`-m <tiny> hydra/launcher=slurm_local precision=fp32,amp_fp16`), which
    runs on slurm_local wherever this test does not skip."""
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher", reason="needs hydra-submitit-launcher (bench[slurm])")
    assert failing_sweep.launcher == ["hydra/launcher=slurm_local"]
    proc, sweep_dir = failing_sweep.proc, failing_sweep.dir
    assert proc.returncode == 1, f"{proc.stdout}\n{proc.stderr[-5000:]}"  # amp_fp16 cannot run on a CPU
    assert proc.stdout.count('{"radix_metrics"') == 1 and "Traceback" not in proc.stderr
    parents, children = _split(failing_sweep.bench.runs())
    assert len(parents) == 1 and len(children) == 2
    parent = parents[0]
    assert parent.data.tags["sweep.jobs"] == "2" and parent.data.tags["sweep.failed_jobs"] == "1"
    by_job = {child.data.tags["sweep.job"]: child for child in children}
    assert by_job["0"].info.status == "FINISHED" and by_job["1"].info.status == "FAILED"
    assert "amp_fp16" in by_job["1"].data.tags["error"]
    pids = {parent.data.tags["bench.pid"], by_job["0"].data.tags["bench.pid"], by_job["1"].data.tags["bench.pid"]}
    assert len(pids) == 3  # the sweep and each job: three processes
    assert all(child.data.tags["mlflow.parentRunId"] == parent.info.run_id for child in children)
    assert by_job["0"].info.end_time <= by_job["1"].info.start_time  # one job at a time
    # a process submitit started for the job alone: its one rank ran in it, no elastic launch (no workers/)
    assert (sweep_dir / "0" / "bench.log").is_file() and not (sweep_dir / "0" / "workers").exists()
    assert len(list(sweep_dir.glob(".submitit/*/*_result.pkl"))) == 2
    rows = {r["job"]: r for r in _csv_rows(sweep_dir / "report" / "report.csv")}
    assert rows["0"]["status"] == "FINISHED" and rows["1"]["status"] == "FAILED"


# ---- the printed links in a real browser: the runs table, chart mode, MLflow's compare page ---------
# a storage and an inference sweep, 2 small jobs each, into the 4-job sweep's store: one `mlflow ui`
# serves every scenario's links

STORAGE = [
    "mode=storage",
    "storage.workload.num_files=4",
    "storage.workload.samples_per_file=2",
    "storage.workload.record_size=4096",
    "storage.workload.epochs=1",
    "storage.workload.read_threads=1",
    "storage.workload.checkpoint_size_mb=0",
    "storage.prepare_workers=1",
]


def _another_sweep(sweep, name: str, *args: str) -> SimpleNamespace:
    """A sweep of `args` into the 4-job sweep's store: its process, parent and children."""
    proc = sweep.bench.run("-m", *args, f"hydra.sweep.dir={sweep.root}/{name}")
    assert proc.returncode == 0, f"{proc.stdout}\n{proc.stderr[-3000:]}"
    runs = sweep.bench.runs()
    (parent,) = [
        r for r in runs if r.data.tags.get("sweep.dir") == str(sweep.root / name) and "sweep.jobs" in r.data.tags
    ]
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
    return SimpleNamespace(proc=proc, parent=parent, children=children)


@pytest.fixture(scope="module")
def storage_sweep(sweep):
    return _another_sweep(
        sweep, "storage", *STORAGE, f"storage.root={sweep.root}/data", "storage.workload.batch_size=2,4"
    )


@pytest.fixture(scope="module")
def inference_sweep(sweep, tiny_args):
    args = [a for a in tiny_args if not a.startswith(("data.batch_size=", "train.steps_per_epoch="))]
    return _another_sweep(sweep, "inference", "mode=inference", *args, "train.steps_per_epoch=2", "data.batch_size=1,4")


def test_a_storage_sweeps_jobs_are_named_by_the_swept_batch(storage_sweep):
    """Issue 40 §6: a storage sweep's jobs were storage-custom-local-c1-job0 and -job1, the swept value in
    neither; as a training job's name carries its batch, so does a storage job's."""
    names = sorted(child.info.run_name for child in storage_sweep.children)
    assert names == ["storage-custom-local-bs2-c1-job0", "storage-custom-local-bs4-c1-job1"], names


@pytest.fixture(scope="module")
def mlflow_ui(sweep, tmp_path_factory):
    """A real `mlflow ui` on 127.0.0.1 serving the sweeps' store (once it answers /health, the event
    waited for); `.url(proc, which)` is the link `proc` printed (`MLflow UI` or `MLflow compare`) on it.
    It is also the module's tracking server (`.address`; artifacts proxied to `.artifacts`): one server
    start (~12 CPU-s) for the browser tests and the sweep tracked over HTTP."""
    from bench.rank_context import free_port

    port, folder = free_port(), tmp_path_factory.mktemp("ui")
    log, artifacts = folder / "ui.log", folder / "art"
    command = [sys.executable, "-m", "mlflow", "ui", "--backend-store-uri", sweep.uri, "--host", "127.0.0.1"]
    ui = subprocess.Popen(
        [*command, "--port", str(port), "--workers", "1", "--artifacts-destination", str(artifacts)],
        cwd=folder,
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
        env={**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"},
    )

    def url(proc, which: str = "MLflow UI") -> str:
        (link,) = [line for line in proc.stderr.splitlines() if f"{which}:" in line]
        assert f"{which}: mlflow ui --backend-store-uri {sweep.uri}, then open http://127.0.0.1:5000/#/" in link
        return link.split("then open ", 1)[1].replace("127.0.0.1:5000", f"127.0.0.1:{port}")

    try:
        deadline = time.monotonic() + 300  # hang guard only
        while ui.poll() is None and not _answers(f"http://127.0.0.1:{port}/health"):
            assert time.monotonic() < deadline, f"mlflow ui did not come up:\n{log.read_text()[-2000:]}"
            time.sleep(0.3)
        assert ui.poll() is None, f"mlflow ui ended:\n{log.read_text()[-2000:]}"
        yield SimpleNamespace(port=port, url=url, address=f"http://127.0.0.1:{port}", artifacts=artifacts)
    finally:
        os.killpg(ui.pid, 15)
        ui.wait(timeout=60)


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as answer:
            return answer.status == 200
    except OSError:
        return False


def _page_text(browser, url: str, until: str, shot: Path) -> tuple:
    """(final URL, visible text) of `url` in headless Chromium once `until` is visible (the event
    waited for; the time is a hang guard), with a screenshot in `shot`."""
    driver = browser.driver
    driver.get(url)
    text = _wait(browser, "return document.body.innerText", lambda text: until in text)
    driver.save_screenshot(str(shot))
    return driver.current_url, text


def _wait(browser, script: str, done):
    """What `script` returns in the page once `done` says so (the event waited for; 120 s: a hang guard)."""
    deadline = time.monotonic() + 120
    while not done(value := browser.driver.execute_script(script)):
        assert time.monotonic() < deadline, f"not seen in the page: {value!r}"
        time.sleep(0.3)
    return value


def _shown_whole(browser, name: str) -> bool:
    """The run name's link is on the page and nothing in it is cut off (MLflow's cell ellipsis: an
    element narrower than its text)."""
    cut = browser.driver.execute_script(
        """
        return [...document.querySelectorAll('a')].filter(a => a.textContent === arguments[0])
            .map(a => [a, ...a.querySelectorAll('*')].some(e => e.scrollWidth > e.clientWidth))""",
        name,
    )
    return bool(cut) and not any(cut)


def test_the_printed_links_open_the_runs_table_with_the_parent_and_rounded_figures(
    sweep, all_failed, browser, mlflow_ui, tmp_path
):
    """Issues 21 and 30 (items 1, 6): the link a sweep prints, in headless Chromium on a real `mlflow ui`:
    the runs table (not MLflow 3's GenAI "Traces" overview), the parent listed by its name with its
    children, each a row of its own (issue 34), all under a group of the sweep's name whose row holds the
    fastest job's figure, not an average (issue 40 §6), images/s rounded (not "284.62942742…" cut
    off), the swept keys and the failure reason as columns; an all-failed sweep's view says why, each
    job's reason in sight, by name (no images/s to sort by); the experiment page with the link's
    workflowType lands on its runs."""
    from bench.report_view import rounded

    parent = sweep.parents[0]
    url, text = _page_text(browser, mlflow_ui.url(sweep.proc), parent.info.run_name, tmp_path / "sweep.png")
    assert _shown_whole(browser, parent.info.run_name)
    assert "/runs?" in url and "Error loading shared view state" not in text
    assert "Model training" in text and "Observability" not in text, text  # not the GenAI side's overview
    assert "Group by: bench.sweep" in text and "(average)" not in text
    best = max(rounded(child.data.metrics["images_per_second"]) for child in sweep.children)
    group = text.index(f"Group: {parent.info.run_name}\n{len(sweep.children) + 1}\n")
    assert f"{best:g} (max)" in text
    assert f"{len(sweep.children) + 1} matching runs" in text
    for child in sweep.children:
        figure = child.data.metrics["images_per_second"]
        assert text.index(child.info.run_name) > group  # under the sweep's group
        assert f"{rounded(figure):g}" in text and repr(figure) not in text, (figure, text)
    assert "distributed.nproc_per_node" in text and "images/s" in text

    failed = all_failed.parent
    url, text = _page_text(browser, mlflow_ui.url(all_failed.proc), failed.info.run_name, tmp_path / "failed.png")
    assert failed.info.run_name.endswith("(2 of 2 failed)") and failed.info.run_name in text
    assert _shown_whole(browser, failed.info.run_name)  # not cut off before its count
    assert f"Group: {failed.info.run_name}" in text  # the group by the sweep's final name
    assert "all 2 jobs failed: precision='amp_fp16' is not valid" in text
    assert text.count("precision='amp_fp16' is not valid") == 3  # the parent's reason and each child's
    assert "Sort: Run Name" in text and "images_per_second" not in text

    experiment = (
        f"http://127.0.0.1:{mlflow_ui.port}/#/experiments/{parent.info.experiment_id}?workflowType=machine_learning"
    )
    url, text = _page_text(browser, experiment, failed.info.run_name, tmp_path / "experiment.png")
    assert f"/experiments/{parent.info.experiment_id}/runs" in url and "overview" not in url, url


# what a sweep's first chart reads: the section's title and, per card, its text and its plotly bars
FIRST_CHARTS = """
    const area = document.querySelector('[data-testid=experiment-view-compare-runs-chart-area]');
    if (!area) return null;
    const section = area.querySelector('[data-testid=experiment-view-compare-runs-section-header]');
    const cards = [...area.querySelectorAll('[data-testid=experiment-view-compare-runs-card]')].slice(0, 2);
    return [section && section.innerText, cards.map(card => {
        const plot = card.querySelector('.js-plotly-plot');
        const bars = plot && plot.data ? plot.data.flatMap(t => t.y.map((run, i) => [run, t.x[i]])) : null;
        return [card.innerText, bars, plot ? plot.querySelectorAll('.point').length : 0];
    })]"""


@pytest.mark.parametrize(
    "scenario, figure, swept",
    [
        ("sweep", "images_per_second", "distributed.nproc_per_node"),
        ("storage_sweep", "samples_per_second", "storage.workload.batch_size"),
        ("inference_sweep", "latency_ms_p50", "data.batch_size"),
    ],
)
def test_a_sweeps_link_charts_a_bar_per_job_and_its_compare_link_opens_the_jobs(
    request, scenario, figure, swept, browser, mlflow_ui, tmp_path
):
    """Issue 34 §1, as a user sees it: the link a sweep prints, then MLflow's chart mode: a bar per job
    of the scenario's headline (its report class's view: images/s, samples/s, the p50 latency), each
    labelled by its job and of its value, the parent (which has no figure) not among them and no
    average, and the swept keys against the figure beside it; then the second link, MLflow's
    compare-runs page of the jobs: each job, and the parallel coordinates of the swept keys."""
    ran = request.getfixturevalue(scenario)
    parent = ran.parents[0] if scenario == "sweep" else ran.parent
    jobs = {child.info.run_id: child for child in ran.children}
    assert len(jobs) >= 2 and all(figure in child.data.metrics for child in jobs.values())
    figure = DISPLAY[figure]  # the bars chart its rounded copy: the report table's digits (issue 40 §6)

    _page_text(browser, mlflow_ui.url(ran.proc), parent.info.run_name, tmp_path / "table.png")
    assert _shown_whole(browser, parent.info.run_name)  # the sweep by its name, not a group's run id
    chart_mode = browser.driver.execute_script(
        "return document.querySelector('input[name=runs-view-mode][value=CHART]').closest('label')"
    )
    chart_mode.click()
    # both drawn: the bars, and the parallel coordinates (plotly draws it after the bars, a spinner until then)
    section, cards = _wait(
        browser,
        FIRST_CHARTS,
        lambda seen: seen and len(seen[1]) == 2 and seen[1][0][1] is not None and swept[:6] in seen[1][1][0],
    )
    browser.driver.save_screenshot(str(tmp_path / "chart.png"))
    assert section.startswith(f"the sweep's jobs: {figure}"), section
    (text, bars, drawn), (swept_text, _, _) = cards
    assert drawn == len(jobs) and dict(bars) == {run_id: jobs[run_id].data.metrics[figure] for run_id in jobs}
    assert all(child.info.run_name in text for child in jobs.values()) and parent.info.run_name not in text
    assert swept_text.startswith("Parallel Coordinates") and swept[:6] in swept_text, swept_text

    _, text = _page_text(browser, mlflow_ui.url(ran.proc, "MLflow compare"), "Run details", tmp_path / "compare.png")
    assert f"Comparing {len(jobs)} Runs from 1 Experiment" in text and "Parallel Coordinates Plot" in text
    assert all(child.info.run_name in text for child in jobs.values())
    # the parent not among the runs compared: its name only as a value of the jobs' bench.sweep tag
    assert f"bench.sweep\t{parent.info.run_name}\t" in text
    assert parent.info.run_name not in text.replace(f"\t{parent.info.run_name}", ""), text
    assert f"Parameters:\n{swept}" in text, text  # the plot's first axis: the key the jobs differ in


# ---- tracking over HTTP: a real `mlflow server` on 127.0.0.1 (the browser tests' `mlflow ui`) ---------
# (A server that cannot be reached or goes away mid-run: tests/reliability/test_tracking_faults.py.)
# Last in the file: its runs join the store the tests above read.


def test_ddp_sweep_lands_on_the_tracking_server(mlflow_ui, bench, tiny, tmp_path):
    """A DDP sweep tracked over HTTP lands as a parent run with its children and the report, its
    artifacts through the server. The server is the browser tests' `mlflow ui` (one start, not two; was
    tests/e2e/test_mlflow_server.py): its store holds the other sweeps' runs too, so this sweep's are
    the runs it added, in an experiment of its own, which the server makes (artifacts proxied)."""
    mlflow_server = mlflow_ui.address
    before = {run.info.run_id for run in bench.runs(mlflow_server)}
    proc = bench.run(
        "-m",
        *tiny,
        "distributed=ddp",
        "distributed.nproc_per_node=1,2",
        "tracking.experiment=over-http",
        f"hydra.sweep.dir={tmp_path}/sweep",
        env=bench.env(mlflow_server),
    )
    assert proc.returncode == 0, f"{proc.stdout}\n{proc.stderr}"
    assert proc.stdout.count('{"radix_metrics"') == 2
    assert mlflow_server in proc.stderr  # the runs name the server they went to
    assert not (tmp_path / "mlflow.db").exists() and not (tmp_path / "mlruns").exists()

    runs = [run for run in bench.runs(mlflow_server) if run.info.run_id not in before]
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
    assert all(run.info.artifact_uri.startswith("mlflow-artifacts:/") for run in runs), [
        r.info.artifact_uri for r in runs
    ]
    assert list(mlflow_ui.artifacts.rglob("report.csv"))
    local = client.download_artifacts(parent.info.run_id, "report/report.csv", str(tmp_path))
    assert Path(local).read_text().count("\n") == 3  # header + 2 rows
    child_artifacts = {a.path for a in client.list_artifacts(children[0].info.run_id)}
    assert "run_summary.json" in child_artifacts
