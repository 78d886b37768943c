"""Scaling: how much faster a configuration runs on N processes than on one (and, below, which
DataLoader worker count a worker sweep picks).

Runs that differ only in their process count (or in where they wrote things) share a
configuration key and form a group; when the group has a finished 1-process run,
speedup = throughput_N / throughput_1 and scaling efficiency = speedup / N. With
distributed.scaling=weak the per-process batch is fixed (global batch grows with N); with
strong, data.batch_size is the global batch and is split over the processes.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Tuple

import pandas as pd

from bench.analysis.cells import absent
from bench.analysis.runs import CONFIG_PREFIX, config_of, sweep_report_class, swept_keys

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


# ---- A DataLoader worker sweep (`-m data.num_workers=0,2,4,8`): throughput and data wait against the
# worker count, and the pick: the smallest count within 5% of the best throughput (more workers
# cost cores and memory for no measured gain). One pick per combination of the sweep's other swept
# keys (a worker sweep at two batch sizes gives two picks).
WORKERS = CONFIG_PREFIX + "data.num_workers"
WITHIN = 0.05  # a worker count within 5% of the best throughput is as good


@dataclass(frozen=True)
class Point:
    workers: int
    images_per_second: float
    data_wait_percent: Optional[float]


@dataclass(frozen=True)
class WorkerPick:
    group: str  # the other swept keys' values ("" when the workers are all that was swept)
    points: Tuple[Point, ...]  # by worker count
    best: Point
    pick: Point

    def sentence(self) -> str:
        where = f" ({self.group})" if self.group else ""
        wait = f", data wait {self.pick.data_wait_percent:.1f}%" if self.pick.data_wait_percent is not None else ""
        return (
            f"data.num_workers{where}: {self.pick.workers} is the smallest count within {100 * WITHIN:g}% of the "
            f"best ({self.best.workers} workers: {self.best.images_per_second:.1f} images/s); "
            f"{self.pick.workers} gives {self.pick.images_per_second:.1f} images/s{wait}"
        )


def _count(value: Any) -> Optional[int]:
    """A worker count from a frame cell (config values are strings there: "4"; "None" is the default)."""
    try:
        return None if absent(value) else int(str(value))
    except ValueError:
        return None


def worker_picks(frame: pd.DataFrame) -> List[WorkerPick]:
    """A pick per group of finished runs that tried two or more worker counts; [] for other sweeps."""
    if WORKERS not in frame or len({_count(v) for v in frame[WORKERS]} - {None}) < 2:
        return []  # not a worker sweep
    view = sweep_report_class(frame).view
    figure = view.sample.figure  # the runs' figure, as their report class names it
    wait_column = view.scaling.wait_fraction if view.scaling else None  # the window's share waiting for data
    others = [c for c in swept_keys(frame) if c != WORKERS]
    groups: Dict[str, List[Point]] = {}
    for row in frame.to_dict("records"):
        workers = _count(row.get(WORKERS))
        if row.get("status") != "FINISHED" or workers is None or absent(row.get(figure)):
            continue
        wait: Any = row.get(wait_column) if wait_column else None
        point = Point(workers, float(row[figure]), None if wait is None or absent(wait) else 100.0 * float(wait))
        group = " ".join(f"{c[len(CONFIG_PREFIX) :]}={row.get(c)}" for c in others)
        groups.setdefault(group, []).append(point)
    picks = []
    for group, points in sorted(groups.items()):
        if len({p.workers for p in points}) < 2:
            continue
        points.sort(key=lambda p: p.workers)
        best = max(points, key=lambda p: p.images_per_second)
        pick = next(p for p in points if p.images_per_second >= (1 - WITHIN) * best.images_per_second)
        picks.append(WorkerPick(group, tuple(points), best, pick))
    return picks


def plot_workers(picks: List[WorkerPick], out: Path, title: str) -> List[Path]:
    """throughput_vs_workers.png: images/s (left axis) and data wait % (right axis) per worker count,
    the pick circled; none without a pick."""
    if not picks:
        return []
    from bench.analysis.plots import Figures

    figures = Figures(out)
    fig, ax = figures.new()
    wait_ax: Any = ax.twinx()
    counts = sorted({p.workers for pick in picks for p in pick.points})
    for pick in picks:
        label = pick.group or "images/s"
        ax.plot([p.workers for p in pick.points], [p.images_per_second for p in pick.points], marker="o", label=label)
        circled = f"the pick: {pick.pick.workers} workers"  # a circle round its point, no line
        ax.plot(pick.pick.workers, pick.pick.images_per_second, "o", ms=14, fillstyle="none", color="k", label=circled)
        if waits := [(p.workers, p.data_wait_percent) for p in pick.points if p.data_wait_percent is not None]:
            wait_ax.plot([w for w, _ in waits], [p for _, p in waits], "x--", alpha=0.6, label=f"data wait % ({label})")
    ax.set(
        title=f"Throughput and data wait vs loader workers ({title})",
        xlabel="data.num_workers",
        ylabel="Throughput (images/s)",
    )
    wait_ax.set_ylabel("Data wait (% of the window)")
    ax.set_xticks(counts, [str(c) for c in counts])
    ax.set_ylim(0, max(p.images_per_second for pick in picks for p in pick.points) * 1.15)
    wait_ax.set_ylim(0, 100)
    ax.grid(True, alpha=0.3)
    (handles, labels), (wait_handles, wait_labels) = ax.get_legend_handles_labels(), wait_ax.get_legend_handles_labels()
    ax.legend(handles + wait_handles, labels + wait_labels, fontsize=8, loc="lower right")  # both axes' lines
    figures.save(fig, "throughput_vs_workers.png")
    return figures.written
