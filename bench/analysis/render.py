"""The sweep table and its renderings: terminal text, markdown, CSV and one self-contained HTML page.

The columns are the sweep's scenario's (its report class's view: what its record declares, then the
optional columns some job has, e.g. a training sweep that evaluated adds `val_top1`): nothing
here names a mode. A figure a run does not have is an empty cell. The CSV is wider: every
figure any run has.
"""

from __future__ import annotations

import base64
import html
from pathlib import Path
from typing import Any, Dict, List, Sequence, Tuple

import pandas as pd

from bench.analysis import runs
from bench.analysis.cells import absent
from bench.analysis.runs import CONFIG_PREFIX, ENV_PREFIX, MISSING, NOISE_KEYS, metric_columns, sweep_report_class
from bench.machine.fitness import unfit_reason
from bench.report_view import DISPLAY, ERROR, HEAD, as_shown

CSV_RUN_FIELDS = [key for _, key, _ in (*HEAD, ERROR)]  # the generic columns, as every scenario's table has them
SHOWN_AS_MLFLOW = "as MLflow shows it"  # a cell format: bench.report_view.as_shown


def keep_varying_overrides(frame: pd.DataFrame) -> pd.DataFrame:
    """A copy showing only the overrides that tell the runs apart (the swept ones)."""
    split = [str(o).split() for o in frame["overrides"]]
    common = set.intersection(*(set(s) for s in split)) if len(split) > 1 else set()
    shown = frame.copy()
    shown["overrides"] = [" ".join(o for o in overrides if o not in common) for overrides in split]
    return shown


def cell(value: Any, fmt: str) -> str:
    """One table cell: empty for a missing figure, else formatted (as text if the format does not fit)."""
    if absent(value):
        return ""
    if fmt == "bool":
        return str(bool(value)) if isinstance(value, (bool, int, float)) else str(value)
    if fmt == SHOWN_AS_MLFLOW and isinstance(value, (int, float)):
        return as_shown(value)
    try:
        return fmt.format(value)
    except (ValueError, TypeError):
        return str(value)


def swept_override_keys(frame: pd.DataFrame) -> List[str]:
    """The keys the command line swept: override keys whose value differs between the jobs (a group
    choice such as precision=bf16 is its group, shown by its own column)."""
    values: Dict[str, set] = {}
    for overrides in frame.get("overrides", []):
        for item in str(overrides).split():
            key, sep, value = item.lstrip("+~").partition("=")
            if sep and not key.startswith(NOISE_KEYS):
                values.setdefault(key, set()).add(value)
    jobs = len(frame)
    return sorted(
        k
        for k, v in values.items()
        if len(v) > 1 or 0 < sum(1 for o in frame.get("overrides", []) if f"{k}=" in str(o)) < jobs
    )


def columns_of(frame: pd.DataFrame) -> List[Tuple[str, str, str]]:
    """(header, frame column, format) of this sweep's table: what its runs' report class shows."""
    view = sweep_report_class(frame).view
    base = list(view.columns)
    # every swept key labelled: a column of its own after the overrides, unless a column shows it already
    shown_keys = {name for _, name, _ in base} | {CONFIG_PREFIX + key for key in view.shown_config}
    swept = [
        (key, CONFIG_PREFIX + key, "{}")
        for key in swept_override_keys(frame)
        if CONFIG_PREFIX + key in frame and CONFIG_PREFIX + key not in shown_keys
    ]
    at = next((i + 1 for i, (_, name, _) in enumerate(base) if name == "overrides"), 0)
    base = base[:at] + swept + base[at:]
    extra = [c for c in view.optional_columns if c[1] in frame and not all(absent(v) for v in frame[c[1]])]
    # jobs that ran other code or packages (a Slurm sweep over nodes set up apart): say which, per job
    extra += [
        (header, ENV_PREFIX + name, "{}")
        for header, name in (("code", "git_commit"), ("dirty", "git_dirty"), ("packages", "packages_sha256"))
        if len({str(v) for v in frame.get(ENV_PREFIX + name, []) if not absent(v) and v != ""}) > 1
    ]
    return base[:-1] + extra + base[-1:]  # the error stays last


