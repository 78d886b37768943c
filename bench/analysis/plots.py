"""The sweep plots (PNG, matplotlib's Agg backend: no display needed).

Each scenario's report class picks its plots (sweep_plots, in bench/<scenario>/sweep_view.py).
Training sweeps: throughput and scaling efficiency vs process count, throughput vs batch
size (error bars from the slowest to the fastest window where jobs ran benchmark.repeats > 1),
the step-time distribution of every run (per-batch latency for inference sweeps), and (when
some job evaluated) validation accuracy against wall time, a line per job. Storage sweeps: throughput and accelerator
utilization vs client count, and the per-request read latency of every run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

import pandas as pd

from bench.analysis.runs import absent, shown

Row = Dict[str, Any]


_shown = shown


def points_by_series(frame: pd.DataFrame, x: str, group: Sequence[str]) -> Iterator[Tuple[str, List[Row]]]:
    """One line per combination of `group` values (sorted by label), its finished runs sorted by `x`."""
    lines: Dict[str, List[Tuple[float, Row]]] = {}
    for row in frame.to_dict("records"):
        if row["status"] != "FINISHED" or absent(row.get(x)):
            continue
        label = ", ".join(f"{g.replace('_', ' ')}={_shown(row.get(g), '?')}" for g in group)
        lines.setdefault(label, []).append((float(row[x]), row))
    for label, points in sorted(lines.items()):
        yield label, [row for _, row in sorted(points, key=lambda p: p[0])]


def draw_line(ax: Any, points: List[Row], x: str, y: str, label: str) -> None:
    """A line through the points that have `y` (runs recorded before a figure existed lack it);
    images/s of runs with benchmark.repeats get error bars from the slowest to the fastest repeat
    (the spread, not the interval)."""
    points = [p for p in points if not absent(p.get(y))]
    if not points:
        return
    xs, ys = [float(p[x]) for p in points], [float(p[y]) for p in points]
    spread = [(p.get(f"{y}_min"), p.get(f"{y}_max")) for p in points]
    if y == "images_per_second" and any(not absent(low) for low, _ in spread):
        below = [
            0.0 if low is None or absent(low) else max(0.0, v - float(low))
            for v, (low, _) in zip(ys, spread, strict=True)
        ]
        above = [
            0.0 if high is None or absent(high) else max(0.0, float(high) - v)
            for v, (_, high) in zip(ys, spread, strict=True)
        ]
        ax.errorbar(xs, ys, yerr=[below, above], marker="o", capsize=4, label=f"{label} (bars: repeats' min-max)")
        return
    ax.plot(xs, ys, marker="o", label=label)


def _count_unit(frame: pd.DataFrame) -> Tuple[str, str]:
    """('GPUs', 'GPU') when every finished run ran on CUDA, else CPU ranks may be in the mix."""
    finished = frame[frame["status"].eq("FINISHED")]
    devices = {str(_shown(d)) for d in finished.get("device", pd.Series([""] * len(finished), dtype=object))}
    return ("GPUs", "GPU") if devices == {"cuda"} else ("processes (GPUs, or CPU ranks)", "process")


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _swept(frame: pd.DataFrame, x: str) -> List[float]:
    """The distinct values of `x` among the finished runs, sorted: the ticks of that axis."""
    finished = frame[frame["status"].eq("FINISHED")]
    return sorted({float(v) for v in finished.get(x, pd.Series([], dtype=object)) if not absent(v)})


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


def wrap_titles(fig: Any, width: int = 72) -> None:
    """A title names the sweep's directory, often wider than the plot: wrapped, never cut."""
    import textwrap

    for ax in fig.axes:
        if ax.get_title():
            ax.set_title(textwrap.fill(ax.get_title(), width), fontsize=10)


class Figures:
    """Hands out a fresh figure and saves it under `out`, remembering what was written."""

    def __init__(self, out: Path):
        self.plt, self.out, self.written = _pyplot(), out, []  # type: ignore[var-annotated]

    def new(self, width: float = 7) -> Tuple[Any, Any]:
        return self.plt.subplots(figsize=(width, 4.5))

    def save(self, fig: Any, name: str) -> None:
        wrap_titles(fig)
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


