"""Report pieces the model scenarios (training, inference) share: the profiler's files, the input
pipeline's figures (AU, input_bound) and repeats.csv, the file of benchmark.repeats' windows."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List, Sequence

from bench.results import read_column, write_csv

PROFILE_FILES = ("trace_rank0.json", "profile_top_ops.txt")  # bench.runtime.profiling writes them
AU_THRESHOLD = 0.90  # accelerator utilization below which a run is input-bound (MLPerf Storage's ResNet-50 bar)
# benchmark.repeats > 1: a row per measured window, and its MLflow series (step = repeat)
REPEATS_FILE, REPEATS_METRIC = "repeats.csv", "repeat_images_per_second"


def input_pipeline(data_wait_fraction: float) -> Dict[str, Any]:
    """Accelerator utilization au = the share of the measured window not spent waiting for data
    (compute time / wall time, as MLPerf Storage defines AU); input_bound when au < 0.90."""
    au = min(1.0, max(0.0, 1.0 - data_wait_fraction))
    return {"au": au, "input_bound": au < AU_THRESHOLD}


def write_repeats(out_dir: Path, images: Sequence[int], seconds: Sequence[float], rates: Sequence[float]) -> Path:
    """repeats.csv: a row per measured window (rates: the job's images/s, all ranks)."""
    # training's rates count the windows every rank measured, which may be fewer than rank 0's
    windows = zip(images, seconds, rates, strict=False)
    rows = [(i, n, f"{s:.6f}", f"{r:.4f}") for i, (n, s, r) in enumerate(windows, start=1)]
    return write_csv(out_dir / REPEATS_FILE, ["repeat", "images", "seconds", "images_per_second"], rows)


def read_repeats(job_dir: Path) -> List[float]:
    """images/s of each measured window a finished run wrote ([] with one window)."""
    return read_column(job_dir / REPEATS_FILE, "images_per_second")
