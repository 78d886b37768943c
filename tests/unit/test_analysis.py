"""The sweep report's parts, in-process: reading job dirs (and an MLflow store) into the frame,
the scaling arithmetic, the renderers and the whole report on job dirs written here."""

from __future__ import annotations

import csv
import html
import json
import os
from pathlib import Path
from typing import Any, Dict, List, Optional

import mlflow
import pytest
import yaml
from mlflow import MlflowClient
from mlflow.entities import Metric, Param, RunTag

from bench.analysis import build_report, log_scaling_to_runs
from bench.analysis.render import keep_varying_overrides, render_markdown, render_text, table, write_csv
from bench.analysis.runs import RunRecord, frame_from_records, read_job_dir, read_mlflow_sweep, read_sweep_dir
from bench.analysis.scaling import add_scaling, configuration_key, configuration_keys
from bench.errors import ReportError
from bench.iobench.report import VIEW as STORAGE_VIEW
from bench.train.report import VIEW as TRAINING_VIEW

TRAINING_HEADERS = [header for header, _, _ in TRAINING_VIEW.columns]  # what the records declare
STORAGE_HEADERS = [header for header, _, _ in STORAGE_VIEW.columns]


# ---- scaling arithmetic (moved from tests/test_sweep.py, now on the frame) -----------------------


def _record(
    job: str,
    procs: int,
    ips: float,
    batch: int = 4,
    precision: str = "fp32",
    status: str = "FINISHED",
    wait: Optional[float] = 0.0,
    **config: str,
) -> RunRecord:
    cfg = {
        "data.batch_size": str(batch),
        "precision.name": precision,
        "distributed.name": "ddp",
        "distributed.nproc_per_node": str(procs),
        "distributed.nnodes": "1",
        "distributed.scaling": "weak",
        "tracking.uri": f"sqlite:///job{job}.db",
        "storage.root": f"/tmp/{job}",
        **config,
    }
    metrics: Dict[str, Any] = {"world_size": procs, "images_per_second": ips} if status == "FINISHED" else {}
    if metrics and wait is not None:
        metrics["data_wait_fraction"] = wait  # every training run reports it (0.0: it never waited)
    return RunRecord(job, status, "", cfg, metrics)


def _key(record: RunRecord) -> tuple:
    return configuration_key(frame_from_records([record]).iloc[0])


def _missing(frame, row: int, column: str) -> bool:
    """The figure is not there for this run (no column at all, or an empty cell in it)."""
    return column not in frame or frame.loc[row, column] is None or frame.loc[row, column] != frame.loc[row, column]


def test_configuration_key_ignores_process_count_and_locations():
    assert _key(_record("0", 1, 10.0)) == _key(_record("1", 4, 30.0))
    assert _key(_record("0", 1, 10.0)) != _key(_record("1", 1, 10.0, batch=8))
    assert _key(_record("0", 1, 10.0)) != _key(_record("1", 1, 10.0, precision="bf16"))


def test_configuration_keys_is_one_key_per_row():
    frame = frame_from_records([_record("0", 1, 10.0), _record("1", 4, 30.0), _record("2", 1, 10.0, batch=8)])
    keys = configuration_keys(frame)
    assert keys[0] == keys[1] != keys[2]


def test_add_scaling_efficiency_is_throughput_over_n_times_baseline():
    frame = frame_from_records(
        [
            _record("0", 1, 100.0),
            _record("1", 2, 180.0),
            _record("2", 4, 300.0),
            _record("3", 2, 150.0, batch=8),  # no 1-process run at batch 8
            _record("4", 2, 170.0, precision="bf16"),  # nor in bf16
            _record("5", 1, 0.0, batch=16, status="FAILED"),
            _record("6", 2, 90.0, batch=16),
        ]
    )  # the baseline failed
    rows = add_scaling(frame)
    assert rows.loc[0, "speedup"] == pytest.approx(1.0)
    assert rows.loc[1, "speedup"] == pytest.approx(1.8)
    assert rows.loc[1, "scaling_efficiency"] == pytest.approx(180.0 / (2 * 100.0))
    assert rows.loc[1, "scaling_efficiency_percent"] == pytest.approx(90.0)
    assert rows.loc[2, "scaling_efficiency"] == pytest.approx(300.0 / (4 * 100.0))
    for row in range(3, len(rows)):
        assert _missing(rows, row, "speedup") and _missing(rows, row, "scaling_efficiency"), rows.loc[row, "job"]
    assert "speedup" not in frame  # the frame given is left as it was


