"""Summary statistics shared by every report: percentiles and step-time spread.

A figure with no samples behind it is None (reported as absent), never 0.0.
"""

from __future__ import annotations

import math
from typing import Any, Dict, Optional, Sequence

UNSTABLE_CV = 0.2  # step-time coefficient of variation above which a result is flagged


def percentile(values: Sequence[float], q: float) -> Optional[float]:
    """Linear-interpolated percentile (numpy's default method); q in [0, 100]. None without values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100.0
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def mean(values: Sequence[float]) -> Optional[float]:
    return sum(values) / len(values) if values else None


def rate(amount: float, seconds: float) -> Optional[float]:
    """amount / seconds, or None when no time was measured."""
    return amount / seconds if seconds > 0 else None


def on_its_side(value: float, threshold: float, places: int) -> str:
    """`value` to `places` decimals, or to as many more as show which side of `threshold` it is on (a
    ratio of 0.9796 against a gate of 0.98 is "0.980" to 3 places, as if it met it: "0.9796")."""

    def side(x: float) -> int:
        return (x > threshold) - (x < threshold)

    shown = next((p for p in range(places, places + 8) if side(round(value, p)) == side(value)), 17)
    return f"{value:.{shown}f}"


def step_time_stats(times_ms: Sequence[float]) -> Dict[str, Any]:
    """Mean, percentiles, min/max, std and coefficient of variation of step times ({} without any):
    the step-time fields of a training record (bench.train.result.TrainMetrics), by name."""
    if not times_ms:
        return {}
    average = sum(times_ms) / len(times_ms)
    std = math.sqrt(sum((t - average) ** 2 for t in times_ms) / len(times_ms))
    return {
        "step_time_ms_mean": average,
        "step_time_ms_p50": percentile(times_ms, 50),
        "step_time_ms_p95": percentile(times_ms, 95),
        "step_time_ms_p99": percentile(times_ms, 99),
        "step_time_ms_min": min(times_ms),
        "step_time_ms_max": max(times_ms),
        "step_time_ms_std": std,
        "step_time_cv": std / average if average else 0.0,
    }
