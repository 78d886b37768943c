"""The sweep table and its renderings: terminal text, markdown, CSV and one self-contained HTML page.

The table has one column set for training sweeps and one for storage-benchmark sweeps; a
figure a run does not have is an empty cell. A training sweep whose jobs evaluated accuracy
adds `val_top1`, `reached_target` and `time_to_target_seconds` (each only when some job has
it: a sweep without evaluation keeps the table as it was). The CSV is wider: every figure any
run has.
"""

from __future__ import annotations

import base64
import html
from pathlib import Path
from typing import Any, List, Sequence, Tuple

import pandas as pd

from bench.analysis.runs import absent, is_sweep_of, is_storage_sweep, metric_columns

TRAINING_COLUMNS = [  # (header, frame column, format)
    ("job", "job", "{}"),
    ("status", "status", "{}"),
    ("overrides", "overrides", "{}"),
    ("model", "model", "{}"),
    ("precision", "precision", "{}"),
    ("procs", "world_size", "{}"),
    ("batch/proc", "batch_size", "{}"),
    ("global batch", "global_batch_size", "{}"),
    ("images/s", "images_per_second", "{:.1f}"),
    ("images/s/proc", "images_per_second_per_device", "{:.1f}"),
    ("step p50 ms", "step_time_ms_p50", "{:.2f}"),
    ("step p99 ms", "step_time_ms_p99", "{:.2f}"),
    ("data wait %", "data_wait_percent", "{:.1f}"),
    ("speedup", "speedup", "{:.2f}"),
    ("scaling eff %", "scaling_efficiency_percent", "{:.1f}"),
    ("scaling", "scaling", "{}"),
    ("error", "error", "{}"),
]

# a training sweep whose jobs evaluated: shown before "error", each only when some job has it
ACCURACY_COLUMNS = [
    ("val_top1", "val_top1", "{:.4f}"),
    ("reached_target", "reached_target", "bool"),  # True/False (MLflow gives it back as 1.0/0.0)
    ("time_to_target_seconds", "time_to_target_seconds", "{:.1f}"),
]

# shown before "error" when some job has them: repeats (benchmark.repeats) and utilisation (a known GPU)
REPEAT_COLUMNS = [
    ("repeats", "repeats", "{}"),
    ("images/s median", "images_per_second_median", "{:.1f}"),
    ("CI95 low", "images_per_second_ci95_low", "{:.1f}"),
    ("CI95 high", "images_per_second_ci95_high", "{:.1f}"),
    ("stable", "stable", "bool"),
    ("MFU", "mfu", "{:.1%}"),
]

INFERENCE_COLUMNS = [  # a sweep of mode=inference runs
    ("job", "job", "{}"),
    ("status", "status", "{}"),
    ("overrides", "overrides", "{}"),
    ("model", "model", "{}"),
    ("precision", "precision", "{}"),
    ("batch", "batch_size", "{}"),
    ("images/s", "images_per_second", "{:.1f}"),
    ("latency p50 ms", "latency_ms_p50", "{:.2f}"),
    ("latency p95 ms", "latency_ms_p95", "{:.2f}"),
    ("latency p99 ms", "latency_ms_p99", "{:.2f}"),
    ("GFLOPs/image", "gflops_per_image_forward", "{:.2f}"),
    ("error", "error", "{}"),
]

STORAGE_COLUMNS = [  # a sweep of mode=storage runs (the storage benchmark)
    ("job", "job", "{}"),
    ("status", "status", "{}"),
    ("overrides", "overrides", "{}"),
    ("workload", "workload", "{}"),
    ("storage", "storage", "{}"),
    ("client", "storage_client", "{}"),
    ("clients", "clients", "{}"),
    ("MLPerf samples/s", "mlperf_samples_per_second", "{:.1f}"),
    ("MLPerf MiB/s", "mlperf_mib_per_second", "{:.1f}"),
    ("MLPerf AU %", "mlperf_au_percent", "{:.1f}"),
    ("MLPerf pass", "mlperf_au_pass", "{}"),
    ("samples/s", "samples_per_second", "{:.1f}"),
    ("read MB/s", "read_mb_per_second", "{:.1f}"),
    ("latency p50 ms", "latency_ms_p50", "{:.2f}"),
    ("latency p99 ms", "latency_ms_p99", "{:.2f}"),
    ("AU mean %", "au_percent_mean", "{:.1f}"),
    ("AU min %", "au_percent_min", "{:.1f}"),
    ("AU pass", "au_pass", "{}"),
    ("caching?", "potential_caching", "{}"),
    ("ckpt write GB/s", "checkpoint_write_gbps", "{:.2f}"),
    ("error", "error", "{}"),
]

