"""Moved to bench.runtime.peaks (issue 19, part 3). Kept only while bench/train/report.py and
bench/infer/report.py, reshaped by part 1 of that issue, still import it from here: when they
import bench.runtime.peaks, delete this file (tests/unit/test_layout.py lists it as pending)."""

from bench.runtime.peaks import utilisation

__all__ = ["utilisation"]