def plot_training(
    frame: pd.DataFrame, out: Path, title: str, timeline: Tuple[str, str, str], run_label: Callable[[Row], str]
) -> List[Path]:
    """A training (or inference) sweep: throughput and scaling efficiency vs process count, throughput
    vs batch, the timeline of each run (`timeline`: what it is, its unit label, its file name)."""
    figures = Figures(out)
    unit, count_word = _count_unit(frame)
    by_processes = list(points_by_series(frame, "world_size", ["precision", "batch_size"]))

    # an axis is drawn only when the sweep has at least two values on it (issue 21): a batch-size
    # sweep draws no "vs processes" plot, a process-count sweep no "vs batch" plot
    processes = _swept(frame, "world_size")
    if len(processes) >= 2:
        fig, ax = figures.new()
        for label, points in by_processes:
            draw_line(ax, points, "world_size", "images_per_second", label)
        ax.set(
            title=f"Throughput vs {count_word} count ({title})",
            xlabel=f"Number of {unit}",
            ylabel="Throughput (images/s, all processes)",
        )
        finish_axes(ax, processes)
        figures.save(fig, "throughput_vs_gpus.png")

        fig, ax = figures.new()
        plotted = False
        for label, points in by_processes:
            points = [p for p in points if not absent(p.get("scaling_efficiency_percent"))]
            if points:
                plotted = True
                draw_line(
                    ax,
                    points,
                    "world_size",
                    "scaling_efficiency_percent",
                    f"{label} ({_shown(points[0].get('scaling'), 'weak')} scaling)",
                )
        ax.axhline(100.0, color="grey", linestyle="--", linewidth=1, label="ideal (100%)")
        ax.set(
            title=f"Scaling efficiency vs {count_word} count ({title})",
            xlabel=f"Number of {unit}",
            ylabel="Scaling efficiency (%) = T_N / (N x T_1)",
        )
        if not plotted:
            ax.text(
                0.5,
                0.5,
                "no 1-process run of the same configuration in this sweep",
                transform=ax.transAxes,
                ha="center",
                va="center",
            )
        finish_axes(ax, processes)
        figures.save(fig, "scaling_efficiency.png")

    batches = _swept(frame, "batch_size")
    if len(batches) >= 2:
        fig, ax = figures.new()
        for label, points in points_by_series(frame, "batch_size", ["precision", "world_size"]):
            draw_line(ax, points, "batch_size", "images_per_second", label)
        ax.set(
            title=f"Throughput vs batch size ({title})",
            xlabel="Batch size per process (images)",
            ylabel="Throughput (images/s, all processes)",
        )
        finish_axes(ax, batches)
        figures.save(fig, "throughput_vs_batch.png")

    what, ylabel, name = timeline
    draw_distribution(figures, frame, f"{what} per run ({title})", ylabel, name, run_label)
    plot_accuracy(figures, frame, title)
    return figures.written


def plot_accuracy(figures: Figures, frame: pd.DataFrame, title: str) -> None:
    """accuracy_vs_time.png: val top-1 against seconds since each job's first training step, a
    line per job that evaluated, and the target as a dashed line when every such job had the same one."""
    rows = [r for r in frame.to_dict("records") if isinstance(r.get("val_curve"), list) and r["val_curve"]]
    if not rows:
        return
    fig, ax = figures.new(8)
    for row in rows:
        overrides = str(_shown(row.get("overrides")))  # the swept ones only (keep_varying_overrides)
        label = f"job {row['job']}" + (f": {overrides[:60]}" if overrides else "")
        ax.plot(
            [p[0] for p in row["val_curve"]], [p[1] for p in row["val_curve"]], marker="o", markersize=3, label=label
        )
    targets = [row.get("target_accuracy") for row in rows]
    if all(not absent(t) for t in targets) and len({float(t) for t in targets}) == 1:
        ax.axhline(
            float(targets[0]), color="grey", linestyle="--", linewidth=1, label=f"target ({float(targets[0]):g})"
        )
    ax.set(
        title=f"Validation accuracy vs wall time ({title})",
        xlabel="Seconds since the job's first training step",
        ylabel="Validation top-1 accuracy",
    )
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_xlim(left=0)
    ax.set_ylim(0, 1.02)
    figures.save(fig, "accuracy_vs_time.png")


def plot_all(frame: pd.DataFrame, out: Path, title: str) -> List[Path]:
    """The plots the sweep's report class draws (bench.analysis.render.sweep_report_class), written into `out`."""
    from bench.analysis.render import sweep_report_class

    return list(sweep_report_class(frame).view.plots(frame, out, title))