def table(frame: pd.DataFrame) -> pd.DataFrame:
    """The report table as strings: one column per header, one row per run."""
    # a headline MLflow shows as a rounded copy (DISPLAY) is shown to the copy's digits: both agree
    columns = [(header, name, SHOWN_AS_MLFLOW if name in DISPLAY else fmt) for header, name, fmt in columns_of(frame)]
    blank = pd.Series([None] * len(frame), index=frame.index, dtype=object)
    cells = {header: [cell(v, fmt) for v in frame.get(name, blank)] for header, name, fmt in columns}
    return pd.DataFrame(cells, index=frame.index, dtype=object)


def unfit_warning(frame: pd.DataFrame) -> str:
    """A line naming the jobs that were not fit to measure (fit_to_measure false), with their reasons; "" if none."""
    unfit = [(row.get("job"), unfit_reason(row)) for row in frame.to_dict("records") if unfit_reason(row)]
    if not unfit:
        return ""
    jobs = "; ".join(f"job {job}: {reason}" for job, reason in unfit)
    read = len(frame) - len(missing_jobs(frame))
    return f"warning: {len(unfit)} of {read} jobs were not fit to measure, their figures are suspect ({jobs})"


def missing_jobs(frame: pd.DataFrame) -> List[Dict[str, Any]]:
    """The rows of jobs the sweep launched whose directory is gone (bench.analysis.runs.MISSING)."""
    return [row for row in frame.to_dict("records") if row.get("status") == MISSING] if "status" in frame else []


def reported_jobs(out: Path) -> List[str]:
    """The jobs the report.csv in `out` read (its MISSING rows not counted); [] when there is none."""
    try:
        earlier = pd.read_csv(out / "report.csv", usecols=["job", "status"], dtype=str)
    except (OSError, ValueError):  # no report there, or not one of bench's
        return []
    return list(earlier.loc[earlier["status"] != MISSING, "job"])


def missing_note(frame: pd.DataFrame) -> str:
    """ "report of 2 of 3 jobs: job 1 (data.batch_size=8): its directory is gone" / "" (none missing)."""
    if not (gone := missing_jobs(frame)):
        return ""
    named = "; ".join(f"job {row['job']} ({row['overrides']}): {row['error']}" for row in gone)
    return f"report of {len(frame) - len(gone)} of {len(frame)} jobs: {named}"


def progress_notes(frame: pd.DataFrame) -> List[str]:
    """A sweep still running ("the sweep is still running: job 1 (...) RUNNING, 2 jobs not started yet
    (PENDING)"), and a line per finished job whose record says something is off (its summary does not
    match its overrides): said above the table."""
    rows = frame.to_dict("records") if "status" in frame else []
    running = [f"job {r['job']} ({r['overrides']})" for r in rows if r["status"] == runs.RUNNING]
    waiting = f", {n} jobs not started yet (PENDING)" if (n := sum(r["status"] == runs.PENDING for r in rows)) else ""
    said = [f"the sweep is still running: {', '.join(running)} RUNNING{waiting}"] if running else []
    off = [r for r in rows if r["status"] == "FINISHED" and not absent(r.get("error")) and r.get("error")]
    return said + [f"job {r['job']}: {r['error']}" for r in off]


def failure_sentence(jobs: int, failed: int, reasons: Sequence[str] = ()) -> str:
    """ "all 4 jobs failed: <the first reason>" / "1 of 4 jobs failed: <...>" / "" (none failed)."""
    if not failed:
        return ""
    said = next((str(r) for r in reasons if r and not absent(r)), "")
    head = f"all {jobs} jobs failed" if failed == jobs else f"{failed} of {jobs} jobs failed"
    return f"{head}: {said}" if said else head


