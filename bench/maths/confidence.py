"""How sure a throughput is: the spread of repeated windows, bootstrap confidence intervals, and
the ratio of two configurations with its interval (bench.tools.compare).

The 95% intervals are percentile bootstraps (10,000 resamples, a fixed seed, so the same
figures give the same interval): of the MEDIAN of the repeats' throughputs for one run, and of
the ratio of two such medians for a comparison. With one repeat the samples are the step times
and the statistic is the pooled throughput (images / summed step time, the way the window's
images/s is defined); step times are correlated (a slow phase lasts several steps), so that
interval is narrower than the truth: repeats are the honest way to a verdict.

Small samples: a bootstrap of 3 values cannot reach beyond them, so with few repeats the
interval is close to [min, max] and under-covers; 5 or more repeats are advised.
"""

from __future__ import annotations

import math
from statistics import NormalDist
from typing import Callable, Optional, Sequence, Tuple, TypedDict

import numpy as np

RESAMPLES = 10_000
LEVEL = 0.95
SEED = 0
STABLE_CV = 0.03  # `stable`: the repeats' throughputs have a coefficient of variation at most this (3%)
CHUNK = 4_000_000  # resampled values per numpy block: bounded memory for long step timelines

Statistic = Callable[[np.ndarray], np.ndarray]  # rows of resampled values -> one figure per row


def median_rows(rows: np.ndarray) -> np.ndarray:
    return np.median(rows, axis=1)


def bootstrap(
    values: Sequence[float] | np.ndarray,
    statistic: Statistic = median_rows,
    resamples: int = RESAMPLES,
    seed: int = SEED,
) -> np.ndarray:
    """`statistic` of `resamples` resamples (with replacement, the sample's own size) of `values`."""
    data = np.asarray(values, dtype=float)
    rng = np.random.default_rng(seed)
    per_block = max(1, CHUNK // max(1, len(data)))
    out = [
        statistic(data[rng.integers(0, len(data), size=(min(per_block, resamples - done), len(data)))])
        for done in range(0, resamples, per_block)
    ]
    return np.concatenate(out)


def interval(estimates: np.ndarray, level: float = LEVEL) -> Tuple[float, float]:
    tail = (1.0 - level) / 2.0 * 100.0
    low, high = np.percentile(estimates, [tail, 100.0 - tail])
    return float(low), float(high)


class RepeatFigures(TypedDict, total=False):
    """repeat_figures' figures: the repeat fields of a training or inference record, by name."""

    repeats: int
    images_per_second_median: float
    images_per_second_min: float
    images_per_second_max: float
    images_per_second_iqr: float
    images_per_second_ci95_low: float
    images_per_second_ci95_high: float
    images_per_second_ci95_halfwidth_pct: Optional[float]
    images_per_second_cv: float
    stable: bool


def repeat_figures(throughputs: Sequence[float]) -> RepeatFigures:
    """The figures of N repeated windows ({} for fewer than 2): median, min/max, IQR, the 95%
    bootstrap interval of the median, the coefficient of variation and `stable` (cv <= 3%)."""
    if len(throughputs) < 2:
        return {}
    values = np.asarray(throughputs, dtype=float)
    median = float(np.median(values))
    low, high = interval(bootstrap(values))
    q1, q3 = np.percentile(values, [25, 75])
    cv = float(values.std(ddof=1) / values.mean()) if values.mean() > 0 else math.inf
    return {
        "repeats": len(values),
        "images_per_second_median": median,
        "images_per_second_min": float(values.min()),
        "images_per_second_max": float(values.max()),
        "images_per_second_iqr": float(q3 - q1),
        "images_per_second_ci95_low": low,
        "images_per_second_ci95_high": high,
        "images_per_second_ci95_halfwidth_pct": 100.0 * (high - low) / 2.0 / median if median else None,
        "images_per_second_cv": cv,
        "stable": cv <= STABLE_CV,
    }


def pooled_rate_rows(images_per_step: float) -> Statistic:
    """Throughput of resampled step times (ms): images of those steps / their summed seconds."""
    return lambda rows: images_per_step * rows.shape[1] / (rows.sum(axis=1) / 1000.0)


def ratio_interval(baseline: np.ndarray, candidate: np.ndarray) -> Tuple[float, float]:
    """The interval of candidate / baseline from two independent bootstrap distributions."""
    return interval(candidate / baseline)


def repeats_needed(cv: float, threshold: float, level: float = LEVEL) -> Optional[int]:
    """Repeats per side for the 95% interval of a ratio of two medians to be about +-threshold,
    given the window-to-window coefficient of variation `cv` (normal approximation: the median's
    standard error is 1.2533 sigma / sqrt(N), and the ratio adds the two sides' variances)."""
    if threshold <= 0 or not math.isfinite(cv):
        return None
    z = NormalDist().inv_cdf(0.5 + level / 2.0)
    return max(2, math.ceil((z * 1.2533 * math.sqrt(2.0) * cv / threshold) ** 2))