def test_add_scaling_without_a_one_process_run_gives_no_speedup():
    rows = add_scaling(frame_from_records([_record("0", 2, 100.0), _record("1", 4, 180.0)]))
    assert all(_missing(rows, row, "speedup") for row in range(len(rows)))
    assert rows.loc[0, "data_wait_percent"] == 0.0


def test_add_scaling_leaves_data_wait_empty_for_a_run_that_did_not_report_it():
    rows = add_scaling(frame_from_records([_record("0", 1, 100.0, wait=None), _record("1", 1, 100.0, wait=0.25)]))
    assert _missing(rows, 0, "data_wait_percent")  # absent, never 0.0
    assert rows.loc[1, "data_wait_percent"] == pytest.approx(25.0)


# ---- job dirs as Hydra and bench write them ------------------------------------------------------


def _job_dir(
    root: Path,
    name: str,
    overrides: List[str],
    config: Dict[str, Any],
    results: Optional[Dict[str, Any]] = None,
    files: Optional[Dict[str, str]] = None,
) -> Path:
    """A multirun job dir: .hydra/ always; run_summary.json only when the job produced results."""
    job = root / name
    (job / ".hydra").mkdir(parents=True)
    (job / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(overrides))
    (job / ".hydra" / "config.yaml").write_text(yaml.safe_dump(config))
    if results is not None:
        summary = {"results": results, "config": config, "mlflow_run_id": f"run{name}", "environment": {}}
        (job / "run_summary.json").write_text(json.dumps(summary))
    for file_name, text in (files or {}).items():
        (job / file_name).write_text(text)
    return job


def _training_config(procs: int, precision: str = "fp32") -> Dict[str, Any]:
    return {
        "mode": "train",
        "model": {"arch": "resnet18"},
        "precision": {"name": precision},
        "data": {"batch_size": 4, "name": "synthetic"},
        "distributed": {"name": "ddp", "nproc_per_node": procs, "scaling": "weak"},
        "storage": {"endpoint": "", "secret_access_key": "hunter2"},
        "tracking": {"uri": None},
    }


def _training_results(procs: int, ips: float, **extra: Any) -> Dict[str, Any]:
    return {
        "images_per_second": ips,
        "images_per_second_per_device": ips / procs,
        "world_size": procs,
        "batch_size": 4,
        "global_batch_size": 4 * procs,
        "lr": 0.001,
        "model": "resnet18",
        "precision": "fp32",
        "scaling": "weak",
        "device": "cpu",
        "data_wait_fraction": 0.02,
        "step_time_ms_p50": 10.0,
        "step_time_ms_p99": 12.5,
        **extra,
    }


STEP_TIMES = "step,step_time_ms,data_wait_ms\n1,10.5000,0.1000\n2,11.2500,0.2000\n3,9.7500,0.0000\n"
TRACEBACK = (
    'Traceback (most recent call last):\n  File "bench/app.py", line 1, in run\nRuntimeError: the loader died\n\n'
)


def test_read_job_dir_of_a_finished_training_job(tmp_path):
    job = _job_dir(
        tmp_path,
        "0",
        ["distributed.nproc_per_node=1", "precision=fp32"],
        _training_config(1),
        _training_results(1, 100.0),
        {"step_times.csv": STEP_TIMES},
    )
    record = read_job_dir(job)
    assert (record.job, record.status, record.error, record.run_id) == ("0", "FINISHED", "", "run0")
    assert record.overrides == "distributed.nproc_per_node=1 precision=fp32"
    assert record.metrics == _training_results(1, 100.0)
    assert record.timeline == [10.5, 11.25, 9.75]
    assert record.config["distributed.nproc_per_node"] == "1" and record.config["model.arch"] == "resnet18"
    assert record.config["tracking.uri"] == "None"  # values as strings, as MLflow params are
    assert not any("secret" in key for key in record.config)  # secret-looking keys are dropped


