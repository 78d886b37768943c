"""`python -m bench.doctor <training overrides>`: the bottleneck ladder (bench.doctor) for the run
`python -m bench <overrides>` would make. Its own keys: doctor.budget_s (default 180, at most 3600:
the whole, what-ifs included; the rungs and the first what-if always run, the others while the
budget lasts), doctor.what_ifs (default true) and doctor.out (default doctor/<date>/<time>, `-2`, `-3`, ... when
another doctor started in the same second took it; a directory, made if missing).

Exit codes: 0 a verdict, 1 no verdict (the full run failed), 2 a bad key or config (one [ERROR]
line, nothing run), 130/143 interrupted by Ctrl-C/SIGTERM (the ladder ends at once: no further
rung, what-if or verdict; the parent MLflow run and the rung in progress end KILLED).
"""

from __future__ import annotations

import html
import json
import logging
import math
import re
import sys
import textwrap
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from bench.config import BenchConfig, compose
from bench.doctor.figures import COMPUTE, STAGES, UNFIT, Diagnosis, Rung, WhatIf
from bench.doctor.verdict import budget_line, short_reason
from bench.errors import EXIT_FAILED, BenchError, ConfigError, interruption_in, print_error
from bench.machine.writable import check_writable_dir
from bench.results import write_text
from bench.run_dirs import reserve, stamp_of
from bench.secrets import command_line_problem, flatten, redact_output
from bench.tracking.tracker import Tracker, open_run

DEFAULTS = {"budget_s": "180", "what_ifs": "true", "out": ""}
DEFAULT_OUT = "doctor"  # doctor/<date>/<time>, as Hydra names a run's
MAX_BUDGET_S = 3600.0  # an hour: a longer diagnosis is a mistyped budget, not a wish (issue 28)
log = logging.getLogger("bench.doctor")


def split_keys(argv: Sequence[str]) -> Tuple[Dict[str, str], List[str]]:
    """(the doctor's own keys, the training overrides). ConfigError for a doctor.* key it does not know."""
    own, overrides = dict(DEFAULTS), []
    for arg in argv:
        key, _, value = arg.partition("=")
        if key.startswith("doctor."):
            name = key[len("doctor.") :]
            if name not in DEFAULTS:
                accepted = ", ".join(f"doctor.{k}" for k in DEFAULTS)
                raise ConfigError(key, value, f"one of the doctor's keys ({accepted})")
            own[name] = value
        else:
            overrides.append(arg)
    return own, overrides


def budget_of(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and 0 < value <= MAX_BUDGET_S):
        raise ConfigError(
            "doctor.budget_s", text, f"a number of seconds above 0 and at most {MAX_BUDGET_S:.0f}, e.g. 180"
        )
    return value


def out_dir_of(text: str) -> Optional[Path]:
    """doctor.out as a directory this process can make or write: ConfigError for an existing file
    (or a file on the way to it) and for a place it may not write, before any work. None: the
    default, doctor/<date>/<time>, reserved once the config is checked (own_out_dir)."""
    out_dir = Path(text or DEFAULT_OUT).resolve()
    check_writable_dir("doctor.out", text, out_dir)
    return out_dir if text else None


def own_out_dir() -> Path:
    """doctor/<date>/<time>, or <time>-2, ...: this doctor's own, even beside another started in the
    same second (bench.run_dirs), as a run's directory is."""
    return reserve(Path(DEFAULT_OUT).resolve()).path


def parent_name(out_dir: Path) -> str:
    """The MLflow parent's name, as distinct as the doctor's directory (a sweep's is its run dir's):
    doctor-20261129-045512-2 beside another doctor started in that second; doctor.out=DIR adds its name."""
    return f"doctor-{stamp_of(out_dir) or time.strftime('%Y%m%d-%H%M%S-') + out_dir.name}"


