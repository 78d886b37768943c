"""A DataLoader worker sweep (`-m data.num_workers=0,2,4,8`): throughput and data wait against the
worker count, and the pick: the smallest count within 5% of the best throughput (more workers
cost cores and memory for no measured gain). One pick per combination of the sweep's other swept
keys (a worker sweep at two batch sizes gives two picks)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple

from bench.analysis.cells import absent
from bench.analysis.runs import CONFIG_PREFIX, sweep_report_class, swept_keys

if TYPE_CHECKING:
    import pandas as pd

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


def worker_picks(frame: "pd.DataFrame") -> List[WorkerPick]:
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