def test_read_job_dir_of_a_failed_job_gives_its_reason(tmp_path):
    with_traceback = read_job_dir(
        _job_dir(tmp_path, "1", ["precision=amp_fp16"], _training_config(1, "amp_fp16"), files={"error.txt": TRACEBACK})
    )
    assert (with_traceback.status, with_traceback.error) == ("FAILED", "RuntimeError: the loader died")
    assert with_traceback.metrics == {} and with_traceback.timeline == [] and with_traceback.run_id is None
    assert with_traceback.config["precision.name"] == "amp_fp16"  # from .hydra/config.yaml

    log = "[2026-01-01 10:00:00,000][bench][INFO] starting\n[2026-01-01 10:00:01,000][bench][ERROR] no GPU here\n"
    logged = read_job_dir(_job_dir(tmp_path, "2", [], _training_config(1), files={"bench.log": log}))
    assert (logged.status, logged.error) == ("FAILED", "no GPU here")
    silent = read_job_dir(_job_dir(tmp_path, "3", [], _training_config(1)))
    assert (silent.status, silent.error) == ("FAILED", "failed before writing results")


def _storage_config(clients: int) -> Dict[str, Any]:
    return {
        "mode": "storage",
        "storage": {"clients": clients, "root": f"/data/{clients}", "client": "posix"},
        "distributed": {"name": "none", "nproc_per_node": 1},
    }


def _storage_results(clients: int, **extra: Any) -> Dict[str, Any]:
    return {
        "mode": "storage",
        "workload": "custom",
        "storage": "local",
        "storage_client": "posix",
        "clients": clients,
        "samples_per_second": 500.0 * clients,
        "read_mb_per_second": 2.0 * clients,
        "latency_ms_p50": 0.04,
        "latency_ms_p99": 0.3,
        "au_percent_mean": 96.0,
        "au_percent_min": 95.5,
        "au_threshold_percent": 90.0,
        "au_pass": True,
        "potential_caching": True,
        "data_wait_fraction": 0.04,
        **extra,
    }


LATENCIES = "client,epoch,key,bytes,latency_ms\n0,0,file_0,4096,0.0412\n1,0,file_1,4096,0.2950\n"


def test_read_job_dir_of_a_storage_job_reads_request_latencies(tmp_path):
    record = read_job_dir(
        _job_dir(
            tmp_path,
            "0",
            ["storage.clients=2"],
            _storage_config(2),
            _storage_results(2),
            {"read_latency.csv": LATENCIES},
        )
    )
    assert record.status == "FINISHED" and record.metrics["samples_per_second"] == 1000.0
    assert record.timeline == [0.0412, 0.2950]
    assert record.config["mode"] == "storage" and record.config["storage.clients"] == "2"


def test_read_sweep_dir_orders_jobs_and_refuses_what_is_not_a_sweep(tmp_path):
    for name in ("10", "2", "0"):
        _job_dir(tmp_path / "sweep", name, [], _training_config(1), _training_results(1, 1.0))
    (tmp_path / "sweep" / "report").mkdir()  # not a job: no .hydra/
    assert read_sweep_dir(tmp_path / "sweep")["job"].tolist() == ["0", "2", "10"]

    (tmp_path / "empty").mkdir()
    (tmp_path / "a-file").write_text("")
    for target, says in ((tmp_path / "empty", "holds no job directories"), (tmp_path / "a-file", "is not a directory")):
        with pytest.raises(ReportError, match=says) as caught:
            read_sweep_dir(target)
        assert str(target) in str(caught.value) and "\n" not in str(caught.value)


# ---- renderers -------------------------------------------------------------------------------------


def _training_frame():
    return add_scaling(
        frame_from_records(
            [
                RunRecord(
                    "0",
                    "FINISHED",
                    "precision=fp32 distributed.nproc_per_node=1",
                    {"precision.name": "fp32"},
                    _training_results(1, 100.0),
                    [10.0, 11.0],
                ),
                RunRecord(
                    "1",
                    "FINISHED",
                    "precision=fp32 distributed.nproc_per_node=2",
                    {"precision.name": "fp32"},
                    {k: v for k, v in _training_results(2, 180.0).items() if k != "step_time_ms_p99"},
                    [12.0],
                ),
                RunRecord(
                    "2",
                    "FAILED",
                    "precision=amp_fp16 distributed.nproc_per_node=1",
                    {"precision.name": "amp_fp16"},
                    {},
                    error="precision='amp_fp16' is not valid | on a CPU",
                ),
            ]
        )
    )