CSV_RUN_FIELDS = ["job", "status", "overrides", "error"]


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
    try:
        return fmt.format(value)
    except (ValueError, TypeError):
        return str(value)


def columns_of(frame: pd.DataFrame) -> List[Tuple[str, str, str]]:
    """(header, frame column, format) of this sweep's table."""
    if is_storage_sweep(frame):
        return STORAGE_COLUMNS
    base = INFERENCE_COLUMNS if is_sweep_of(frame, "inference") else TRAINING_COLUMNS
    extra = [c for c in ACCURACY_COLUMNS + REPEAT_COLUMNS if c[1] in frame and not all(absent(v) for v in frame[c[1]])]
    return base[:-1] + extra + base[-1:]  # the error stays last


def table(frame: pd.DataFrame) -> pd.DataFrame:
    """The report table as strings: one column per header, one row per run."""
    columns = columns_of(frame)
    blank = pd.Series([None] * len(frame), index=frame.index, dtype=object)
    return pd.DataFrame({header: [cell(v, fmt) for v in frame.get(name, blank)] for header, name, fmt in columns},
                        index=frame.index, dtype=object)


def _cells(shown: pd.DataFrame) -> List[List[str]]:
    return [list(shown.columns), *shown.values.tolist()]


def render_text(shown: pd.DataFrame) -> str:
    """Aligned columns for the terminal, a dashed line under the headers."""
    cells = _cells(shown)
    widths = [max(len(row[i]) for row in cells) for i in range(len(cells[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def render_markdown(shown: pd.DataFrame) -> str:
    escaped = [[c.replace("|", "\\|") for c in row] for row in _cells(shown)]
    lines = ["| " + " | ".join(escaped[0]) + " |", "|" + "---|" * len(escaped[0])]
    lines += ["| " + " | ".join(row) + " |" for row in escaped[1:]]
    return "\n".join(lines)


def write_csv(frame: pd.DataFrame, path: Path) -> None:
    """job, status, overrides, error, then every figure any run has (sorted by name), unformatted;
    list- or dict-valued results (per-rank details) are left out."""
    figures = sorted(c for c in metric_columns(frame)
                     if any(not isinstance(v, (list, dict)) and not absent(v) for v in frame[c]))
    out = frame[CSV_RUN_FIELDS + figures].astype(object)
    out = out.where(~out.map(absent), None)  # NaN (a figure this run lacks) -> an empty field
    out.to_csv(path, index=False, na_rep="", lineterminator="\r\n")


def write_html(shown: pd.DataFrame, images: Sequence[Path], path: Path, title: str) -> None:
    """One page with the table and the plots embedded as data: URIs, so it can be mailed or attached alone."""
    cells = _cells(shown)
    head = "".join(f"<th>{html.escape(c)}</th>" for c in cells[0])
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in cells[1:])
    figures = "".join(
        f'<figure><img alt="{html.escape(p.stem)}" src="data:image/png;base64,'
        f'{base64.b64encode(p.read_bytes()).decode()}"/></figure>' for p in images)
    path.write_text(f"""<!doctype html><html><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>body{{font-family:sans-serif;margin:2em}}table{{border-collapse:collapse;font-size:13px}}
td,th{{border:1px solid #ccc;padding:3px 6px;text-align:right}}th{{background:#eee}}
img{{max-width:100%}}figure{{display:inline-block;margin:1em}}</style></head>
<body><h1>{html.escape(title)}</h1><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>
{figures}</body></html>
""")


def write_markdown(shown: pd.DataFrame, images: Sequence[Path], path: Path, title: str) -> None:
    """The table and links to the plots next to it."""
    path.write_text(f"# {title}\n\n{render_markdown(shown)}\n\n" + "".join(f"![{p.stem}]({p.name})\n" for p in images))
