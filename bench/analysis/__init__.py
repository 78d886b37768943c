"""Reading results back and comparing runs: sweep tables, scaling, plots (the statistics are bench.maths).

One job per module, in the order a report is made:
- runs:     a sweep (multirun dir or MLflow parent run) -> a DataFrame, one row per job
- scaling:  configuration key, speedup and scaling efficiency against the 1-process run; a worker sweep's pick
- render:   the table as text, markdown, CSV and one self-contained HTML page
- plots:    the PNGs

The entry points below import their modules when called, so `import bench.analysis`
stays free of pandas, matplotlib and mlflow.
"""

from __future__ import annotations

import logging
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, List, Tuple

from bench.errors import ReportError

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["ReportError", "build_report", "log_scaling_to_runs", "report_from_mlflow", "write_report"]

log = logging.getLogger("bench")

REPORT_ARTIFACT_PATH = "report"  # where the files go in the sweep's parent run


def write_report(frame: "pd.DataFrame", out: Path, title: str) -> Tuple[List[Path], "pd.DataFrame"]:
    """Scaling added, then report.csv, the plots, report.md and report.html written into `out`,
    and the table printed on stdout. Returns (files written, the frame with scaling figures);
    report.html is files[2]."""
    from bench.analysis import render
    from bench.analysis.runs import sweep_report_class
    from bench.analysis.scaling import add_scaling, plot_workers, superlinear_note, worker_picks

    out.mkdir(parents=True, exist_ok=True)
    frame = render.keep_varying_overrides(add_scaling(frame))
    shown = render.table(frame)
    csv_path, md_path, html_path = out / "report.csv", out / "report.md", out / "report.html"
    render.write_csv(frame, csv_path)
    images = list(sweep_report_class(frame).view.plots(frame, out, title))  # the plots its report class draws
    picks = worker_picks(frame)  # a DataLoader worker sweep: the smallest count within 5% of the best
    images += plot_workers(picks, out, title)
    warning = render.unfit_warning(frame)  # a job that was not fit to measure: said under the table
    # a sweep still running, jobs whose directory is gone, jobs that failed: said first, above the table
    said = [*render.progress_notes(frame), render.missing_note(frame), render.failure_note(frame)]
    first = [note for note in said if note]
    warnings = [note for note in (superlinear_note(frame), warning) if note]
    notes = first + [pick.sentence() for pick in picks] + warnings
    render.write_markdown(shown, images, md_path, title, notes)
    render.write_html(shown, images, html_path, title, notes)
    print("\n".join([*first, render.render_text(shown), *notes[len(first) :]]), flush=True)
    return [csv_path, md_path, html_path, *images], frame


def build_report(sweep_dir: Path, out: Path) -> Tuple[List[Path], "pd.DataFrame"]:
    """The report of a multirun dir, written into `out`: (files written, the frame). A report already
    in `out` that holds jobs whose directories are gone now is kept: this one goes beside it, into
    `<out>-partial`, and a line on stderr says so (it was overwritten by a report of fewer jobs)."""
    from bench.analysis.render import missing_jobs, reported_jobs
    from bench.analysis.runs import read_sweep_dir

    frame = read_sweep_dir(sweep_dir)
    if kept := [row["job"] for row in missing_jobs(frame) if row["job"] in reported_jobs(out)]:
        beside = out.with_name(out.name + "-partial")
        print(
            f"the report in {out} holds job(s) {', '.join(kept)}, whose directories are gone: it is kept, and "
            f"this report goes beside it, into {beside}",
            file=sys.stderr,
            flush=True,
        )
        out = beside
    return write_report(frame, out, f"sweep {sweep_dir}")


def report_from_mlflow(parent_run_id: str, tracking_uri: str, out: Path) -> Tuple[List[Path], "pd.DataFrame"]:
    """The report of a sweep's MLflow parent run, rebuilt from its child runs, written into
    `out` and logged to the parent run under report/: (files written, the frame)."""
    from mlflow import MlflowClient

    from bench.analysis.runs import read_mlflow_sweep

    files, frame = write_report(read_mlflow_sweep(parent_run_id, tracking_uri), out, f"sweep {parent_run_id}")
    client = MlflowClient(tracking_uri=tracking_uri)
    for path in files:
        try:
            client.log_artifact(parent_run_id, str(path), REPORT_ARTIFACT_PATH)
        except Exception as exc:  # the files are written; the store is a copy
            why = f"{type(exc).__name__}: {exc}"
            log.warning("logging the report to MLflow run %s failed (%s); it is in %s", parent_run_id, why, out)
            break
    return files, frame


def log_scaling_to_runs(frame: "pd.DataFrame", client: Any) -> None:
    """speedup / scaling_efficiency become metrics of the child runs too, so `mlflow ui`
    compares them; rows without a run id or without a speedup are skipped."""
    from mlflow.entities import Metric

    from bench.analysis.cells import absent

    now = int(time.time() * 1000)
    for row in frame.to_dict("records"):
        if absent(row.get("run_id")) or absent(row.get("speedup")):
            continue
        try:
            metrics = [Metric(name, float(row[name]), now, 0) for name in ("speedup", "scaling_efficiency")]
            client.log_batch(row["run_id"], metrics=metrics)
        except Exception as exc:  # a tracking problem must not cost the report
            log.warning("logging speedup to MLflow run %s failed (%s: %s)", row["run_id"], type(exc).__name__, exc)
