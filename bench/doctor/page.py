"""The doctor's outputs: the table (stdout and doctor.md), the bar chart (doctor.png), one HTML
page holding both (doctor.html: self-contained, the chart embedded as a data: URI, so it can be
moved or mailed alone) and the figures as JSON (doctor.json). A failed rung's cell says its
error's last line; the page keeps the whole error folded under it, doctor.json as it came."""

from __future__ import annotations

import html
import json
import textwrap
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, List

from bench.doctor.figures import COMPUTE, STAGES, UNFIT, AllreduceFigures, LoaderFigures, StorageFigures
from bench.doctor.verdict import budget_line, short_reason
from bench.results import write_text

if TYPE_CHECKING:
    from bench.doctor.figures import Diagnosis, Rung, WhatIf

FILES = ("doctor.md", "doctor.html", "doctor.png", "doctor.json")
TITLE_CHARS = 110  # the chart's title (the verdict) wraps at this many characters a line


def _rate(value: Any) -> str:
    return f"{value:,.0f}" if isinstance(value, (int, float)) else "-"


def _details(rung: Rung) -> str:
    f = rung.figures
    if rung.skipped:
        return f"skipped: {short_reason(rung.skipped)}"
    if rung.failed:
        return f"failed: {short_reason(rung.failed)}"
    if isinstance(f, LoaderFigures):
        stages = f.stage_cpu_ms or {}
        split = ", ".join(f"{s} {stages[s]:.2f}" for s in STAGES if s in stages)
        said = f"; CPU ms/image by stage: {split}" if split else f"; {f.stage_note or ''}"
        return f"{f.cpu_ms_per_image:.2f} CPU ms/image, {f.workers} workers{said}"
    if isinstance(f, StorageFigures):
        cold, warm = f.cold_megabytes_per_second or 0, f.warm_megabytes_per_second or 0
        count, kind = f.threads, f.readers  # how many readers, processes or threads
        readers = f"{count} reader {kind if count != 1 else {'processes': 'process', 'threads': 'thread'}[kind]}"
        if f.cache == "remote":  # S3: one figure, no page cache of ours
            return (
                f"{f.megabytes_per_second or 0:,.0f} MB/s from {f.store} "
                f"({f.dataset_megabytes:,.1f} MB in {f.dataset_files} files), {readers}"
            )
        return (
            f"{cold:,.0f} MB/s cold, {warm:,.0f} MB/s warm ({f.cache} used: "
            f"{f.dataset_megabytes:,.1f} MB in {f.dataset_files} files), {readers}"
        )
    if isinstance(f, AllreduceFigures):
        share = f.share_of_step
        return (
            f"{f.megabytes:,.1f} MB in {f.milliseconds:,.1f} ms over {f.backend} x{f.processes}, "
            f"{f.bus_gigabytes_per_second:,.2f} GB/s bus"
            + (f", {share:.0%} of a {f.step_ms or 0:,.1f} ms step" if share is not None else "")
        )
    fit = f"; {UNFIT}: {rung.unfit_because}" if rung.fit is False else ""
    return f"step p50 {rung.step_ms or 0:,.1f} ms, data wait {rung.data_wait or 0:.0%}{fit}"


def rung_rows(diagnosis: Diagnosis) -> List[List[str]]:
    ceiling = diagnosis.rung(COMPUTE)
    top = ceiling.images_per_second if ceiling and ceiling.images_per_second else None
    return [
        [
            rung.title,
            _rate(rung.images_per_second),
            f"{rung.images_per_second / top:.2f}" if top and rung.images_per_second else "-",
            _details(rung),
        ]
        for rung in diagnosis.rungs
    ]


def what_if_rows(what_ifs: List[WhatIf]) -> List[List[str]]:
    """A what-if whose run was not fit to measure says so in its gain and its note."""
    return [
        [
            w.name,
            _rate(w.images_per_second),
            (f"{w.gain:.2f}x" + (" (unfit)" if w.fit is False else "")) if w.gain else "-",
            w.skipped or (f"failed: {short_reason(w.failed)}" if w.failed else _measured(w)),
        ]
        for w in what_ifs
    ]


def _measured(what_if: WhatIf) -> str:
    unfit = f"; {UNFIT}: {what_if.unfit_because or 'no reason recorded'}" if what_if.fit is False else ""
    return f"measured as the full run{unfit}"


def _markdown(headers: List[str], rows: List[List[str]]) -> str:
    import pandas as pd

    from bench.analysis.render import render_markdown  # the sweep report's table writer (pandas: loaded late)

    return render_markdown(pd.DataFrame(rows, columns=headers, dtype=object))


RUNG_HEADERS = ["rung", "img/s", "of ceiling", "figures"]
WHAT_IF_HEADERS = ["what if", "img/s", "gain", "note"]


