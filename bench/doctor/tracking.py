"""The doctor in MLflow: one parent run (the verdict as tags, each rung's images/s as metrics, the
table, chart and page as artifacts) and a child run per rung and what-if. Training rungs are
children made by bench's own run (bench.app.run with the parent's id); the loader, storage and
all-reduce rungs get theirs here."""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

from bench.config import BenchConfig
from bench.doctor.figures import Diagnosis, Rung

log = logging.getLogger("bench.doctor")


def open_parent(config: BenchConfig, launch_dir: Path, overrides: Sequence[str], params: Dict[str, Any]) -> Any:
    """The parent run's tracker, opened as a run's (bench.tracking.tracker.open_run: inactive with
    tracking off, or when the store did not answer), tagged as the doctor's."""
    from bench.tracking.tracker import open_run

    name = f"doctor-{time.strftime('%Y%m%d-%H%M%S')}"
    parent = open_run(config.tracking, launch_dir, name, {**params, "overrides": " ".join(overrides)}, {}, overrides)
    parent.set_tags({"doctor": "parent"})
    return parent


def numbers(figures: Dict[str, Any], prefix: str = "") -> Dict[str, float]:
    flat: Dict[str, float] = {}
    for key, value in figures.items():
        if isinstance(value, dict):
            flat.update(numbers(value, f"{prefix}{key}_"))
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            flat[f"{prefix}{key}"] = float(value)
    return flat


def log_rung(parent: Any, config: BenchConfig, rung: Rung) -> None:
    """A rung's child run: made here for the rungs bench.app did not run, tagged in either case."""
    from bench.tracking.tracker import Tracker

    if not parent.active:
        return
    tags = {"doctor.rung": rung.name, "doctor.title": rung.title}
    if rung.skipped:
        tags["doctor.skipped"] = rung.skipped
    if rung.run_id:  # a training rung: bench's run, already a child
        Tracker(parent.client, rung.run_id, parent.uri).set_tags(tags)
        return
    child = Tracker.start(
        parent.uri, config.tracking.experiment, f"doctor-{rung.name}", tags, parent_run_id=parent.run_id
    )
    rate = {} if rung.images_per_second is None else {"images_per_second": rung.images_per_second}
    child.log_metrics({**numbers(rung.figures_json()), **rate})
    child.finish("FAILED" if rung.failed else "FINISHED", error=rung.failed or None)
    rung.run_id = child.run_id


def close_parent(parent: Any, diagnosis: Diagnosis, files: List[Path], status: str = "FINISHED") -> Optional[str]:
    """Its figures, tags and files; the UI link to its children."""
    if not parent.active:
        return None
    metrics = {f"{r.name}_images_per_second": r.images_per_second for r in diagnosis.rungs if r.images_per_second}
    for what_if in diagnosis.what_ifs:
        if what_if.gain:
            metrics[f"what_if_gain_{_metric_name(what_if.name)}"] = what_if.gain
    parent.log_metrics({**metrics, "doctor_seconds": diagnosis.elapsed_s})
    parent.set_tags({"doctor.verdict": diagnosis.verdict, "doctor.sentence": diagnosis.sentence})
    parent.log_artifacts(files)
    parent.finish(status, error=None if status == "FINISHED" else diagnosis.sentence)
    link: Optional[str] = parent.ui_link(children=True)
    return link


def _metric_name(text: str) -> str:
    return "".join(c if c.isalnum() or c in "_-." else "_" for c in text)
