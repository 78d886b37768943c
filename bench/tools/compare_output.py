"""What `python -m bench.compare` leaves behind: compare.md, compare.html (the plot embedded),
compare.png, and, when an input came from MLflow, the same files on a run plus a ratio metric and
a verdict tag on every compared candidate run."""

from __future__ import annotations

import logging
import textwrap
import time
from pathlib import Path
from typing import List

import pandas as pd

from bench.analysis import render
from bench.analysis.compare import FASTER, SLOWER, Comparison

log = logging.getLogger("bench")

COLOURS = {SLOWER: "tab:red", FASTER: "tab:green"}  # same: grey


def table(comparison: Comparison) -> pd.DataFrame:
    rows = [
        {
            "configuration": p.label,
            f"baseline {p.unit}": f"{p.baseline:.1f}",  # the sampled figure in its scenario's unit
            f"candidate {p.unit}": f"{p.candidate:.1f}",
            "ratio": f"{p.ratio:.3f}",
            "95% interval": f"[{p.low:.3f}, {p.high:.3f}]" if p.low is not None else "",
            "samples": p.samples,
            "verdict": p.verdict,
            "why": p.note,
        }
        for p in comparison.pairs
    ]
    rows += [{"configuration": label, "verdict": "only in the baseline"} for label in comparison.only_baseline]
    rows += [{"configuration": label, "verdict": "only in the candidate"} for label in comparison.only_candidate]
    return pd.DataFrame(rows, dtype=object).fillna("")


def plot(comparison: Comparison, path: Path, title: str) -> Path:
    """The ratio of every configuration with its interval, the threshold band around 1."""
    from bench.analysis.plots import _pyplot

    plt = _pyplot()
    pairs = comparison.pairs
    fig, ax = plt.subplots(figsize=(8, max(2.5, 0.45 * len(pairs) + 1.5)))
    for y, pair in enumerate(pairs):
        colour = COLOURS.get(pair.verdict, "tab:grey")
        if pair.low is not None and pair.high is not None:  # an interval: both ends
            ax.errorbar(
                pair.ratio,
                y,
                xerr=[[pair.ratio - pair.low], [pair.high - pair.ratio]],
                fmt="o",
                color=colour,
                capsize=4,
            )
        else:
            ax.plot(pair.ratio, y, "o", color=colour)
    t = comparison.threshold
    ax.axvline(1.0, color="black", linewidth=1)
    ax.axvspan(1 - t, 1 + t, color="grey", alpha=0.15, label=f"threshold (±{100 * t:g}%)")
    ax.set_yticks(range(len(pairs)))
    ax.set_yticklabels([textwrap.fill(p.label, 40) for p in pairs], fontsize=8)
    ax.invert_yaxis()
    # wrapped, never cut: a title is two run directories or run ids, often longer than the plot is wide
    ax.set_title(textwrap.fill(f"Throughput candidate / baseline, 95% interval ({title})", 75), fontsize=10)
    ax.set(xlabel="ratio (> 1: faster)")
    ax.grid(True, axis="x", alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write_outputs(comparison: Comparison, out: Path, title: str) -> List[Path]:
    """[compare.md, compare.html, compare.png], written into `out`."""
    out.mkdir(parents=True, exist_ok=True)
    shown = table(comparison)
    image = plot(comparison, out / "compare.png", title)
    md, page = out / "compare.md", out / "compare.html"
    render.write_markdown(shown, [image], md, f"compare: {title}")
    render.write_html(shown, [image], page, f"compare: {title}")
    return [md, page, image]


def log_to_mlflow(
    comparison: Comparison, files: List[Path], run_id: str, baseline: str, uri: str, tag_candidates: bool
) -> None:
    """The files on `run_id` under compare/; with `tag_candidates` (the candidate came from this store)
    the ratio and verdict on each compared candidate run."""
    from mlflow import MlflowClient
    from mlflow.entities import Metric, RunTag

    client = MlflowClient(tracking_uri=uri)
    now = int(time.time() * 1000)
    try:
        for path in files:
            client.log_artifact(run_id, str(path), "compare")
        for pair in comparison.pairs if tag_candidates else []:
            if pair.candidate_run:
                client.log_batch(
                    pair.candidate_run,
                    tags=[RunTag("compare.verdict", pair.verdict), RunTag("compare.baseline", baseline)],
                    metrics=[Metric("throughput_ratio_vs_baseline", pair.ratio, now, 0)],
                )
    except Exception as exc:  # the files are written; the store is a copy
        log.warning("logging the comparison to MLflow run %s failed (%s: %s)", run_id, type(exc).__name__, exc)
