"""Scaling: how much faster a configuration runs on N processes than on one.

Runs that differ only in their process count (or in where they wrote things) share a
configuration key and form a group; when the group has a finished 1-process run,
speedup = throughput_N / throughput_1 and scaling efficiency = speedup / N. With
distributed.scaling=weak the per-process batch is fixed (global batch grows with N); with
strong, data.batch_size is the global batch and is split over the processes.
"""

from __future__ import annotations

from typing import Any, Mapping

import pandas as pd

from bench.analysis.runs import config_of, sweep_report_class

# Keys that say how many processes ran, or where things went: not part of "the same configuration".
NOT_CONFIGURATION = (
    "distributed.nproc_per_node",
    "distributed.nnodes",
    "distributed.name",
    "distributed.node_rank",
    "distributed.rdzv_endpoint",
    "tracking.",
    "storage.root",
)
SUPERLINEAR = "superlinear"  # a speedup above the process count: said in its own word, plot and note


def configuration_key(row: Mapping[str, Any]) -> tuple:
    """What a run measured, minus process counts and locations: equal keys, comparable runs."""
    return tuple(sorted((k, v) for k, v in config_of(row).items() if not k.startswith(NOT_CONFIGURATION)))


def configuration_keys(frame: pd.DataFrame) -> pd.Series:
    """configuration_key of every row, as a column to group by."""
    return pd.Series([configuration_key(row) for _, row in frame.iterrows()], index=frame.index, dtype=object)


def _numbers(frame: pd.DataFrame, column: str) -> pd.Series:
    """A figure as floats, NaN where a run does not have it."""
    if column not in frame:
        return pd.Series(float("nan"), index=frame.index)
    return pd.to_numeric(frame[column], errors="coerce").astype(float)


def add_scaling(frame: pd.DataFrame) -> pd.DataFrame:
    """A copy of the frame with data_wait_percent, and, where the configuration has a finished
    1-process run, speedup and scaling_efficiency (a fraction and a percentage) against it.
    A run without the figure behind one of these gets none (missing), never 0."""
    scaled = frame.copy()
    scaling = sweep_report_class(frame).view.scaling if len(frame) else None  # which figures: its scenario's
    if scaling is None:
        return scaled
    finished = scaled["status"].eq("FINISHED")
    processes = _numbers(scaled, scaling.processes)
    throughput = _numbers(scaled, scaling.throughput)
    baseline_throughput = throughput.where(finished & processes.eq(1))
    # the group's 1-process throughput on every row of the group (the last one if it ran twice)
    baseline = baseline_throughput.groupby(configuration_keys(scaled).map(repr)).transform("last")
    speedup = (throughput / baseline).where(finished & baseline.notna() & baseline.ne(0))
    wait = scaling.wait_fraction
    wait_percent = (100.0 * _numbers(scaled, wait)).where(finished) if wait else pd.Series(float("nan"), scaled.index)
    figures = {
        "data_wait_percent": wait_percent,
        "speedup": speedup,
        "scaling_efficiency": speedup / processes,
        "scaling_efficiency_percent": 100.0 * speedup / processes,
    }
    for name, values in figures.items():
        scaled[name] = values.astype(object).where(values.notna(), None)
    return scaled


def superlinear_note(frame: pd.DataFrame) -> str:
    """A line naming the jobs that ran more than N times their 1-process run on N processes; "" if none."""
    said = [  # speedup / efficiency = the processes: above 1 (a 1-process run is its own baseline)
        f"job {r['job']}: {r['speedup']:.2f}x on {r['speedup'] / r['scaling_efficiency']:.0f} "
        f"({100 * r['scaling_efficiency']:.0f}% efficiency)"
        for r in frame.to_dict("records")
        if r.get("scaling_efficiency") and r["speedup"] > r["scaling_efficiency"] > 1
    ]
    if not said:
        return ""
    return (
        f"warning: {SUPERLINEAR} scaling, a speedup above the process count ({'; '.join(said)}): more than the "
        "processes can give, so the 1-process run was slowed or the machine's load changed; not a scaling figure"
    )