def main(argv: Optional[Sequence[str]] = None) -> int:
    redact_output()
    args = list(sys.argv[1:] if argv is None else argv)
    if {"-h", "--help"} & set(args):
        print(__doc__)
        return 0
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="[%(levelname)s] %(message)s")
    log.setLevel(logging.INFO)
    if problem := command_line_problem(args):
        return print_error(problem)
    try:
        own, overrides = split_keys(args)
        budget_s, with_what_ifs = budget_of(own["budget_s"]), own["what_ifs"].lower() == "true"
        if own["what_ifs"].lower() not in ("true", "false"):
            raise ConfigError("doctor.what_ifs", own["what_ifs"], "true or false")
        out_dir = out_dir_of(own["out"])
        config = _checked_config(overrides)
    except BenchError as exc:
        return print_error(str(exc), exc.exit_code)
    return _diagnose(config, overrides, budget_s, with_what_ifs, out_dir or own_out_dir())


def _checked_config(overrides: Sequence[str]) -> "BenchConfig":
    config = compose(*overrides)
    if config.mode != "train":
        raise ConfigError("mode", config.mode, "train: the doctor diagnoses training runs")
    config.scenario.preflight(config)  # data on disk, the device: before anything runs
    from bench.tracking.store import checked_uri

    checked_uri(config.tracking, Path.cwd())  # a store MLflow has no scheme for
    return config


def _diagnose(config: "BenchConfig", overrides: List[str], budget_s: float, with_what_ifs: bool, out_dir: Path) -> int:
    from bench.doctor.ladder import climb
    from bench.doctor.training import TrainingRuns
    from bench.machine.children import sigterm_raises
    from bench.machine.fitness import affinity, usable_cores
    from bench.runtime.device import fit_cpu, resolve_device

    launch_dir = Path.cwd()
    # the loader, storage and what-if rungs take the threads and workers the runs will have
    as_run, _ = fit_cpu(config, resolve_device(config.allow_cpu).type)
    # the parent run (as a run's: inactive with tracking off, or when the store did not answer); a rung's is its child
    params = {"doctor.budget_s": budget_s, "doctor.what_ifs": with_what_ifs, "overrides": " ".join(overrides)}
    parent = open_run(config.tracking, launch_dir, parent_name(out_dir), params, {}, overrides)
    parent.set_tags({"doctor": "parent"})
    runs = TrainingRuns(out_dir, launch_dir, parent.run_id, budget_s)

    def on_rung(rung: Rung) -> None:
        said = rung.skipped or rung.failed or f"{rung.images_per_second or 0:,.0f} img/s"
        log.info("%s: %s (%.1f s)", rung.title, said, rung.seconds)
        _log_rung(parent, config, rung)

    try:
        with sigterm_raises():  # SIGTERM as Ctrl-C: the ladder ends at once, not at its next rung
            diagnosis = climb(as_run, overrides, budget_s, runs, usable_cores(affinity()), with_what_ifs, on_rung)
            diagnosis.parent_run_id = parent.run_id
            files = write(diagnosis, out_dir)
            print(table(diagnosis), flush=True)
            link = _close_parent(parent, diagnosis, files, "FINISHED" if diagnosis.verdict != "unknown" else "FAILED")
    except BaseException as exc:
        if (stopped := interruption_in(exc)) is None:  # also one that a library turned into its own error
            raise
        parent.finish("KILLED", error=str(stopped))
        print_error(f"the doctor was interrupted ({stopped}); the rungs measured so far are in {out_dir}")
        return stopped.exit_code
    log.info("results in %s", out_dir)
    if link:
        log.info(link)
    return EXIT_FAILED if diagnosis.verdict == "unknown" else 0


def _log_rung(parent: Any, config: BenchConfig, rung: Rung) -> None:
    """A rung's child run: made here for the rungs bench.app did not run (the loader, storage and
    all-reduce rungs), tagged in either case (a training rung's is bench's own run, already a child)."""
    if not parent.active:
        return
    tags = {"doctor.rung": rung.name, "doctor.title": rung.title}
    if rung.skipped:
        tags["doctor.skipped"] = rung.skipped
    if rung.run_id:  # a training rung: bench's run, already a child
        Tracker(parent.client, rung.run_id, parent.uri).set_tags(tags)
        return
    child = Tracker.start(
        parent.uri, config.tracking.experiment, f"doctor-{rung.name}", tags, parent_run_id=parent.run_id
    )
    # its figures as metrics (stage_cpu_ms.read as stage_cpu_ms_read; log_metrics keeps the numbers: these
    # rungs' figures hold no bool), and its rate
    figures = {key.replace(".", "_"): value for key, value in flatten(rung.figures_json()).items()}
    rate = {} if rung.images_per_second is None else {"images_per_second": rung.images_per_second}
    child.log_metrics({**figures, **rate})
    child.finish("FAILED" if rung.failed else "FINISHED", error=rung.failed or None)
    rung.run_id = child.run_id


