"""What a sweep job needs to log as a child of its sweep (bench.tracking.sweep.current_job, the
doctor's training rungs), as a typed record: torch-free and hydra-free, passed from the app to
the tracker."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Union


@dataclass(frozen=True)
class SweepJob:
    job: Union[int, str]  # Hydra's job number (the doctor's: its rung's job name, "1-compute")
    dir: str  # the sweep's directory (the doctor's: its output directory)
    parent_run_id: Optional[str] = None  # the sweep's MLflow parent run (None: not tracked)
    launch_dir: Optional[str] = None  # the directory the sweep started in (a job on another node)
    tracking_down: Optional[str] = None  # why the sweep's one probe found no tracking server