def table(diagnosis: Diagnosis) -> str:
    text = [f"verdict: {diagnosis.sentence}", f"time: {budget_line(diagnosis)}", ""]
    text.append(_markdown(RUNG_HEADERS, rung_rows(diagnosis)))
    if diagnosis.what_ifs:
        text += ["", _markdown(WHAT_IF_HEADERS, what_if_rows(diagnosis.what_ifs))]
    return "\n".join(text)


def chart_title(sentence: str) -> str:
    """The whole verdict, wrapped at TITLE_CHARS a line (never cut)."""
    return textwrap.fill(sentence, TITLE_CHARS, break_long_words=False, break_on_hyphens=False)


def bar_chart(diagnosis: Diagnosis, path: Path) -> Any:
    """doctor.png, a bar per rung and what-if; bars 20x apart or more (storage's 11,997 img/s beside a
    loader's 81) on a log axis, labelled so, where a linear one drew the small ones as slivers. Returns the axes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    unfit = lambda m: f" ({UNFIT})" if m.fit is False else ""  # noqa: E731
    bars = [(r.title + unfit(r), r.images_per_second) for r in diagnosis.rungs if r.images_per_second]
    bars += [(f"what if {w.name}{unfit(w)}", w.images_per_second) for w in diagnosis.what_ifs if w.images_per_second]
    title = chart_title(diagnosis.sentence)
    figure, axes = plt.subplots(figsize=(9, 0.5 * max(1, len(bars)) + 1.2 + 0.18 * (title.count("\n") + 1)))
    names = [name for name, _ in bars][::-1]
    values = [value for _, value in bars][::-1]
    axes.barh(names, values, color=["tab:orange" if n.startswith("what if") else "tab:blue" for n in names])
    for y, value in enumerate(values):
        axes.text(value, y, f" {value:,.0f}", va="center")
    if not bars:
        axes.text(0.5, 0.5, "no rung gave a figure", ha="center", va="center", transform=axes.transAxes)
        axes.set_yticks([])
        axes.set_xticks([])
    axes.set_xlabel("images/s")
    if values and max(values) >= 20 * min(values):
        axes.set_xscale("log")
        axes.set_xlabel(f"images/s (log scale: the bars span {min(values):,.0f} to {max(values):,.0f})")
    figure.suptitle(title, x=0.01, ha="left", fontsize=9)  # across the figure, not the axes
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return axes


def _folded(full: str) -> str:
    """The whole error under its short reason, folded: there when wanted, out of the way."""
    if not full or full.strip() == short_reason(full):
        return ""
    return f"<details><summary>the whole error</summary><pre>{html.escape(full.strip())}</pre></details>"


def html_page(diagnosis: Diagnosis, chart: Path) -> str:
    """doctor.html: the verdict, the budget, the chart (embedded), the rungs and the what-ifs."""
    from bench.analysis.render import embedded_img, html_table

    what_ifs = (
        html_table(WHAT_IF_HEADERS, what_if_rows(diagnosis.what_ifs), [_folded(w.failed) for w in diagnosis.what_ifs])
        if diagnosis.what_ifs
        else ""
    )
    rungs = html_table(RUNG_HEADERS, rung_rows(diagnosis), [_folded(r.failed or r.skipped) for r in diagnosis.rungs])
    return (
        "<!doctype html><html><head><meta charset='utf-8'><title>bench doctor</title>"
        "<style>body{font-family:sans-serif;margin:2em}td,th{border:1px solid #ccc;padding:4px 8px}"
        "table{border-collapse:collapse;margin:1em 0}img{max-width:100%}"
        "pre{white-space:pre-wrap;font-size:12px;max-width:100ch}</style></head><body>"
        f"<h1>bench doctor</h1><p id='verdict'><b>{html.escape(diagnosis.sentence)}</b></p>"
        f"<p>overrides: <code>{html.escape(' '.join(diagnosis.overrides) or '(the defaults)')}</code></p>"
        f"<p id='budget'>{html.escape(budget_line(diagnosis))}</p>"
        f"{embedded_img(chart, 'images/s of each rung and what-if')}{rungs}{what_ifs}</body></html>\n"
    )


def write(diagnosis: Diagnosis, out_dir: Path) -> List[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    bar_chart(diagnosis, out_dir / "doctor.png")
    if diagnosis.started_at:  # the wall time the page reports: from the command's start to the page
        diagnosis.wall_s = max(diagnosis.elapsed_s, time.time() - diagnosis.started_at)
    write_text(out_dir / "doctor.md", table(diagnosis) + "\n")
    write_text(out_dir / "doctor.html", html_page(diagnosis, out_dir / "doctor.png"))
    data: Dict[str, Any] = diagnosis.to_json()
    write_text(out_dir / "doctor.json", json.dumps(data, indent=2, default=str) + "\n")
    return [out_dir / name for name in FILES]