def test_table_has_the_training_columns_and_formats_the_figures():
    shown = table(_training_frame())
    assert list(shown.columns) == TRAINING_HEADERS
    first = shown.iloc[0]
    assert (first["procs"], first["images/s"], first["step p50 ms"], first["data wait %"]) == (
        "1",
        "100",  # as MLflow shows its rounded copy (bench.report_view.as_shown)
        "10.00",
        "2.0",
    )
    assert (first["speedup"], first["scaling eff %"], first["scaling"]) == ("1.00", "100.0", "weak")
    assert first["lr"] == "0.001"  # an optimizer sweep's lr per job (issue 40.3)
    assert (shown.iloc[1]["speedup"], shown.iloc[1]["scaling eff %"]) == ("1.80", "90.0")


def test_the_tables_headline_has_the_digits_mlflow_shows_of_it():
    """Issue 40 §6: the table printed 10.1 images/s where MLflow's chart of the job showed 10.15: the
    headline (a DISPLAY figure, logged as its rounded copy) shows that copy's digits, no more, no fewer."""
    from bench.report_view import as_shown

    assert [as_shown(v) for v in (10.1523, 10.1, 4692.43, 284.62942742846934, 1234567.0, 0.00123456)] == [
        "10.15",
        "10.1",
        "4692",
        "284.6",
        "1234567",  # rounded() keeps the units of a big figure
        "0.001235",
    ]
    frame = _training_frame()
    frame.loc[0, "images_per_second"] = 10.1523
    assert table(frame).iloc[0]["images/s"] == "10.15"


def test_table_leaves_an_absent_figure_empty_never_zero():
    shown = table(_training_frame())
    assert shown.iloc[1]["step p99 ms"] == ""  # job 1 did not report it
    failed = shown.iloc[2]
    assert failed["status"] == "FAILED" and failed["error"].startswith("precision='amp_fp16'")
    assert all(failed[h] == "" for h in TRAINING_HEADERS if h not in ("job", "status", "overrides", "error"))


def test_table_of_a_storage_sweep_has_the_storage_columns():
    frame = add_scaling(
        frame_from_records(
            [
                RunRecord(str(n), "FINISHED", f"storage.clients={n}", {"mode": "storage"}, _storage_results(n))
                for n in (1, 2)
            ]
        )
    )
    shown = table(frame)
    assert list(shown.columns) == STORAGE_HEADERS
    assert shown.iloc[1][["clients", "samples/s", "AU pass", "ckpt write GB/s"]].tolist() == ["2", "1000", "True", ""]


def test_text_and_markdown_have_a_line_per_run_under_the_headers():
    shown = table(_training_frame())
    text = render_text(shown).splitlines()
    assert len(text) == 2 + 3 and text[0].split()[:3] == ["job", "status", "overrides"] and set(text[1]) <= {"-", " "}
    markdown = render_markdown(shown).splitlines()
    assert markdown[0] == "| " + " | ".join(TRAINING_HEADERS) + " |" and len(markdown) == 2 + 3
    assert "valid \\| on a CPU" in markdown[4]  # a | inside a cell does not split it


def test_keep_varying_overrides_drops_the_ones_every_run_shares():
    shown = keep_varying_overrides(_training_frame())
    assert shown["overrides"].tolist() == [
        "precision=fp32 distributed.nproc_per_node=1",
        "precision=fp32 distributed.nproc_per_node=2",
        "precision=amp_fp16 distributed.nproc_per_node=1",
    ]
    two = keep_varying_overrides(_training_frame().iloc[:2])
    assert two["overrides"].tolist() == ["distributed.nproc_per_node=1", "distributed.nproc_per_node=2"]


def test_csv_has_the_run_fields_then_every_figure_and_empty_cells_for_absent_ones(tmp_path):
    frame = _training_frame()
    frame["per_rank"] = [[1.0, 2.0], None, None]  # list-valued results stay out of the CSV
    write_csv(frame, tmp_path / "report.csv")
    with (tmp_path / "report.csv").open() as fh:
        header, *rows = list(csv.reader(fh))
    figures = sorted(
        set(_training_results(1, 1.0))
        | {"data_wait_percent", "speedup", "scaling_efficiency", "scaling_efficiency_percent"}
    )
    assert header == ["job", "status", "overrides", "error", *figures]
    by_job = {row[0]: dict(zip(header, row, strict=True)) for row in rows}
    assert by_job["0"]["world_size"] == "1" and float(by_job["1"]["speedup"]) == pytest.approx(1.8)
    assert by_job["1"]["step_time_ms_p99"] == ""
    assert by_job["2"]["status"] == "FAILED" and "amp_fp16" in by_job["2"]["error"]
    assert all(by_job["2"][f] == "" for f in figures)


