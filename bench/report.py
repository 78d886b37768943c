"""`python -m bench.report --sweep <sweep dir | MLflow parent run id>`: compare a sweep's runs.

Writes into --out (default <sweep dir>/report, or ./report-<run id> for an MLflow parent):
report.csv, report.md, report.html (one self-contained page, plots embedded) and four PNGs:
throughput vs GPU count, scaling efficiency vs GPU count, throughput vs batch size, and the
step-time distribution of every run. Prints the table. Given a parent run id, the files are
also logged to that run under report/.

Scaling: runs that differ only in their process count form a group; when the group has a
1-process run, speedup = throughput_N / throughput_1 and efficiency = speedup / N. With
distributed.scaling=weak the per-process batch is fixed (global batch grows with N); with
strong, data.batch_size is the global batch and is split over the processes.
"""

from __future__ import annotations

import argparse
import base64
import csv
import html
import json
import logging
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

import yaml

log = logging.getLogger("bench")

# Keys that say how many processes ran, or where things went: not part of "the same configuration".
NOT_CONFIGURATION = ("distributed.nproc_per_node", "distributed.nnodes", "distributed.name",
                     "distributed.node_rank", "distributed.rdzv_endpoint", "tracking.", "storage.root")

COLUMNS = [  # (header, row field, format)
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


STORAGE_COLUMNS = [  # a sweep of mode=storage runs (the storage benchmark)
    ("job", "job", "{}"),
    ("status", "status", "{}"),
    ("overrides", "overrides", "{}"),
    ("workload", "workload", "{}"),
    ("storage", "storage", "{}"),
    ("client", "storage_client", "{}"),
    ("clients", "clients", "{}"),
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


def is_storage_sweep(rows: Sequence["RunRow"]) -> bool:
    return bool(rows) and all(r.config.get("mode") == "storage" for r in rows)


class ReportError(ValueError):
    """The sweep cannot be read; str() is the one sentence shown to the user."""


@dataclass
class RunRow:
    job: str
    status: str
    overrides: str
    config: Dict[str, str]  # flattened config, values as strings (as MLflow params are)
    metrics: Dict[str, Any]
    step_times_ms: List[float] = field(default_factory=list)
    error: str = ""
    run_id: Optional[str] = None  # its MLflow run, when known

    def value(self, name: str) -> Any:
        if name in ("job", "status", "overrides", "error"):
            return getattr(self, name)
        return self.metrics.get(name, "")


# ---- reading a sweep ------------------------------------------------------------------------


def _flatten(tree: Any, prefix: str = "") -> Dict[str, str]:
    from bench.tracking import flatten

    return {k: str(v) for k, v in flatten(tree, prefix).items()}


def rows_from_sweep_dir(sweep_dir: Path) -> List[RunRow]:
    """One row per job dir (a dir holding .hydra/), successful or not."""
    if not sweep_dir.is_dir():
        raise ReportError(f"--sweep {sweep_dir} is not a directory nor an MLflow run id: pass a multirun "
                          f"directory (multirun/<date>/<time>) or the id of a sweep's parent run")
    job_dirs = sorted((p.parent for p in sweep_dir.glob("*/.hydra")), key=lambda p: (len(p.name), p.name))
    if not job_dirs:
        raise ReportError(f"--sweep {sweep_dir} holds no job directories (no */.hydra): pass a multirun directory")
    rows = []
    for job_dir in job_dirs:
        overrides = yaml.safe_load((job_dir / ".hydra" / "overrides.yaml").read_text()) or []
        summary_path = job_dir / "run_summary.json"
        if summary_path.is_file():
            summary = json.loads(summary_path.read_text())
            timeline = (_read_step_times(job_dir / "step_times.csv") if (job_dir / "step_times.csv").is_file()
                        else _read_step_times(job_dir / "read_latency.csv", "latency_ms"))  # storage runs
            rows.append(RunRow(job_dir.name, "FINISHED", " ".join(overrides), _flatten(summary["config"]),
                               dict(summary["results"]), timeline, run_id=summary.get("mlflow_run_id")))
        else:
            config = yaml.safe_load((job_dir / ".hydra" / "config.yaml").read_text()) or {}
            rows.append(RunRow(job_dir.name, "FAILED", " ".join(overrides), _flatten(config), {},
                               error=_failure_reason(job_dir)))
    return rows


def _read_step_times(path: Path, column: str = "step_time_ms") -> List[float]:
    if not path.is_file():
        return []
    with path.open() as fh:
        return [float(row[column]) for row in csv.DictReader(fh)]


def _failure_reason(job_dir: Path) -> str:
    """The [ERROR]/last error line the job logged, else the last line of its traceback."""
    error_txt = job_dir / "error.txt"
    if error_txt.is_file():
        lines = [line for line in error_txt.read_text().splitlines() if line.strip()]
        return lines[-1] if lines else "failed"
    log_file = job_dir / "bench.log"
    if log_file.is_file():
        errors = [line for line in log_file.read_text().splitlines() if "][ERROR]" in line]
        if errors:
            return errors[-1].split("] ", 3)[-1]
    return "failed before writing results"


def rows_from_mlflow(parent_run_id: str, tracking_uri: str) -> tuple:
    """One row per child run of `parent_run_id`; returns (rows, client)."""
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=tracking_uri)
    try:
        parent = client.get_run(parent_run_id)
    except Exception as exc:  # noqa: BLE001 - mlflow raises its own exception types per store
        raise ReportError(f"--sweep {parent_run_id} is neither a directory nor a run in the MLflow store at "
                          f"{tracking_uri} ({type(exc).__name__})") from None
    children = client.search_runs([parent.info.experiment_id],
                                  filter_string=f"tags.mlflow.parentRunId = '{parent_run_id}'",
                                  order_by=["attributes.start_time ASC"], max_results=10000)
    if not children:
        raise ReportError(f"MLflow run {parent_run_id} has no child runs: pass the parent run of a sweep")
    rows = []
    for run in children:
        metrics = dict(run.data.metrics)
        params = dict(run.data.params)
        for key in ("model.arch", "precision.name", "distributed.scaling", "distributed.name", "data.name"):
            metrics.setdefault({"model.arch": "model", "precision.name": "precision",
                                "distributed.scaling": "scaling", "distributed.name": "distributed",
                                "data.name": "data"}[key], params.get(key, ""))
        history = client.get_metric_history(run.info.run_id, "step_time_ms") if metrics else []
        rows.append(RunRow(run.data.tags.get("sweep.job", run.info.run_name), run.info.status,
                           run.data.tags.get("overrides", ""), params, metrics,
                           [m.value for m in sorted(history, key=lambda m: m.step)],
                           error=run.data.tags.get("error", ""), run_id=run.info.run_id))
    return rows, client


# ---- scaling ---------------------------------------------------------------------------------


def configuration_key(row: RunRow) -> tuple:
    return tuple(sorted((k, v) for k, v in row.config.items() if not k.startswith(NOT_CONFIGURATION)))


def add_scaling(rows: Sequence[RunRow]) -> None:
    """speedup and scaling efficiency against the 1-process run of the same configuration."""
    baselines: Dict[tuple, float] = {}
    for row in rows:
        if row.status == "FINISHED" and int(row.metrics.get("world_size", 0) or 0) == 1:
            baselines[configuration_key(row)] = float(row.metrics["images_per_second"])
    for row in rows:
        if row.status != "FINISHED" or not row.metrics:
            continue
        row.metrics["data_wait_percent"] = 100.0 * float(row.metrics.get("data_wait_fraction", 0.0))
        base = baselines.get(configuration_key(row))
        if base:
            n = int(row.metrics["world_size"])
            speedup = float(row.metrics["images_per_second"]) / base
            row.metrics["speedup"] = speedup
            row.metrics["scaling_efficiency"] = speedup / n
            row.metrics["scaling_efficiency_percent"] = 100.0 * speedup / n


# ---- tables ------------------------------------------------------------------------------------


def _cell(row: RunRow, name: str, fmt: str) -> str:
    value = row.value(name)
    if value == "" or value is None:
        return ""
    try:
        return fmt.format(value)
    except (ValueError, TypeError):
        return str(value)


def table(rows: Sequence[RunRow]) -> List[List[str]]:
    columns = STORAGE_COLUMNS if is_storage_sweep(rows) else COLUMNS
    return [[header for header, _, _ in columns]] + [[_cell(r, name, fmt) for _, name, fmt in columns] for r in rows]


def render_text(cells: List[List[str]]) -> str:
    widths = [max(len(row[i]) for row in cells) for i in range(len(cells[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def render_markdown(cells: List[List[str]]) -> str:
    escape = [[c.replace("|", "\\|") for c in row] for row in cells]
    lines = ["| " + " | ".join(escape[0]) + " |", "|" + "---|" * len(escape[0])]
    lines += ["| " + " | ".join(row) + " |" for row in escape[1:]]
    return "\n".join(lines)


def write_csv(rows: Sequence[RunRow], path: Path) -> None:
    metric_keys = sorted({k for r in rows for k, v in r.metrics.items() if not isinstance(v, (list, dict))})
    with path.open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["job", "status", "overrides", "error", *metric_keys])
        for r in rows:
            writer.writerow([r.job, r.status, r.overrides, r.error, *[r.metrics.get(k, "") for k in metric_keys]])


# ---- plots -------------------------------------------------------------------------------------


def _series(rows: Sequence[RunRow], x: str, group: Sequence[str]) -> Dict[str, List[tuple]]:
    lines: Dict[str, List[tuple]] = {}
    for r in rows:
        if r.status != "FINISHED" or x not in r.metrics:
            continue
        label = ", ".join(f"{g.replace('_', ' ')}={r.metrics.get(g, '?')}" for g in group)
        lines.setdefault(label, []).append((float(r.metrics[x]), r))
    return {k: sorted(v, key=lambda p: p[0]) for k, v in sorted(lines.items())}


def _unit(rows: Sequence[RunRow]) -> str:
    devices = {str(r.metrics.get("device", "")) for r in rows if r.metrics}
    return "GPUs" if devices == {"cuda"} else "processes (GPUs, or CPU ranks)"


def _count_word(unit: str) -> str:
    return "GPU" if unit == "GPUs" else "process"


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _saver(out: Path, written: List[Path]) -> Any:
    plt = _pyplot()

    def save(fig: Any, name: str) -> None:
        fig.tight_layout()
        path = out / name
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)

    return save


def plot_storage(rows: Sequence[RunRow], out: Path, title: str) -> List[Path]:
    """A storage sweep: throughput and AU vs client count, and per-request read latency."""
    plt = _pyplot()
    written: List[Path] = []
    save = _saver(out, written)
    series = _series(rows, "clients", ["workload", "storage"])

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for label, points in series.items():
        ax.plot([p[0] for p in points], [p[1].metrics["samples_per_second"] for p in points], marker="o", label=label)
    ax.set(title=f"Read throughput vs clients ({title})", xlabel="Clients (simulated accelerators)",
           ylabel="Samples/s (all clients)")
    _finish_axes(ax)
    save(fig, "throughput_vs_clients.png")

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for label, points in series.items():
        ax.plot([p[0] for p in points], [p[1].metrics["au_percent_min"] for p in points], marker="o", label=f"{label} (min)")
    thresholds = {r.metrics.get("au_threshold_percent") for r in rows if r.metrics.get("au_threshold_percent")}
    for threshold in sorted(thresholds):
        ax.axhline(float(threshold), color="grey", linestyle="--", linewidth=1, label=f"pass threshold ({threshold:g}%)")
    ax.set(title=f"Accelerator utilization vs clients ({title})", xlabel="Clients (simulated accelerators)",
           ylabel="AU (%) = compute time / wall time")
    _finish_axes(ax)
    ax.set_ylim(0, 105)  # a percentage: keep the top (and the threshold) in view
    save(fig, "au_vs_clients.png")

    _distribution(rows, f"Read latency per request ({title})", "Latency (ms)", save, "read_latency_distribution.png",
                  lambda r: f"job {r.job}\n{r.metrics.get('clients', '')} clients")
    return written


def _distribution(rows: Sequence[RunRow], what: str, ylabel: str, save: Any, name: str, label: Any) -> None:
    plt = _pyplot()
    with_values = [r for r in rows if r.step_times_ms]
    fig, ax = plt.subplots(figsize=(max(7, 0.9 * len(with_values) + 2), 4.5))
    if with_values:
        ax.boxplot([r.step_times_ms for r in with_values], showfliers=True)
        ax.set_xticks(range(1, len(with_values) + 1))
        ax.set_xticklabels([label(r) for r in with_values], fontsize=8)
    else:
        ax.text(0.5, 0.5, "no per-step figures in this sweep", transform=ax.transAxes, ha="center", va="center")
    ax.set(title=what, xlabel="Run", ylabel=ylabel)
    ax.grid(True, axis="y", alpha=0.3)
    save(fig, name)


def plot_all(rows: Sequence[RunRow], out: Path, title: str) -> List[Path]:
    if is_storage_sweep(rows):
        return plot_storage(rows, out, title)
    plt = _pyplot()
    unit = _unit(rows)
    written: List[Path] = []
    save = _saver(out, written)

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for label, points in _series(rows, "world_size", ["precision", "batch_size"]).items():
        ax.plot([p[0] for p in points], [p[1].metrics["images_per_second"] for p in points], marker="o", label=label)
    ax.set(title=f"Throughput vs {_count_word(unit)} count ({title})", xlabel=f"Number of {unit}",
           ylabel="Throughput (images/s, all processes)")
    _finish_axes(ax)
    save(fig, "throughput_vs_gpus.png")

    fig, ax = plt.subplots(figsize=(7, 4.5))
    plotted = False
    for label, points in _series(rows, "world_size", ["precision", "batch_size"]).items():
        points = [p for p in points if "scaling_efficiency_percent" in p[1].metrics]
        if points:
            plotted = True
            ax.plot([p[0] for p in points], [p[1].metrics["scaling_efficiency_percent"] for p in points],
                    marker="o", label=f"{label} ({points[0][1].metrics.get('scaling', 'weak')} scaling)")
    ax.axhline(100.0, color="grey", linestyle="--", linewidth=1, label="ideal (100%)")
    ax.set(title=f"Scaling efficiency vs {_count_word(unit)} count ({title})", xlabel=f"Number of {unit}",
           ylabel="Scaling efficiency (%) = T_N / (N x T_1)")
    if not plotted:
        ax.text(0.5, 0.5, "no 1-process run of the same configuration in this sweep",
                transform=ax.transAxes, ha="center", va="center")
    _finish_axes(ax)
    save(fig, "scaling_efficiency.png")

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for label, points in _series(rows, "batch_size", ["precision", "world_size"]).items():
        ax.plot([p[0] for p in points], [p[1].metrics["images_per_second"] for p in points], marker="o", label=label)
    ax.set(title=f"Throughput vs batch size ({title})", xlabel="Batch size per process (images)",
           ylabel="Throughput (images/s, all processes)")
    _finish_axes(ax)
    save(fig, "throughput_vs_batch.png")

    _distribution(rows, f"Step-time distribution per run ({title})", "Step time (ms)", save, "step_time_distribution.png",
                  lambda r: f"job {r.job}\n{r.metrics.get('precision', '')} x{r.metrics.get('world_size', '')}"
                            f"\nbs {r.metrics.get('batch_size', '')}")
    return written


def _finish_axes(ax: Any) -> None:
    from matplotlib.ticker import MaxNLocator

    ax.grid(True, alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # process counts and batch sizes are whole
    ax.set_xlim(left=0.5)
    ax.set_ylim(bottom=0)


def write_html(cells: List[List[str]], images: Sequence[Path], path: Path, title: str) -> None:
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


# ---- the whole report -----------------------------------------------------------------------


def keep_varying_overrides(rows: Sequence[RunRow]) -> None:
    """Show only the overrides that tell the runs apart (the swept ones)."""
    split = [r.overrides.split() for r in rows]
    common = set.intersection(*(set(s) for s in split)) if len(rows) > 1 else set()
    for row, overrides in zip(rows, split):
        row.overrides = " ".join(o for o in overrides if o not in common)


def write_report(rows: List[RunRow], out: Path, title: str) -> List[Path]:
    out.mkdir(parents=True, exist_ok=True)
    add_scaling(rows)
    keep_varying_overrides(rows)
    cells = table(rows)
    csv_path, md_path, html_path = out / "report.csv", out / "report.md", out / "report.html"
    write_csv(rows, csv_path)
    images = plot_all(rows, out, title)
    md_path.write_text(f"# {title}\n\n{render_markdown(cells)}\n\n" +
                       "".join(f"![{p.stem}]({p.name})\n" for p in images))
    write_html(cells, images, html_path, title)
    print(render_text(cells), flush=True)
    return [csv_path, md_path, html_path, *images]


def build_report(sweep_dir: Path, out: Path) -> tuple:
    """The report of a sweep dir: (files written, rows)."""
    rows = rows_from_sweep_dir(sweep_dir)
    return write_report(rows, out, f"sweep {sweep_dir}"), rows


def log_scaling_to_runs(rows: Sequence[RunRow], client: Any) -> None:
    """speedup / scaling_efficiency become metrics of the child runs too (comparable in mlflow ui)."""
    for row in rows:
        if row.run_id and "speedup" in row.metrics:
            from bench.tracking import Tracker

            Tracker(client, row.run_id, "").log_metrics(
                {"speedup": row.metrics["speedup"], "scaling_efficiency": row.metrics["scaling_efficiency"]})


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.report", description=__doc__.split("\n\n")[0])
    parser.add_argument("--sweep", required=True, help="a multirun directory, or the MLflow run id of a sweep's parent")
    parser.add_argument("--out", type=Path, help="where the files go (default <sweep dir>/report or ./report-<run id>)")
    parser.add_argument("--tracking-uri", help="MLflow store (default: MLFLOW_TRACKING_URI, else sqlite:///mlflow.db)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    try:
        if Path(args.sweep).exists():
            files, _ = build_report(Path(args.sweep), args.out or Path(args.sweep) / "report")
        else:
            from bench.tracking import Tracker, resolve_tracking_uri

            uri = args.tracking_uri or resolve_tracking_uri(None, Path.cwd())
            rows, client = rows_from_mlflow(args.sweep, uri)
            files = write_report(rows, args.out or Path(f"report-{args.sweep[:8]}"), f"sweep {args.sweep}")
            Tracker(client, args.sweep, uri).log_artifacts(files, artifact_path="report")
    except ReportError as exc:
        print(f"[ERROR] {exc}", file=sys.stderr)
        return 2
    print(f"report: {files[2].resolve()}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
