"""What `python -m bench.compare` shows and leaves behind: the table on the terminal, the verdict
(one sentence, then its reasons), compare.md, compare.html (the plot embedded), compare.png, and,
when an input came from MLflow, the same files on a run plus a ratio metric and a verdict tag on
every compared candidate run.

Every figure on all of them comes from the Pair (bench.analysis.verdicts): `rows` is the one table
the terminal and the page print, and the plot draws the same ratios, the threshold band the
verdict used and, for --rerun, the noise floor and each round's ratio.
"""

from __future__ import annotations

import itertools
import logging
import shutil
import textwrap
import time
from pathlib import Path
from typing import Any, Dict, List, Sequence, Tuple

import pandas as pd

from bench.analysis import render
from bench.analysis.rounds import figure
from bench.analysis.verdicts import FASTER, SAME, SLOWER, UNJUDGED, Comparison, Pair

log = logging.getLogger("bench")

COLOURS = {SLOWER: "tab:red", FASTER: "tab:green"}  # same: grey
WRITTEN = ("compare.md", "compare.html", "compare.png", "rerun")  # what a compare leaves in its folder
UNFIT_HINT = "run it again on a quiet machine, or pass --judge-unfit for a verdict anyway"


def rows(pair: Pair) -> List[Dict[str, str]]:
    """A pair's rows, as the terminal and the page show them: its two figures and their ratio; a
    paired ratio (--rerun) with a row per round under it, whose ratios it is the median of."""
    # the sampled figures in their scenario's unit; a round's row has no interval, verdict nor why
    columns = ["configuration", f"baseline {pair.unit}", f"candidate {pair.unit}", "ratio", "95% interval"]
    columns += ["ratio of", "verdict", "why"]
    base, cand = ("" if x is None else figure(x) for x in (pair.baseline, pair.candidate))
    interval = f"[{pair.low:.3f}, {pair.high:.3f}]" if pair.low is not None and pair.high is not None else ""
    why = pair.note if pair.verdict else ""
    shown = [(pair.label, base, cand, f"{pair.ratio:.3f}", interval, pair.basis, pair.verdict, why)]
    each = "candidate / baseline, each side's mean of its 2 runs in the round"
    for number, ((b, c), ratio) in enumerate(zip(pair.rounds, pair.round_ratios, strict=True), start=1):
        shown.append((f"round {number}", figure(b), figure(c), f"{ratio:.3f}", "", each, "", ""))
    return [dict(zip(columns, row, strict=True)) for row in shown]


def table(comparison: Comparison) -> pd.DataFrame:
    shown = [row for pair in comparison.pairs for row in rows(pair)]
    shown += [{"configuration": label, "verdict": "only in the baseline"} for label in comparison.only_baseline]
    shown += [{"configuration": label, "verdict": "only in the candidate"} for label in comparison.only_candidate]
    return pd.DataFrame(shown, dtype=object).fillna("")


def render_text(comparison: Comparison) -> str:
    """The terminal's table: `rows` in fixed columns, the configuration's 40 wide (wider for a longer
    label: never cut), then the baseline's and the candidate's 20 each."""
    unit = comparison.unit  # "" when pairs differ: each value then carries its own
    base, cand = (f"baseline {unit}", f"candidate {unit}") if unit else ("baseline", "candidate")
    width = max([40, *(len(p.label) for p in comparison.pairs)])
    lines = [f"{'configuration':<{width}} {base:>20} {cand:>20} {'ratio':>7}  {'95% interval':<17} verdict"]
    for pair in comparison.pairs:
        for number, row in enumerate(rows(pair)):
            b, c = (row[f"{side} {pair.unit}"] for side in ("baseline", "candidate"))
            b, c = (f"{x} {pair.unit}" if x and not unit else x for x in (b, c))
            label = f"  {row['configuration']}" if number else row["configuration"]  # a round under its pair
            ratio, interval = row["ratio"], row["95% interval"]
            lines.append(f"{label:<{width}} {b:>20} {c:>20} {ratio:>7}  {interval:<17} {row['verdict']}".rstrip())
    lines += [f"only in the baseline: {label}" for label in comparison.only_baseline]
    lines += [f"only in the candidate: {label}" for label in comparison.only_candidate]
    return "\n".join(lines)


def verdict_lines(comparison: Comparison) -> List[str]:
    """The config keys the sides differ in (a line, when they do), then the verdict in one sentence,
    then its reasons a line each (indented)."""
    pairs, pct = comparison.pairs, f"{100 * comparison.threshold:g}%"
    differ = [f"the configs differ: {', '.join(comparison.differs)}"] if comparison.differs else []
    if len(pairs) == 1:
        (pair,) = pairs
        return [*differ, f"verdict: {pair.headline}", *(f"  {line}" for line in _reasons(pair))]
    count = {v: sum(p.verdict == v for p in pairs) for v in (SLOWER, UNJUDGED, FASTER, SAME)}
    if count[SLOWER]:
        first = f"slower: {count[SLOWER]} of {len(pairs)} configurations, beyond the {pct} threshold"
    elif count[UNJUDGED]:
        first = f"not judged: a side was not fit to measure in {count[UNJUDGED]} of {len(pairs)} configurations"
    else:
        first = f"not slower: {count[SAME]} of {len(pairs)} configurations same, {count[FASTER]} faster"
    lines = [*differ, f"verdict: {first}"]
    for pair in pairs:
        lines += [f"  {pair.label}: {pair.headline}", *(f"    {line}" for line in _reasons(pair))]
    return lines


