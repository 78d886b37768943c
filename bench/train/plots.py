"""The training scenario's own sweep plot: validation accuracy against wall time (bench.train.sweep_view
adds it to the model scenarios' plots, bench.runtime.plots)."""

from __future__ import annotations

import pandas as pd

from bench.analysis.cells import absent, shown
from bench.analysis.plots import Figures


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
