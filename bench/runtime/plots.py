"""The model scenarios' sweep plots (training, inference: bench/<scenario>/sweep_view.py calls them):
throughput and scaling efficiency vs process count, throughput vs batch size (error bars from the
slowest to the fastest window where jobs ran benchmark.repeats > 1), the timeline distribution of
every run (step times; per-batch latency for inference), and validation accuracy against wall time
where jobs evaluated (training with train.eval_every)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Dict, List, Tuple

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
from bench.analysis.scaling import SUPERLINEAR

Row = Dict[str, Any]


def _count_unit(frame: pd.DataFrame) -> Tuple[str, str]:
    """('GPUs', 'GPU') when every finished run ran on CUDA, else CPU ranks may be in the mix."""
    finished = frame[frame["status"].eq("FINISHED")]
    devices = {str(shown(d)) for d in finished.get("device", pd.Series([""] * len(finished), dtype=object))}
    return ("GPUs", "GPU") if devices == {"cuda"} else ("processes (GPUs, or CPU ranks)", "process")


def plot_training(
    frame: pd.DataFrame, out: Path, title: str, timeline: Tuple[str, str, str], run_label: Callable[[Row], str]
) -> List[Path]:
    """A training (or inference) sweep: throughput and scaling efficiency vs process count, throughput
    vs batch, the timeline of each run (`timeline`: what it is, its unit label, its file name; `run_label`: a run's
    under its box), accuracy."""
    figures = Figures(out)
    unit, count_word = _count_unit(frame)
    # strong scaling splits one global batch over the processes: its lines hold the global batch. A sweep
    # of both (distributed.scaling=weak,strong) draws a line per kind: weak and strong points never joined
    kinds = set(frame["scaling"].astype(str)) & {"weak", "strong"} if "scaling" in frame else set()
    batch = "global_batch_size" if "strong" in kinds else "batch_size"
    mixed = ["scaling"] if len(kinds) == 2 else []
    if mixed:  # the batch per process on a weak line, the global batch on a strong one
        weak, per_process = frame["scaling"].astype(str).ne("strong"), "batch_size"
        frame, batch = frame.assign(batch=frame[per_process].where(weak, frame[batch])), "batch"
    by_processes = list(points_by_series(frame, "world_size", ["precision", *mixed, batch]))
    by_batch = list(points_by_series(frame, "batch_size", ["precision", *mixed, "world_size"]))

    # an axis is drawn only when the sweep moved along it (issues 21, 30): some line has two points
    # on it. A batch-size sweep draws no "vs processes" plot, a process-count sweep (weak or strong)
    # no "vs batch" plot
    processes = swept_values(frame, "world_size")
    if len(processes) >= 2 and along_a_swept_axis(by_processes, "world_size"):
        axis = f"{count_word} count ({title})", f"Number of {unit}", processes
        _throughput(figures, by_processes, "world_size", axis, "throughput_vs_gpus.png")
        fig, ax = figures.new()
        plotted = False
        for label, points in by_processes:
            if points := [p for p in points if not absent(p.get("scaling_efficiency_percent"))]:
                plotted = True
                kind = "" if mixed else f" ({shown(points[0].get('scaling'), 'weak')} scaling)"  # else in the label
                draw_line(ax, points, "world_size", "scaling_efficiency_percent", label + kind)
                for p in points:  # a speedup above the process count: its own word, not a scaling figure
                    if p["speedup"] > p["scaling_efficiency"] > 1:  # speedup / efficiency = the processes
                        at = (p["speedup"] / p["scaling_efficiency"], p["scaling_efficiency_percent"])
                        ax.annotate(f" {SUPERLINEAR}", at, color="tab:red", fontsize=8)
        ax.axhline(100.0, color="grey", linestyle="--", linewidth=1, label="ideal (100%)")
        ax.set(
            title=f"Scaling efficiency vs {count_word} count ({title})",
            xlabel=f"Number of {unit}",
            ylabel="Scaling efficiency (%) = T_N / (N x T_1)",
        )
        if not plotted:
            said = "no 1-process run of the same configuration in this sweep"
            ax.text(0.5, 0.5, said, transform=ax.transAxes, ha="center", va="center")
        finish_axes(ax, processes)
        figures.save(fig, "scaling_efficiency.png")

    batches = swept_values(frame, "batch_size")
    if len(batches) >= 2 and along_a_swept_axis(by_batch, "batch_size"):
        axis = f"batch size ({title})", "Batch size per process (images)", batches
        _throughput(figures, by_batch, "batch_size", axis, "throughput_vs_batch.png")

    what, ylabel, name = timeline
    draw_distribution(figures, frame, f"{what} per run ({title})", ylabel, name, run_label)
    plot_accuracy(figures, frame, title)
    return figures.written


def _throughput(
    figures: Figures, lines: List[Tuple[str, List[Row]]], x: str, axis: Tuple[str, str, Any], name: str
) -> None:
    """Throughput against `x`, a line per configuration (`axis`: the title's end, the x label, the ticks)."""
    fig, ax = figures.new()
    for label, points in lines:
        draw_line(ax, points, x, "images_per_second", label)
    against, xlabel, ticks = axis
    ax.set(title=f"Throughput vs {against}", xlabel=xlabel, ylabel="Throughput (images/s, all processes)")
    finish_axes(ax, ticks)
    figures.save(fig, name)


def plot_accuracy(figures: Figures, frame: pd.DataFrame, title: str) -> None:
    """accuracy_vs_time.png: val top-1 against seconds since each job's first training step, a
    line per job that evaluated, and the target as a dashed line when every such job had the same one."""
    rows = [r for r in frame.to_dict("records") if isinstance(r.get("val_curve"), list) and r["val_curve"]]
    if not rows:
        return
    fig, ax = figures.new(8)
    for row in rows:
        overrides = str(shown(row.get("overrides")))  # the swept ones only (keep_varying_overrides)
        label = f"job {row['job']}" + (f": {overrides[:60]}" if overrides else "")
        ax.plot(*zip(*row["val_curve"], strict=True), marker="o", markersize=3, label=label)  # seconds, top-1
    targets = [row.get("target_accuracy") for row in rows]
    if all(not absent(t) for t in targets) and len({float(t) for t in targets}) == 1:
        ax.axhline(
            float(targets[0]), color="grey", linestyle="--", linewidth=1, label=f"target ({float(targets[0]):g})"
        )
    ax.set(
        title=f"Validation accuracy vs wall time ({title})",
        xlabel="Seconds since the job's first training step",
        ylabel="Validation top-1 accuracy",
        xlim=(0, None),  # the right end as the lines put it
        ylim=(0, 1.02),
    )
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    figures.save(fig, "accuracy_vs_time.png")