def _reasons(pair: Pair) -> List[str]:
    return [f"ratio: {pair.basis}", *pair.reasons, *([UNFIT_HINT] if pair.verdict == UNJUDGED else [])]


def draw(comparison: Comparison, ax: Any) -> None:  # ax: a matplotlib Axes
    """Each ratio with its interval, the threshold band the verdict used, and where a verdict used
    a noise floor (--rerun) its lines and each round's ratio, on the pair's row."""
    low_edge, high_edge = comparison.edges
    ax.axvspan(low_edge, high_edge, color="grey", alpha=0.15, label=f"threshold ±{100 * comparison.threshold:g}%")
    ax.axvline(1.0, color="black", linewidth=1)
    for y, pair in enumerate(comparison.pairs):
        colour = COLOURS.get(pair.verdict, "tab:grey")
        if pair.noise_floor is not None:
            floor, said = pair.noise_floor, f"noise floor ±{100 * pair.noise_floor:.1f}%"
            ax.vlines([1 / (1 + floor), 1 + floor], y - 0.4, y + 0.4, colors="tab:orange", linestyles="--", label=said)
        if pair.rounds:
            ax.plot(pair.round_ratios, [y] * len(pair.rounds), "x", color=colour, alpha=0.6, label="each round's ratio")
        if pair.low is not None and pair.high is not None:  # an interval: both ends
            xerr = [[pair.ratio - pair.low], [pair.high - pair.ratio]]
            ax.errorbar(pair.ratio, y, xerr=xerr, fmt="o", color=colour, capsize=4, label="ratio, 95% interval")
        else:
            ax.plot(pair.ratio, y, "o", color=colour, label="ratio")
    ax.set_yticks(range(len(comparison.pairs)))
    ax.set_yticklabels([textwrap.fill(p.label, 40) for p in comparison.pairs], fontsize=8)
    ax.invert_yaxis()
    ax.set(xlabel="speed ratio of the candidate to the baseline (> 1: faster)")
    ax.grid(True, axis="x", alpha=0.3)
    handles, labels = ax.get_legend_handles_labels()
    unique = dict(zip(labels, handles, strict=True))  # one entry per kind, however many pairs
    # beside the axes, never over a ratio or a line
    ax.legend(unique.values(), unique.keys(), fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5))


def plot(comparison: Comparison, path: Path, title: str) -> Path:
    from bench.analysis.plots import _pyplot

    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, max(2.5, 0.45 * len(comparison.pairs) + 1.5)))
    draw(comparison, ax)
    # wrapped, never cut: a title is two run directories or run ids, often longer than the plot is wide
    ax.set_title(textwrap.fill(f"Speed of the candidate against the baseline, 95% interval ({title})", 75), fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110, bbox_inches="tight")  # the legend beside the axes included
    plt.close(fig)
    return path


def own_folder(out: Path, named: bool) -> Tuple[Path, str]:
    """Where this compare writes, and a line saying so when it is not simply `out`: a folder the
    user named (--out) is replaced (the earlier compare's files removed, and said); the default
    one, when it holds an earlier compare, is kept, and this one goes to the next free `out`-2, -3..."""
    if named:
        earlier = [name for name in WRITTEN if (out / name).exists()]
        for name in earlier:
            shutil.rmtree(out / name) if (out / name).is_dir() else (out / name).unlink()
        out.mkdir(parents=True, exist_ok=True)
        return out, f"compare: replacing the earlier compare in {out} ({', '.join(earlier)})" if earlier else ""
    for number in itertools.count(1):
        folder = out if number == 1 else out.with_name(f"{out.name}-{number}")
        if any((folder / name).exists() for name in WRITTEN):
            continue
        folder.mkdir(parents=True, exist_ok=True)
        try:
            (folder / "compare.md").open("x").close()  # claimed: a compare started at once takes the next
        except FileExistsError:
            continue
        elsewhere = f"compare: {out} holds an earlier compare (kept); this one goes to {folder}"
        return folder, "" if number == 1 else elsewhere
    raise AssertionError("unreachable")


def write_outputs(comparison: Comparison, out: Path, title: str, notes: Sequence[str] = ()) -> List[Path]:
    """[compare.md, compare.html, compare.png], written into `out`, the verdict's lines above the table."""
    out.mkdir(parents=True, exist_ok=True)
    shown = table(comparison)
    image = plot(comparison, out / "compare.png", title)
    md, page = out / "compare.md", out / "compare.html"
    said = [*notes, *(line.strip() for line in verdict_lines(comparison))]  # a paragraph each
    render.write_markdown(shown, [image], md, f"compare: {title}", said)
    render.write_html(shown, [image], page, f"compare: {title}", said)
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
