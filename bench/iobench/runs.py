"""storage.runs / storage.warmup_runs: MLPerf's harness around the read phase. Warm-up runs are
run and dropped; the measured runs' figures are merged: rates and percents are the mean over
runs (MLPerf: "A benchmark result is the mean of 5 run results"), counts add up, minima and
maxima stay minima and maxima, latency percentiles are taken again over every request of every
run, pass flags are decided again on the merged figures; the spread of samples/s over the runs
is reported beside them. Each run draws a new shuffle seed, and the page cache is dropped for the
dataset's files between runs where the store allows it.
"""

from __future__ import annotations

from dataclasses import fields, replace
from typing import Any, Dict, List, Sequence

from bench.iobench.measured import ReaderResult
from bench.iobench.result import RunFigures
from bench.maths.stats import mean, percentile

SUMMED = ("read_samples", "read_bytes", "read_requests", "read_steps")
LATENCY = {"latency_ms_p50": 50, "latency_ms_p90": 90, "latency_ms_p99": 99}
# runs.csv: the headline figures of each measured run
RUN_COLUMNS = (
    "mlperf_samples_per_second",
    "mlperf_mib_per_second",
    "mlperf_au_percent",
    "samples_per_second",
    "read_mb_per_second",
    "au_percent_min",
    "latency_ms_p99",
    "checkpoint_store_write_gbps",
    "checkpoint_store_read_gbps",
)


def _merged(key: str, values: List[Any]) -> Any:
    if key in SUMMED:
        return sum(values)
    if all(v == values[0] for v in values):  # a setting or a count every run shares (checkpoint_count)
        return values[0]
    if key.endswith("_min"):
        return min(values)
    if key.endswith("_max"):
        return max(values)
    return mean(values)


def merge_runs(per_run: Sequence[RunFigures], results: Sequence[ReaderResult]) -> RunFigures:
    """One set of figures from the measured runs' (`per_run`, in order; `results` of all of them):
    each figure the last run has, merged over the runs (field by field, whatever the figure)."""
    if len(per_run) == 1:
        return replace(per_run[0])
    merged = RunFigures()
    for f in fields(RunFigures):
        last = getattr(per_run[-1], f.name)
        if last is None:
            continue
        values = [value for m in per_run if (value := getattr(m, f.name)) is not None]
        numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)
        setattr(merged, f.name, _merged(f.name, values) if numbers and len(values) == len(per_run) else last)
    latencies = [q.latency_ms for r in results for q in r.requests]
    for key, q in LATENCY.items():
        if getattr(merged, key) is not None:
            setattr(merged, key, percentile(latencies, q))
    if merged.latency_ms_mean is not None:
        merged.latency_ms_mean = mean(latencies)
    if merged.au_pass is not None:
        merged.au_pass = all(m.au_pass for m in per_run)  # strict: every run's slowest epoch passes
    if merged.mlperf_au_percent is not None and merged.au_threshold_percent is not None:
        merged.mlperf_au_pass = merged.mlperf_au_percent >= merged.au_threshold_percent
    rates = [m.mlperf_samples_per_second for m in per_run if m.mlperf_samples_per_second is not None]
    if len(rates) == len(per_run) and (average := mean(rates)):
        merged.runs_samples_per_second_spread_percent = 100.0 * (max(rates) - min(rates)) / average
    return merged


def run_rows(per_run: Sequence[RunFigures]) -> List[Dict[str, Any]]:
    """runs.csv: the headline figures of each measured run (an empty cell: none)."""
    return [
        {"run": i, **{k: v if (v := getattr(m, k)) is not None else "" for k in RUN_COLUMNS}}
        for i, m in enumerate(per_run)
    ]
