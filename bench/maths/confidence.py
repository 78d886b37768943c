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
from typing import Callable, Optional, Sequence, Tuple

import numpy as np

RESAMPLES = 10_000
LEVEL = 0.95
SEED = 0
STABLE_CV = 0.03  # `stable` (bench.results.RepeatFigures): the repeats' throughputs vary by at most this (cv, 3%)
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
