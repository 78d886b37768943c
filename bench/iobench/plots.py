"""A storage sweep's plots: read throughput and accelerator utilization vs client count (when the
sweep moved the client count), and the per-request read latency of every run (bench.iobench.report's
view picks them)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, List

import pandas as pd

from bench.analysis.cells import absent, shown
from bench.analysis.plots import (
    Figures,
    along_a_swept_axis,
    draw_distribution,
    draw_line,
    finish_axes,
    points_by_series,
)


def plot_storage(frame: pd.DataFrame, out: Path, title: str) -> List[Path]:
    """A storage sweep: throughput and AU vs client count, and per-request read latency."""
    figures = Figures(out)
    series = list(points_by_series(frame, "clients", ["workload", "storage"]))
    if along_a_swept_axis(series, "clients"):  # the client count was swept (a workload sweep at one count: no axis)
        _plot_by_clients(figures, frame, series, title)
    draw_distribution(
        figures,
        frame,
        f"Read latency per request ({title})",
        "Latency (ms)",
        "read_latency_distribution.png",
        lambda r: f"job {r['job']}\n{shown(r.get('clients'))} clients",
    )
    return figures.written


def _plot_by_clients(figures: Figures, frame: pd.DataFrame, series: List[Any], title: str) -> None:
    fig, ax = figures.new()
    for label, points in series:
        draw_line(ax, points, "clients", "mlperf_samples_per_second", f"{label} (MLPerf: first step in)")
        draw_line(ax, points, "clients", "samples_per_second", f"{label} (steady: warm-up step out)")
    ax.set(
        title=f"Read throughput vs clients ({title})",
        xlabel="Clients (simulated accelerators)",
        ylabel="Samples/s (all clients)",
    )
    finish_axes(ax)
    figures.save(fig, "throughput_vs_clients.png")

    fig, ax = figures.new()
    for label, points in series:
        draw_line(ax, points, "clients", "mlperf_au_percent", f"{label} (MLPerf: mean)")
        draw_line(ax, points, "clients", "au_percent_min", f"{label} (min)")
    thresholds = {t for t in frame.get("au_threshold_percent", []) if not absent(t) and t}
    for threshold in sorted(thresholds):
        ax.axhline(
            float(threshold), color="grey", linestyle="--", linewidth=1, label=f"pass threshold ({threshold:g}%)"
        )
    ax.set(
        title=f"Accelerator utilization vs clients ({title})",
        xlabel="Clients (simulated accelerators)",
        ylabel="AU (%) = compute time / wall time",
    )
    finish_axes(ax)
    ax.set_ylim(0, 105)  # a percentage: keep the top (and the threshold) in view
    figures.save(fig, "au_vs_clients.png")