# ---- the whole report from job dirs ------------------------------------------------------------


def test_build_report_of_a_training_sweep_with_a_failed_job(tmp_path, capsys):
    sweep = tmp_path / "sweep"
    _job_dir(
        sweep,
        "0",
        ["precision=fp32", "distributed.nproc_per_node=1"],
        _training_config(1),
        _training_results(1, 100.0),
        {"step_times.csv": STEP_TIMES},
    )
    _job_dir(
        sweep,
        "1",
        ["precision=fp32", "distributed.nproc_per_node=2"],
        _training_config(2),
        _training_results(2, 150.0),
        {"step_times.csv": STEP_TIMES},
    )
    _job_dir(
        sweep,
        "2",
        ["precision=amp_fp16", "distributed.nproc_per_node=1"],
        _training_config(1, "amp_fp16"),
        files={"error.txt": TRACEBACK},
    )
    files, frame = build_report(sweep, sweep / "report")
    # the sweep varies the process count (and precision), not the batch: no throughput_vs_batch.png
    assert [p.name for p in files] == [
        "report.csv",
        "report.md",
        "report.html",
        "throughput_vs_gpus.png",
        "scaling_efficiency.png",
        "step_time_distribution.png",
    ]
    assert all(p.stat().st_size > 0 for p in files)
    assert frame["status"].tolist() == ["FINISHED", "FINISHED", "FAILED"]
    assert frame.loc[1, "speedup"] == pytest.approx(1.5) and frame.loc[1, "scaling_efficiency"] == pytest.approx(0.75)
    assert (sweep / "report" / "report.html").read_text().count("data:image/png;base64,") == 3
    assert "RuntimeError: the loader died" in (sweep / "report" / "report.md").read_text()
    assert "images/s" in capsys.readouterr().out  # the table, printed


def test_build_report_of_a_storage_sweep(tmp_path):
    sweep = tmp_path / "sweep"
    for n in (1, 2):
        _job_dir(
            sweep,
            str(n - 1),
            [f"storage.clients={n}"],
            _storage_config(n),
            _storage_results(n),
            {"read_latency.csv": LATENCIES},
        )
    files, _ = build_report(sweep, tmp_path / "out")
    assert [p.name for p in files][3:] == [
        "throughput_vs_clients.png",
        "au_vs_clients.png",
        "read_latency_distribution.png",
    ]
    assert "AU min %" in (tmp_path / "out" / "report.md").read_text()


# ---- a real MLflow store (sqlite, in tmp_path) -----------------------------------------------------


def _child(
    client: MlflowClient,
    experiment: str,
    parent: str,
    job: str,
    metrics: Dict[str, float],
    params: Dict[str, str],
    status: str = "FINISHED",
    steps: List[float] = (),
) -> str:
    run = client.create_run(
        experiment,
        tags={
            "mlflow.parentRunId": parent,
            "sweep.job": job,
            "overrides": f"distributed.nproc_per_node={params['distributed.nproc_per_node']}",
        },
    )
    run_id = run.info.run_id
    client.log_batch(
        run_id,
        metrics=[Metric(k, v, 0, 0) for k, v in metrics.items()]
        + [Metric("step_time_ms", v, 0, i + 1) for i, v in enumerate(steps)],
        params=[Param(k, v) for k, v in params.items()],
        tags=[RunTag("error", "it broke")] if status == "FAILED" else [],
    )
    client.set_terminated(run_id, status)
    return run_id


