"""The sweep plots' tools (PNG, matplotlib's Agg backend: no display needed): figures, lines
through a sweep's runs, a box per run over its timeline, axes that hold every point.

Each scenario's report class draws its own plots with them (its `view.plots`): the model
scenarios' in bench/runtime/plots.py (throughput and scaling vs process count, vs batch, the
step-time or latency distribution) and bench/train/plots.py (validation accuracy against wall
time), the storage benchmark's in bench/iobench/report.py. Nothing here names a scenario's figure
but `draw_line`'s error bars for a figure with `<figure>_min`/`<figure>_max` beside it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

import pandas as pd

from bench.analysis.cells import absent, shown

Row = Dict[str, Any]


def points_by_series(frame: pd.DataFrame, x: str, group: Sequence[str]) -> Iterator[Tuple[str, List[Row]]]:
    """One line per combination of `group` values (sorted by label), its finished runs sorted by `x`."""
    lines: Dict[str, List[Tuple[float, Row]]] = {}
    for row in frame.to_dict("records"):
        if row["status"] != "FINISHED" or absent(row.get(x)):
            continue
        label = ", ".join(f"{g.replace('_', ' ')}={shown(row.get(g), '?')}" for g in group)
        lines.setdefault(label, []).append((float(row[x]), row))
    for label, points in sorted(lines.items()):
        yield label, [row for _, row in sorted(points, key=lambda p: p[0])]


def draw_line(ax: Any, points: List[Row], x: str, y: str, label: str) -> None:
    """A line through the points that have `y` (runs recorded before a figure existed lack it);
    a figure with `<y>_min`/`<y>_max` beside it (images/s of runs with benchmark.repeats) gets error
    bars from the slowest to the fastest repeat (the spread, not the interval)."""
    if not (points := [p for p in points if not absent(p.get(y))]):
        return
    xs, ys = [float(p[x]) for p in points], [float(p[y]) for p in points]
    spread: List[Tuple[Any, Any]] = [(p.get(f"{y}_min"), p.get(f"{y}_max")) for p in points]
    if any(not absent(low) for low, _ in spread):  # the repeats' spread (images/s of benchmark.repeats)
        below = [0.0 if absent(low) else max(0.0, v - float(low)) for v, (low, _) in zip(ys, spread, strict=True)]
        above = [0.0 if absent(high) else max(0.0, float(high) - v) for v, (_, high) in zip(ys, spread, strict=True)]
        ax.errorbar(xs, ys, yerr=[below, above], marker="o", capsize=4, label=f"{label} (bars: repeats' min-max)")
        return
    ax.plot(xs, ys, marker="o", label=label)


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def swept_values(frame: pd.DataFrame, x: str) -> List[float]:
    """The distinct values of `x` among the finished runs, sorted: the ticks of that axis."""
    finished = frame[frame["status"].eq("FINISHED")]
    return sorted({float(v) for v in finished.get(x, pd.Series([], dtype=object)) if not absent(v)})


def along_a_swept_axis(lines: Sequence[Tuple[str, List[Row]]], x: str) -> bool:
    """A plot against `x` is drawn only when some line has two or more values of `x`: an axis that
    moved while the rest of its configuration stayed (two lone points of two configurations are
    no sweep of that axis: a strong-scaling sweep's batch per process follows the process count)."""
    return any(len({float(p[x]) for p in points}) >= 2 for _, points in lines)


def finish_axes(ax: Any, ticks: Optional[Sequence[float]] = None) -> None:
    """Grid, legend, the swept values as the x ticks, and a y range from 0 to above the highest
    point or error bar (nothing clipped)."""
    ax.grid(True, alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8)
    if ticks:
        ax.set_xticks(list(ticks), [f"{t:g}" for t in ticks])
        pad = (max(ticks) - min(ticks)) * 0.08 or 0.5
        ax.set_xlim(min(ticks) - pad, max(ticks) + pad)
    else:
        from matplotlib.ticker import MaxNLocator

        ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # client counts are whole
        ax.set_xlim(left=0.5)
    tops = [y for line in ax.get_lines() for y in line.get_ydata() if y == y]
    tops += [seg[:, 1].max() for coll in ax.collections for seg in getattr(coll, "get_segments", lambda: [])()]
    ax.set_ylim(bottom=0, top=max([*tops, 1e-9]) * 1.12)


class Figures:
    """Hands out a fresh figure and saves it under `out`, remembering what was written."""

    def __init__(self, out: Path):
        self.plt, self.out, self.written = _pyplot(), out, []  # type: ignore[var-annotated]

    def new(self, width: float = 7) -> Tuple[Any, Any]:
        return self.plt.subplots(figsize=(width, 4.5))

    def save(self, fig: Any, name: str) -> None:
        import textwrap

        for ax in fig.axes:  # a title names the sweep's directory, often wider than the plot: wrapped, never cut
            if ax.get_title():
                ax.set_title(textwrap.fill(ax.get_title(), 72), fontsize=10)
        fig.tight_layout()
        path = self.out / name
        fig.savefig(path, dpi=110)
        self.plt.close(fig)
        self.written.append(path)


def draw_distribution(
    figures: Figures, frame: pd.DataFrame, what: str, ylabel: str, name: str, label: Callable[[Row], str]
) -> None:
    """A box per run over its timeline (step times or request latencies)."""
    with_values = [r for r in frame.to_dict("records") if isinstance(r["timeline"], list) and r["timeline"]]
    fig, ax = figures.new(max(7, 0.9 * len(with_values) + 2))
    if with_values:
        ax.boxplot([r["timeline"] for r in with_values], showfliers=True)
        ax.set_xticks(range(1, len(with_values) + 1))
        ax.set_xticklabels([label(r) for r in with_values], fontsize=8)
    else:
        ax.text(0.5, 0.5, "no per-step figures in this sweep", transform=ax.transAxes, ha="center", va="center")
    ax.set(title=what, xlabel="Run", ylabel=ylabel)
    ax.grid(True, axis="y", alpha=0.3)
    figures.save(fig, name)
