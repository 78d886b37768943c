"""The sweep report of jobs that evaluated accuracy, in-process on job dirs written here: the
val curve read from metrics_epoch.jsonl, the val_top1 / reached_target / time_to_target_seconds
columns (absent without evaluation), and accuracy_vs_time.png with its target line."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any, Dict, List, Optional

import pytest
import yaml

from bench.analysis import build_report
from bench.analysis.plots import _pyplot
from bench.analysis.render import table
from bench.analysis.runs import RunRecord, frame_from_records, read_job_dir
from bench.analysis.scaling import add_scaling
from bench.runtime.plots import plot_accuracy  # the model scenarios' plots draw the accuracy curve
from bench.train.report import VIEW as TRAINING_VIEW
from bench.train.report import read_val_curve  # the training scenario reads its curve back (BaseReport.read_back)

TRAINING_HEADERS = [header for header, _, _ in TRAINING_VIEW.columns]
ACCURACY_HEADERS = ["val_top1", "reached_target", "time_to_target_seconds"]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"

CONFIG = {
    "mode": "train",
    "model": {"arch": "cifar_resnet18"},
    "precision": {"name": "fp32"},
    "data": {"batch_size": 64, "name": "imagefolder"},
    "distributed": {"name": "single", "nproc_per_node": 1, "scaling": "weak"},
}


def _results(lr: float, **accuracy: Any) -> Dict[str, Any]:
    return {
        "images_per_second": 1000.0 * lr,
        "world_size": 1,
        "batch_size": 64,
        "global_batch_size": 64,
        "model": "cifar_resnet18",
        "precision": "fp32",
        "scaling": "weak",
        "device": "cpu",
        "data_wait_fraction": 0.05,
        "step_time_ms_p50": 64.0,
        "step_time_ms_p99": 70.0,
        **accuracy,
    }


def _accuracy(top1: float, target: Optional[float], reached_at: Optional[float], epoch: Optional[int]) -> Dict:
    """The accuracy fields of a results dict, as the trainer writes them."""
    fields = {
        "val_top1": top1,
        "val_top5": min(1.0, top1 + 0.05),
        "reached_target": reached_at is not None,
        "time_to_target_seconds": reached_at,
        "epochs_to_target": epoch,
    }
    if target is not None:
        fields["target_accuracy"] = target
    return fields


def _epochs(points: List[Optional[tuple]]) -> str:
    """metrics_epoch.jsonl: one line per epoch; an evaluated epoch carries (wall_seconds, val_top1)."""
    lines = []
    for number, point in enumerate(points):
        epoch: Dict[str, Any] = {
            "epoch": number,
            "seconds": 5.0,
            "images_per_second": 900.0,
            "loss": 2.0 - number / 10,
            "lr": 0.1,
        }
        if point is not None:
            epoch.update(wall_seconds=point[0], val_top1=point[1], val_top5=min(1.0, point[1] + 0.05), eval_seconds=0.5)
        lines.append(json.dumps(epoch))
    return "\n".join(lines) + "\n"


def _job(root: Path, name: str, lr: float, results: Dict[str, Any], epochs: Optional[str] = None) -> Path:
    job = root / name
    (job / ".hydra").mkdir(parents=True)
    (job / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump([f"optimizer.lr={lr}", "train.epochs=4"]))
    (job / ".hydra" / "config.yaml").write_text(yaml.safe_dump(CONFIG))
    (job / "run_summary.json").write_text(json.dumps({"results": results, "config": CONFIG, "mlflow_run_id": None}))
    (job / "step_times.csv").write_text("step,step_time_ms,data_wait_ms\n1,64.0,1.0\n2,66.0,2.0\n")
    if epochs is not None:
        (job / "metrics_epoch.jsonl").write_text(epochs)
    return job


def _accuracy_sweep(root: Path, targets=(0.9, 0.9)) -> Path:
    """Two jobs that evaluated every other epoch: one reached the target, one did not."""
    _job(
        root,
        "0",
        0.1,
        _results(0.1, **_accuracy(0.93, targets[0], 12.25, 3)),
        _epochs([None, (6.0, 0.71), None, (12.25, 0.93)]),
    )
    _job(
        root,
        "1",
        0.01,
        _results(0.01, **_accuracy(0.62, targets[1], None, None)),
        _epochs([None, (6.5, 0.41), None, (13.0, 0.62)]),
    )
    return root


def test_read_val_curve_takes_the_evaluated_epochs_in_time_order(tmp_path):
    job = tmp_path / "job"
    job.mkdir()
    assert read_val_curve(job) == []  # no metrics_epoch.jsonl
    text = (
        _epochs([(9.0, 0.8), None, (3.0, 0.5)])
        + "not json\n[1, 2]\n"
        + json.dumps({"val_top1": None, "wall_seconds": 1.0})
    )
    (job / "metrics_epoch.jsonl").write_text(text)
    assert read_val_curve(job) == [(3.0, 0.5), (9.0, 0.8)]


def test_read_job_dir_carries_the_curve_and_the_accuracy_results(tmp_path):
    _accuracy_sweep(tmp_path)
    record = read_job_dir(tmp_path / "0")
    assert record.own["val_curve"] == [(6.0, 0.71), (12.25, 0.93)]
    assert record.metrics["time_to_target_seconds"] == 12.25 and record.metrics["reached_target"] is True
    without = read_job_dir(_job(tmp_path, "2", 0.1, _results(0.1), _epochs([None, None])))
    assert without.own["val_curve"] == [] and "val_top1" not in without.metrics


def test_table_without_accuracy_keeps_todays_columns(tmp_path):
    _job(tmp_path, "0", 0.1, _results(0.1), _epochs([None]))
    _job(tmp_path, "1", 0.01, _results(0.01))
    frame = add_scaling(frame_from_records([read_job_dir(tmp_path / n) for n in ("0", "1")]))
    assert list(table(frame).columns) == TRAINING_HEADERS


def test_table_with_accuracy_has_the_three_columns_before_the_error(tmp_path):
    _accuracy_sweep(tmp_path)
    frame = add_scaling(frame_from_records([read_job_dir(tmp_path / n) for n in ("0", "1")]))
    shown = table(frame)
    assert list(shown.columns) == TRAINING_HEADERS[:-1] + ACCURACY_HEADERS + ["error"]
    assert shown.loc[0, ACCURACY_HEADERS].tolist() == ["0.9300", "True", "12.2"]
    assert shown.loc[1, ACCURACY_HEADERS].tolist() == ["0.6200", "False", ""]  # not reached: empty, never 0
    # read back from MLflow a bool is a float: still shown as True/False
    floats = frame.copy()
    floats["reached_target"] = [1.0, 0.0]
    assert table(floats)["reached_target"].tolist() == ["True", "False"]


def test_table_shows_only_the_accuracy_columns_some_job_has():
    no_target = _results(
        0.1, val_top1=0.5, val_top5=0.8, reached_target=False, time_to_target_seconds=None, epochs_to_target=None
    )
    shown = table(
        add_scaling(
            frame_from_records(
                [RunRecord("0", "FINISHED", "", {}, no_target), RunRecord("1", "FAILED", "", {}, {}, error="it broke")]
            )
        )
    )
    assert list(shown.columns) == [*TRAINING_HEADERS[:-1], "val_top1", "reached_target", "error"]
    assert shown["val_top1"].tolist() == ["0.5000", ""]


def test_build_report_of_an_accuracy_sweep_writes_the_plot_and_the_columns(tmp_path, capsys):
    sweep = _accuracy_sweep(tmp_path / "sweep")
    files, frame = build_report(sweep, sweep / "report")
    names = [p.name for p in files]
    # the sweep varies the lr only: no process-count or batch axis to plot
    assert names[-1] == "accuracy_vs_time.png" and names[3:-1] == ["step_time_distribution.png"]
    plot = sweep / "report" / "accuracy_vs_time.png"
    assert plot.read_bytes()[:8] == PNG_MAGIC and plot.stat().st_size > 5000
    assert (sweep / "report" / "report.html").read_text().count("data:image/png;base64,") == 2
    markdown = (sweep / "report" / "report.md").read_text()
    assert "| val_top1 | reached_target | time_to_target_seconds | error |" in markdown
    assert "![accuracy_vs_time](accuracy_vs_time.png)" in markdown
    with (sweep / "report" / "report.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    assert {
        "val_top1",
        "val_top5",
        "target_accuracy",
        "reached_target",
        "time_to_target_seconds",
        "epochs_to_target",
    } <= set(rows[0])
    assert (rows[0]["time_to_target_seconds"], rows[1]["time_to_target_seconds"]) == ("12.25", "")
    assert (rows[0]["reached_target"], rows[1]["reached_target"]) == ("True", "False")
    assert "time_to_target_seconds" in capsys.readouterr().out  # the printed table
    assert frame.loc[1, "val_curve"] == [(6.5, 0.41), (13.0, 0.62)]


def test_build_report_without_val_figures_writes_no_accuracy_plot(tmp_path):
    sweep = tmp_path / "sweep"
    _job(sweep, "0", 0.1, _results(0.1), _epochs([None, None]))
    # results that name accuracy but no evaluated epoch on disk: the table has it, there is nothing to plot
    _job(sweep, "1", 0.01, _results(0.01, **_accuracy(0.5, 0.9, None, None)))
    files, _ = build_report(sweep, sweep / "report")
    assert "accuracy_vs_time.png" not in [p.name for p in files]
    assert not (sweep / "report" / "accuracy_vs_time.png").exists()


class _Kept:
    """plot_accuracy's figures, kept open so the test can read what was drawn."""

    def __init__(self):
        self.plt, self.saved = _pyplot(), {}

    def new(self, width: float = 7):
        return self.plt.subplots(figsize=(width, 4.5))

    def save(self, fig, name: str) -> None:
        self.saved[name] = fig


def _dashed(fig) -> List[float]:
    (ax,) = fig.axes
    return [line.get_ydata()[0] for line in ax.get_lines() if line.get_linestyle() == "--"]


@pytest.mark.parametrize("targets,line", [((0.9, 0.9), [0.9]), ((0.9, 0.8), []), ((0.9, None), [])])
def test_the_target_line_is_drawn_only_when_every_job_shares_one(tmp_path, targets, line):
    _accuracy_sweep(tmp_path, targets)
    frame = frame_from_records([read_job_dir(tmp_path / n) for n in ("0", "1")])
    kept = _Kept()
    plot_accuracy(kept, frame, "t")  # type: ignore[arg-type]
    fig = kept.saved["accuracy_vs_time.png"]
    assert _dashed(fig) == line
    (ax,) = fig.axes
    solid = [line for line in ax.get_lines() if line.get_linestyle() != "--"]
    assert [list(line.get_xdata()) for line in solid] == [[6.0, 12.25], [6.5, 13.0]]  # a line per job, x = wall s
    assert [list(line.get_ydata()) for line in solid] == [[0.71, 0.93], [0.41, 0.62]]
    kept.plt.close(fig)