def failure_note(frame: pd.DataFrame) -> str:
    """The report's first line when jobs failed (the first failed job's reason), "" when none did."""
    if not len(frame) or "status" not in frame:
        return ""
    failed = frame[~frame["status"].isin(["FINISHED", MISSING, runs.RUNNING, runs.PENDING])]  # each said apart
    return failure_sentence(len(frame), len(failed), list(failed["error"]) if "error" in failed else [])


def _cells(shown: pd.DataFrame) -> List[List[str]]:
    return [list(shown.columns), *shown.values.tolist()]


def render_text(shown: pd.DataFrame) -> str:
    """Aligned columns for the terminal, a dashed line under the headers."""
    cells = _cells(shown)
    widths = [max(len(row[i]) for row in cells) for i in range(len(cells[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def render_markdown(shown: pd.DataFrame) -> str:
    return markdown_rows(_cells(shown))


def markdown_rows(cells: Sequence[Sequence[str]]) -> str:
    """A markdown table of text cells, the headers first (the doctor's tables: bench.doctor.cli)."""
    escaped = [[c.replace("|", "\\|") for c in row] for row in cells]
    lines = ["| " + " | ".join(escaped[0]) + " |", "|" + "---|" * len(escaped[0])]
    lines += ["| " + " | ".join(row) + " |" for row in escaped[1:]]
    return "\n".join(lines)


def write_csv(frame: pd.DataFrame, path: Path) -> None:
    """job, status, overrides, error, then every figure any run has (sorted by name), unformatted;
    list- or dict-valued results (per-rank details) are left out."""
    figures = sorted(
        c for c in metric_columns(frame) if any(not isinstance(v, (list, dict)) and not absent(v) for v in frame[c])
    )
    out = frame[CSV_RUN_FIELDS + figures].astype(object)
    out = out.where(~out.map(absent), None)  # NaN (a figure this run lacks) -> an empty field
    out.to_csv(path, index=False, na_rep="", lineterminator="\r\n")


def embedded_img(path: Path, alt: str = "") -> str:
    """An <img> holding the PNG itself as a data: URI: the page needs no file beside it."""
    data = base64.b64encode(path.read_bytes()).decode()
    return f'<img alt="{html.escape(alt or path.stem)}" src="data:image/png;base64,{data}"/>'


def html_table(headers: Sequence[str], rows: Sequence[Sequence[str]], folded: Sequence[str] = ()) -> str:
    """A <table> of text cells (escaped); `folded`: HTML put after each row's last cell (the doctor's
    whole errors, bench.doctor.cli), one per row."""
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join(
        "<tr>"
        + "".join(f"<td>{html.escape(c)}</td>" for c in row[:-1])
        + f"<td>{html.escape(row[-1])}{extra}</td></tr>"
        for row, extra in zip(rows, list(folded) or [""] * len(rows), strict=True)
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def write_html(shown: pd.DataFrame, images: Sequence[Path], path: Path, title: str, notes: Sequence[str] = ()) -> None:
    """One page with the table and the plots embedded as data: URIs, so it can be mailed or attached alone."""
    cells = _cells(shown)
    said = "".join(f"<p>{html.escape(n)}</p>" for n in notes)
    figures = "".join(f"<figure>{embedded_img(p)}</figure>" for p in images)
    path.write_text(f"""<!doctype html><html><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>body{{font-family:sans-serif;margin:2em}}table{{border-collapse:collapse;font-size:13px}}
td,th{{border:1px solid #ccc;padding:3px 6px;text-align:right}}th{{background:#eee}}
img{{max-width:100%}}figure{{display:inline-block;margin:1em}}</style></head>
<body><h1>{html.escape(title)}</h1>{said}
{html_table(cells[0], cells[1:])}
{figures}</body></html>
""")


def write_markdown(
    shown: pd.DataFrame, images: Sequence[Path], path: Path, title: str, notes: Sequence[str] = ()
) -> None:
    """The table, the notes (a worker sweep's pick) and links to the plots next to it."""
    said = "".join(f"{n}\n\n" for n in notes)
    links = "".join(f"![{p.stem}]({p.name})\n" for p in images)
    path.write_text(f"# {title}\n\n{said}{render_markdown(shown)}\n\n" + links)
