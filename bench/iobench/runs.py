"""storage.runs / storage.warmup_runs: MLPerf's harness around the read phase. Warm-up runs are
run and dropped; the measured runs' figures are merged: rates and percents are the mean over
runs (MLPerf: "A benchmark result is the mean of 5 run results"), counts add up, minima and
maxima stay minima and maxima, latency percentiles are taken again over every request of every
run, pass flags are decided again on the merged figures; the spread of samples/s over the runs
is reported beside them. Each run draws a new shuffle seed, and the page cache is dropped for the
dataset's files between runs where the store allows it.
"""

from __future__ import annotations

from typing import Any, Dict, List, Sequence

from bench.analysis.stats import mean, percentile
from bench.iobench.measured import ReaderResult

SUMMED = ("read_samples", "read_bytes", "read_requests", "read_steps")
LATENCY = {"latency_ms_p50": 50, "latency_ms_p90": 90, "latency_ms_p99": 99}


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


def merge_runs(per_run: Sequence[Dict[str, Any]], results: Sequence[ReaderResult]) -> Dict[str, Any]:
    """One set of figures from the measured runs' (`per_run`, in order; `results` of all of them)."""
    if len(per_run) == 1:
        return dict(per_run[0])
    merged: Dict[str, Any] = {}
    for key in per_run[-1]:
        values = [m[key] for m in per_run if key in m]
        numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)
        merged[key] = _merged(key, values) if numbers and len(values) == len(per_run) else per_run[-1][key]
    latencies = [q.latency_ms for r in results for q in r.requests]
    for key, q in LATENCY.items():
        if key in merged:
            merged[key] = percentile(latencies, q)
    if "latency_ms_mean" in merged:
        merged["latency_ms_mean"] = mean(latencies)
    if "au_pass" in merged:
        merged["au_pass"] = all(m["au_pass"] for m in per_run)  # strict: every run's slowest epoch passes
    if "mlperf_au_percent" in merged:
        merged["mlperf_au_pass"] = merged["mlperf_au_percent"] >= merged["au_threshold_percent"]
    rates = [m["mlperf_samples_per_second"] for m in per_run if "mlperf_samples_per_second" in m]
    if len(rates) == len(per_run) and mean(rates):
        merged["runs_samples_per_second_spread_percent"] = 100.0 * (max(rates) - min(rates)) / mean(rates)
    return merged


def run_rows(per_run: Sequence[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """runs.csv: the headline figures of each measured run."""
    keys = ("mlperf_samples_per_second", "mlperf_mib_per_second", "mlperf_au_percent", "samples_per_second",
            "read_mb_per_second", "au_percent_min", "latency_ms_p99", "checkpoint_store_write_gbps",
            "checkpoint_store_read_gbps")
    return [{"run": i, **{k: m.get(k, "") for k in keys}} for i, m in enumerate(per_run)]