@pytest.mark.slow  # in-process, but a real MLflow store's sweep: ~10 s
def test_read_mlflow_sweep_maps_runs_onto_the_frame_and_logs_scaling_back(tmp_path, monkeypatch):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(tracking_uri=uri)
    experiment = client.create_experiment("sweeps", artifact_location=(tmp_path / "art").as_uri())
    parent = client.create_run(experiment, tags={"sweep": "parent"}).info.run_id
    params = {
        "model.arch": "resnet18",
        "precision.name": "fp32",
        "distributed.scaling": "weak",
        "distributed.name": "ddp",
        "data.name": "synthetic",
    }
    one = _child(
        client,
        experiment,
        parent,
        "0",
        {"world_size": 1, "images_per_second": 100.0},
        {**params, "distributed.nproc_per_node": "1"},
        steps=[11.0, 10.0],
    )
    # the per-epoch accuracy series a training run with train.eval_every logs (step = epoch)
    client.log_batch(
        one,
        metrics=[
            Metric("val_top1", 0.9, 0, 0),
            Metric("val_top1", 0.5, 0, 1),
            Metric("val_top1", 0.9, 0, 2),
            Metric("epoch_wall_seconds", 3.0, 0, 1),
            Metric("epoch_wall_seconds", 6.5, 0, 2),
        ],
    )
    _child(
        client,
        experiment,
        parent,
        "1",
        {"world_size": 2, "images_per_second": 170.0, "step_time_ms_p50": 9.0},
        {**params, "distributed.nproc_per_node": "2"},
    )
    _child(client, experiment, parent, "2", {}, {**params, "distributed.nproc_per_node": "4"}, status="FAILED")

    monkeypatch.setenv("MLFLOW_TRACKING_URI", "sqlite:///elsewhere.db")
    frame = read_mlflow_sweep(parent, uri)
    assert os.environ["MLFLOW_TRACKING_URI"] == "sqlite:///elsewhere.db"  # the global URI was put back
    assert mlflow.get_tracking_uri() == "sqlite:///elsewhere.db"

    assert frame["job"].tolist() == ["0", "1", "2"] and frame["status"].tolist() == ["FINISHED", "FINISHED", "FAILED"]
    assert frame.loc[0, "run_id"] == one and frame.loc[0, "timeline"] == [11.0, 10.0] and frame.loc[1, "timeline"] == []
    assert frame["val_curve"].tolist() == [[(3.0, 0.5), (6.5, 0.9)], [], []]  # by epoch; step 0 is the final figure
    assert frame.loc[0, "precision"] == "fp32" and frame.loc[0, "config.distributed.nproc_per_node"] == "1"
    assert frame.loc[2, "error"] == "it broke" and frame.loc[0, "error"] == ""
    shown = table(add_scaling(frame))
    assert shown.iloc[0]["step p50 ms"] == "" and shown.iloc[1]["step p50 ms"] == "9.00"  # absent, not 0.00
    assert shown.iloc[1]["speedup"] == "1.70" and shown.iloc[2]["images/s"] == ""

    log_scaling_to_runs(add_scaling(frame), client)
    assert client.get_run(one).data.metrics["speedup"] == pytest.approx(1.0)
    two = client.get_run(frame.loc[1, "run_id"]).data.metrics
    assert two["speedup"] == pytest.approx(1.7) and two["scaling_efficiency"] == pytest.approx(0.85)
    assert "speedup" not in client.get_run(frame.loc[2, "run_id"]).data.metrics

    with pytest.raises(ReportError, match="neither a directory nor a run in the MLflow store"):
        read_mlflow_sweep("0123456789abcdef0123456789abcdef", uri)
    with pytest.raises(ReportError, match="has no child runs"):
        read_mlflow_sweep(one, uri)


def test_a_batch_size_sweep_plots_only_its_batch_axis_with_the_swept_values_as_ticks(tmp_path):
    """Issue 21: a batch-size-only sweep drew scaling_efficiency.png with one point on an axis of
    0.54-1.02 "processes"; a plot is drawn only for an axis with two or more values, its ticks the
    swept values, its y range above the highest point."""
    sweep = tmp_path / "sweep"
    for job, (batch, rate) in enumerate([(16, 100.0), (32, 180.0), (64, 300.0)]):
        config = _training_config(1)
        config["data"]["batch_size"] = batch
        results = _training_results(1, rate)
        results.update(batch_size=batch, global_batch_size=batch)
        _job_dir(sweep, str(job), [f"data.batch_size={batch}"], config, results, {"step_times.csv": STEP_TIMES})
    files, _ = build_report(sweep, sweep / "report")
    assert [p.name for p in files][3:] == ["throughput_vs_batch.png", "step_time_distribution.png"]

    from bench.analysis.plots import _pyplot, finish_axes

    plt = _pyplot()
    fig, ax = plt.subplots()
    ax.plot([16, 32, 64], [100.0, 180.0, 300.0], marker="o")
    finish_axes(ax, [16.0, 32.0, 64.0])
    assert list(ax.get_xticks()) == [16.0, 32.0, 64.0] and [t.get_text() for t in ax.get_xticklabels()] == [
        "16",
        "32",
        "64",
    ]
    low, high = ax.get_ylim()
    assert low == 0 and high > 300.0
    plt.close(fig)


