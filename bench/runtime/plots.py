"""The model scenarios' sweep plots (training, inference: bench/<scenario>/sweep_view.py picks them):
throughput and scaling efficiency vs process count, throughput vs batch size (error bars from the
slowest to the fastest window where jobs ran benchmark.repeats > 1), and the timeline distribution of
every run (step times; per-batch latency for inference), then whatever the scenario adds (`more`:
training's validation accuracy against wall time, bench/train/plots.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Dict, List, Sequence, Tuple

import pandas as pd

from bench.analysis.cells import absent, shown
from bench.analysis.plots import (
    Figures,
    along_a_swept_axis,
    draw_distribution,
    draw_line,
    finish_axes,
    points_by_series,
    swept_values,
)

Row = Dict[str, Any]
More = Callable[[Figures, pd.DataFrame, str], None]  # (figures, frame, title): more plots of a scenario's own


def _count_unit(frame: pd.DataFrame) -> Tuple[str, str]:
    """('GPUs', 'GPU') when every finished run ran on CUDA, else CPU ranks may be in the mix."""
    finished = frame[frame["status"].eq("FINISHED")]
    devices = {str(shown(d)) for d in finished.get("device", pd.Series([""] * len(finished), dtype=object))}
    return ("GPUs", "GPU") if devices == {"cuda"} else ("processes (GPUs, or CPU ranks)", "process")


def plot_training(
    frame: pd.DataFrame,
    out: Path,
    title: str,
    timeline: Tuple[str, str, str],
    run_label: Callable[[Row], str],
    more: Sequence[More] = (),
) -> List[Path]:
    """A training (or inference) sweep: throughput and scaling efficiency vs process count, throughput
    vs batch, the timeline of each run (`timeline`: what it is, its unit label, its file name)."""
    figures = Figures(out)
    unit, count_word = _count_unit(frame)
    # strong scaling splits one global batch over the processes: its lines hold the global batch
    strong = "scaling" in frame and frame["scaling"].astype(str).eq("strong").any()
    batch = "global_batch_size" if strong else "batch_size"
    by_processes = list(points_by_series(frame, "world_size", ["precision", batch]))
    by_batch = list(points_by_series(frame, "batch_size", ["precision", "world_size"]))

    # an axis is drawn only when the sweep moved along it (issues 21, 30): some line has two points
    # on it. A batch-size sweep draws no "vs processes" plot, a process-count sweep (weak or strong)
    # no "vs batch" plot
    processes = swept_values(frame, "world_size")
    if len(processes) >= 2 and along_a_swept_axis(by_processes, "world_size"):
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
                    f"{label} ({shown(points[0].get('scaling'), 'weak')} scaling)",
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

    batches = swept_values(frame, "batch_size")
    if len(batches) >= 2 and along_a_swept_axis(by_batch, "batch_size"):
        fig, ax = figures.new()
        for label, points in by_batch:
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
    for plot in more:
        plot(figures, frame, title)
    return figures.written