def _close_parent(parent: Any, diagnosis: Diagnosis, files: List[Path], status: str = "FINISHED") -> Optional[str]:
    """The parent run's figures (each rung's images/s, each what-if's gain), the verdict as tags, the
    table, chart and page as artifacts; the UI link to its children."""
    if not parent.active:
        return None
    metrics = {f"{r.name}_images_per_second": r.images_per_second for r in diagnosis.rungs if r.images_per_second}
    metrics.update({"what_if_gain_" + re.sub(r"[^\w.-]", "_", w.name): w.gain for w in diagnosis.what_ifs if w.gain})
    parent.log_metrics({**metrics, "doctor_seconds": diagnosis.elapsed_s})
    parent.set_tags({"doctor.verdict": diagnosis.verdict, "doctor.sentence": diagnosis.sentence})
    parent.log_artifacts(files)
    parent.finish(status, error=None if status == "FINISHED" else diagnosis.sentence)
    return parent.ui_link(children=True)


# ---- the page ----
# The doctor's outputs: the table (stdout and doctor.md), the bar chart (doctor.png), one HTML
# page holding both (doctor.html: self-contained, the chart embedded as a data: URI, so it can be
# moved or mailed alone) and the figures as JSON (doctor.json). A failed rung's cell says its
# error's last line; the page keeps the whole error folded under it, doctor.json as it came.
FILES = ("doctor.md", "doctor.html", "doctor.png", "doctor.json")
TITLE_CHARS = 110  # the chart's title (the verdict) wraps at this many characters a line


def _rate(value: Any) -> str:
    return f"{value:,.0f}" if isinstance(value, (int, float)) else "-"


def _details(rung: Rung) -> str:
    from bench.doctor.figures import AllreduceFigures, LoaderFigures, StorageFigures  # each rung's own

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
        files = f"{f.dataset_megabytes:,.1f} MB in {f.dataset_files} files"
        if f.cache == "remote":  # S3: one figure, no page cache of ours
            return f"{f.megabytes_per_second or 0:,.0f} MB/s from {f.store} ({files}), {readers}"
        return f"{cold:,.0f} MB/s cold, {warm:,.0f} MB/s warm ({f.cache} used: {files}), {readers}"
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


RUNG_HEADERS = ["rung", "img/s", "of ceiling", "figures"]
WHAT_IF_HEADERS = ["what if", "img/s", "gain", "note"]


def table(diagnosis: Diagnosis) -> str:
    from bench.analysis.render import markdown_rows  # the sweep report's table writer (pandas: loaded late)

    text = [f"verdict: {diagnosis.sentence}", f"time: {budget_line(diagnosis)}", ""]
    text.append(markdown_rows([RUNG_HEADERS, *rung_rows(diagnosis)]))
    if diagnosis.what_ifs:
        text += ["", markdown_rows([WHAT_IF_HEADERS, *what_if_rows(diagnosis.what_ifs)])]
    return "\n".join(text)


def chart_title(sentence: str) -> str:
    """The whole verdict, wrapped at TITLE_CHARS a line (never cut)."""
    return textwrap.fill(sentence, TITLE_CHARS, break_long_words=False, break_on_hyphens=False)


def bar_chart(diagnosis: Diagnosis, path: Path) -> Any:
    """doctor.png, a bar per rung and what-if; bars 20x apart or more (storage's 11,997 img/s beside a
    loader's 81) on a log axis, labelled so, where a linear one drew the small ones as slivers. Returns the axes."""
    from bench.analysis.plots import _pyplot

    plt = _pyplot()
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
    write_text(out_dir / "doctor.json", json.dumps(diagnosis.to_json(), indent=2, default=str) + "\n")
    return [out_dir / name for name in FILES]