def test_a_worker_sweep_names_the_smallest_count_within_5_percent_of_the_best(tmp_path, capsys):
    """Issue 21 (the DDP scaling study's first experiment): -m data.num_workers=0,2,4,8 gets a column
    for the swept key, throughput and data wait against the workers, and the pick."""
    sweep = tmp_path / "sweep"
    for job, (workers, rate, wait) in enumerate(
        [(0, 120.0, 0.62), (2, 390.0, 0.08), (4, 405.0, 0.03), (8, 402.0, 0.03)]
    ):
        config = _training_config(1)
        config["data"]["num_workers"] = workers
        results = _training_results(1, rate, data_wait_fraction=wait)
        _job_dir(sweep, str(job), [f"data.num_workers={workers}"], config, results, {"step_times.csv": STEP_TIMES})
    files, frame = build_report(sweep, sweep / "report")
    printed = capsys.readouterr().out
    sentence = (
        "data.num_workers: 2 is the smallest count within 5% of the best (4 workers: 405.0 images/s); "
        "2 gives 390.0 images/s, data wait 8.0%"
    )
    assert sentence in printed and sentence in (sweep / "report" / "report.md").read_text()
    assert "throughput_vs_workers.png" in [p.name for p in files]
    header = printed.splitlines()[0].split()
    assert "data.num_workers" in header  # the swept key labelled in the table

    from bench.analysis.scaling import worker_picks

    frame.loc[frame["job"] == "2", "images_per_second"] = 500.0  # 4 workers far ahead: 2 no longer within 5%
    (pick,) = worker_picks(frame)
    assert pick.pick.workers == 4 and pick.best.workers == 4


def test_the_sweep_report_shows_fit_to_measure_and_warns_of_an_unfit_job(tmp_path, capsys):
    sweep = tmp_path / "sweep"
    reason = "2 torch threads x 1 rank + 2 loader workers = 4 > 2 usable cores"
    _job_dir(
        sweep,
        "0",
        ["data.batch_size=4"],
        _training_config(1),
        _training_results(1, 100.0, fit_to_measure=True, fit_reasons=""),
        {"step_times.csv": STEP_TIMES},
    )
    _job_dir(
        sweep,
        "1",
        ["data.batch_size=8"],
        _training_config(1),
        _training_results(1, 90.0, fit_to_measure=False, fit_reasons=reason),
        {"step_times.csv": STEP_TIMES},
    )
    _files, frame = build_report(sweep, sweep / "report")
    shown = table(frame)
    assert shown["fit"].tolist() == ["True", "False"] and list(shown.columns)[-1] == "error"
    warning = f"warning: 1 of 2 jobs were not fit to measure, their figures are suspect (job 1: {reason})"
    assert warning in capsys.readouterr().out
    assert warning in (sweep / "report" / "report.md").read_text()
    assert html.escape(warning) in (sweep / "report" / "report.html").read_text()
    older = tmp_path / "older"  # jobs recorded before the verdict: no column, no warning
    _job_dir(older, "0", ["data.batch_size=4"], _training_config(1), _training_results(1, 100.0))
    build_report(older, older / "report")
    assert "fit" not in table(read_sweep_dir(older)).columns and "warning" not in capsys.readouterr().out


def test_a_strong_scaling_sweep_plots_only_its_process_axis(tmp_path):
    """Issue 30.13: a GPU-count sweep with distributed.scaling=strong (one global batch of 8 split
    over 1, 2, 4 processes: 8, 4, 2 a process) drew throughput_vs_batch.png with lone points; the
    batch moved only because the process count did, so the process axis alone is plotted, its
    line the global batch."""
    sweep = tmp_path / "sweep"
    for job, (procs, rate) in enumerate([(1, 100.0), (2, 180.0), (4, 300.0)]):
        config = _training_config(procs)
        config["distributed"]["scaling"] = "strong"
        config["data"]["batch_size"] = 8
        results = _training_results(procs, rate, batch_size=8 // procs, global_batch_size=8, scaling="strong")
        _job_dir(
            sweep,
            str(job),
            [f"distributed.nproc_per_node={procs}", "distributed.scaling=strong"],
            config,
            results,
            {"step_times.csv": STEP_TIMES},
        )
    files, frame = build_report(sweep, sweep / "report")
    assert [p.name for p in files][3:] == [
        "throughput_vs_gpus.png",
        "scaling_efficiency.png",
        "step_time_distribution.png",
    ]
    assert frame["scaling_efficiency_percent"].tolist() == pytest.approx([100.0, 90.0, 75.0])


def test_a_storage_sweep_at_one_client_count_draws_no_client_axis(tmp_path):
    """A sweep of something else (here the store's root) at one client count: no lone-point plots."""
    sweep = tmp_path / "sweep"
    for job in (0, 1):
        _job_dir(
            sweep,
            str(job),
            [f"storage.root=/mnt/d{job}"],
            _storage_config(1),
            _storage_results(1),
            {"read_latency.csv": LATENCIES},
        )
    files, _ = build_report(sweep, tmp_path / "out")
    assert [p.name for p in files][3:] == ["read_latency_distribution.png"]


def test_a_sweep_of_weak_and_strong_scaling_draws_a_line_per_kind_and_says_superlinear(tmp_path, monkeypatch, capsys):
    """Issue 40 §4: `distributed.nproc_per_node=1,2 distributed.scaling=weak,strong` labelled the strong
    job's 267 % "(weak scaling)", joined weak and strong 1-process points, drew throughput_vs_batch.png
    with no batch swept, and showed a speedup above the process count as a figure. Read from the
    figures' own lines, labels and annotations."""
    from bench.analysis.plots import Figures

    drawn: Dict[str, Any] = {}
    save = Figures.save
    monkeypatch.setattr(Figures, "save", lambda self, fig, name: (drawn.__setitem__(name, fig), save(self, fig, name)))
    sweep = tmp_path / "sweep"
    jobs = [("weak", 1, 100.0), ("weak", 2, 1042.0), ("strong", 1, 110.0), ("strong", 2, 587.4)]
    for job, (kind, procs, rate) in enumerate(jobs):
        config = _training_config(procs)
        config["distributed"]["scaling"] = kind
        per_process = 4 if kind == "weak" else 4 // procs
        results = _training_results(
            procs, rate, batch_size=per_process, global_batch_size=per_process * procs, scaling=kind
        )
        overrides = [f"distributed.nproc_per_node={procs}", f"distributed.scaling={kind}"]
        _job_dir(sweep, str(job), overrides, config, results, {"step_times.csv": STEP_TIMES})
    files, frame = build_report(sweep, sweep / "report")
    assert "throughput_vs_batch.png" not in [p.name for p in files]  # no batch swept
    assert frame["scaling_efficiency_percent"].tolist() == pytest.approx([100.0, 521.0, 100.0, 267.0])

    def lines(name: str) -> Dict[str, list]:
        (ax,) = drawn[name].axes
        return {
            line.get_label(): list(line.get_xydata().tolist()) for line in ax.get_lines() if line.get_label()[0] != "_"
        }

    throughput = lines("throughput_vs_gpus.png")
    assert throughput == {
        "precision=fp32, scaling=strong, batch=4": [[1.0, 110.0], [2.0, 587.4]],
        "precision=fp32, scaling=weak, batch=4": [[1.0, 100.0], [2.0, 1042.0]],
    }
    efficiency = lines("scaling_efficiency.png")
    assert efficiency["precision=fp32, scaling=strong, batch=4"] == [[1, 100], [2, 267]]
    assert efficiency["precision=fp32, scaling=weak, batch=4"] == [[1, 100], [2, 521]]
    assert not any("(weak scaling)" in label or "(strong scaling)" in label for label in efficiency)
    (ax,) = drawn["scaling_efficiency.png"].axes
    marks = sorted((t.get_text().strip(), round(t.xy[0], 6), round(t.xy[1], 6)) for t in ax.texts)
    assert marks == [("superlinear", 2.0, 267.0), ("superlinear", 2.0, 521.0)]
    note = (
        "warning: superlinear scaling, a speedup above the process count (job 1: 10.42x on 2 (521% efficiency); "
        "job 3: 5.34x on 2 (267% efficiency))"
    )
    assert note in capsys.readouterr().out and note in (sweep / "report" / "report.md").read_text()
