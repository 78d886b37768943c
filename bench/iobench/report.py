"""The storage benchmark's report: simulated accelerators merged, files written, MLflow fed.

Merging (MLPerf Storage / sai3-bench conventions, bench.iobench.figures): MLPerf's figures
first (samples/s with each epoch's first step, AU without it, pass on the mean), bench's stricter
ones beside them (warm-up step out, pass on the minimum); latency percentiles over all requests
of all accelerators; per-accelerator figures in clients.csv. A figure with no samples behind it
(no request measured, no compute emulated) is left out, with a warning, never reported as 0.
"""

from __future__ import annotations

import csv
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Optional

from bench.iobench.figures import au_shown, epoch_rows, per_epoch
from bench.iobench.result import EpochStats, ReaderResult, Request, StorageMetrics
from bench.maths.stats import mean
from bench.report_view import View
from bench.results import read_summary, write_csv
from bench.runtime.reporting import fit_tags
from bench.runtime.sweep_view import FIT_COLUMNS
from bench.scenario_base import BaseReport

if TYPE_CHECKING:
    import pandas as pd


# ---- how a storage run shows in a sweep and in `compare` (its columns and sample: StorageMetrics's) ----
TIMELINE_METRIC = "read_latency_ms"  # the MLflow series of the per-request read latencies
REPEATS_METRIC = "run_samples_per_second"  # the MLflow series of each measured run's samples/s (storage.runs > 1)


def storage_plots(frame: "pd.DataFrame", out: Path, title: str) -> List[Path]:
    """A storage sweep's plots: read throughput and accelerator utilization vs client count (when the
    sweep moved the client count), and the per-request read latency of every run (the view picks
    them; pandas and matplotlib imported when drawn)."""
    from bench.analysis import plots
    from bench.analysis.cells import absent, shown

    figures = plots.Figures(out)
    series = list(plots.points_by_series(frame, "clients", ["workload", "storage"]))
    clients = "Clients (simulated accelerators)"  # the x axis
    if plots.along_a_swept_axis(series, "clients"):  # the client count was swept (a workload sweep at one: no axis)
        fig, ax = figures.new()
        for label, points in series:
            plots.draw_line(ax, points, "clients", "mlperf_samples_per_second", f"{label} (MLPerf: first step in)")
            plots.draw_line(ax, points, "clients", "samples_per_second", f"{label} (steady: warm-up step out)")
        ax.set(title=f"Read throughput vs clients ({title})", xlabel=clients, ylabel="Samples/s (all clients)")
        plots.finish_axes(ax)
        figures.save(fig, "throughput_vs_clients.png")

        fig, ax = figures.new()
        for label, points in series:
            plots.draw_line(ax, points, "clients", "mlperf_au_percent", f"{label} (MLPerf: mean)")
            plots.draw_line(ax, points, "clients", "au_percent_min", f"{label} (min)")
        for threshold in sorted({t for t in frame.get("au_threshold_percent", []) if not absent(t) and t}):
            ax.axhline(
                float(threshold), color="grey", linestyle="--", linewidth=1, label=f"pass threshold ({threshold:g}%)"
            )
        ax.set_title(f"Accelerator utilization vs clients ({title})")
        ax.set(xlabel=clients, ylabel="AU (%) = compute time / wall time")
        plots.finish_axes(ax)
        ax.set_ylim(0, 105)  # a percentage: keep the top (and the threshold) in view
        figures.save(fig, "au_vs_clients.png")
    plots.draw_distribution(
        figures,
        frame,
        f"Read latency per request ({title})",
        "Latency (ms)",
        "read_latency_distribution.png",
        lambda r: f"job {r['job']}\n{shown(r.get('clients'))} clients",
    )
    return figures.written


VIEW = View.of(
    StorageMetrics,
    optional_columns=FIT_COLUMNS,  # the fit column, when judged
    plots=storage_plots,
    label_columns=[("", "workload", "{}"), ("", "storage", "{}"), ("x", "clients", "int")],  # names a run in compare
    timeline_metric=TIMELINE_METRIC,
    repeats_metric=REPEATS_METRIC,
    named_in_config={"storage.workload.name": "workload", "storage.name": "storage"},
    shown_config=("mode",),
)


def run_rates(runs: List[Dict[str, Any]]) -> List[float]:
    """samples/s of each measured run (runs.csv's rows), [] with one run: what compare samples."""
    rates = [row.get(VIEW.sample.figure) for row in runs]
    return [float(r) for r in rates if r not in (None, "")] if len(runs) > 1 else []


def _figure(value: Optional[float], unit: str = "", digits: int = 1) -> str:
    return f"{value:.{digits}f}{unit}" if value is not None else "n/a"


@dataclass
class StorageReport(BaseReport):
    view = VIEW  # what a sweep and compare show of storage runs
    # the per-request file and column the timeline is read back from
    TIMELINE_FILE, TIMELINE_COLUMN = "read_latency.csv", "latency_ms"

    results: List[ReaderResult]  # one per simulated accelerator (and measured run)
    record: StorageMetrics  # the radix_metrics contract, typed
    prepare: Dict[str, Any] = field(default_factory=dict)  # why the dataset was (re)written or reused
    runs: List[Dict[str, Any]] = field(default_factory=list)  # the headline figures of each measured run
    clients: List[Dict[str, Any]] = field(default_factory=list)  # one row per simulated accelerator

    def headline(self) -> str:
        r, f = self.record, self.record.figures
        where = f"storage {r.workload} on {r.storage_url} x{r.clients} accelerators"
        if f.mlperf_samples_per_second is None:  # checkpoint_only
            return (
                f"{where}: checkpoint write {_figure(f.checkpoint_store_write_gbps, ' GB/s', 3)}, read "
                f"{_figure(f.checkpoint_store_read_gbps, ' GB/s', 3)} ({f.checkpoint_count or 0} x "
                f"{(f.checkpoint_bytes or 0) / 1e6:.1f} MB)"
            )
        at = f.au_threshold_percent or 0.0  # set wherever an accelerator is emulated (computation_time > 0)
        au = (
            f"AU {au_shown(f.mlperf_au_percent, at)} {'PASS' if f.mlperf_au_pass else 'FAIL'} at {at:g}% "
            f"(strict: min {au_shown(f.au_percent_min, at)}, {'pass' if f.au_pass else 'fail'})"
            if r.computation_time > 0
            else "I/O ceiling (computation_time=0)"
        )
        return (
            f"{where}: MLPerf {_figure(f.mlperf_samples_per_second)} samples/s, "
            f"{_figure(f.mlperf_mib_per_second)} MiB/s, {au}; strict {_figure(f.samples_per_second)} "
            f"samples/s, {_figure(f.read_mb_per_second)} MB/s; request p50 "
            f"{_figure(f.latency_ms_p50, ' ms', 2)} p99 {_figure(f.latency_ms_p99, ' ms', 2)}"
        )

    def write(
        self, out_dir: Path, config: Mapping[str, Any], environment: Mapping[str, Any], run_id: Optional[str]
    ) -> List[Path]:
        """run_summary.json, summary.csv (one row), epochs.csv (accelerator x epoch), clients.csv
        (one row per accelerator), read_latency.csv (one row per measured request), runs.csv
        (one row per measured run) when there were several."""
        epochs = [{**row, "run": r.run} for r in self.results for row in epoch_rows([r])]
        requests = [
            dict(client=r.client, epoch=q.epoch, key=q.key, bytes=q.bytes, latency_ms=round(q.latency_ms, 4), run=r.run)
            for r in self.results
            for q in r.requests
        ]
        summary: Dict[str, Any] = dict(results=self.metrics, epochs=epochs, clients=self.clients, runs=self.runs)
        summary.update(prepare=self.prepare, environment=dict(environment), config=dict(config), mlflow_run_id=run_id)
        files = [
            *self.write_summary(out_dir, summary),
            write_csv(out_dir / "epochs.csv", list(epochs[0]) if epochs else ["client", "epoch"], epochs),
            write_csv(out_dir / "read_latency.csv", ["client", "epoch", "key", "bytes", "latency_ms", "run"], requests),
        ]
        if self.clients:
            files.append(write_csv(out_dir / "clients.csv", list(self.clients[0]), self.clients))
        if len(self.runs) > 1:
            files.append(write_csv(out_dir / "runs.csv", list(self.runs[0]), self.runs))
        return files

    @property
    def problems(self) -> List[str]:
        """What failed after the read phase was measured (the checkpoint phase)."""
        error = self.record.figures.checkpoint_error
        return [f"the checkpoint phase failed: {error}"] if error is not None else []

    def log_to(self, tracker: Any, files: List[Path], out_dir: Path, log_series: bool) -> None:
        """Everything but the metrics (logged first, on their own): per-epoch series, tags, artifacts."""
        if not tracker.active:
            return
        for row in epoch_rows([r for r in self.results if r.run == self.results[0].run and r.client == 0]):
            tracker.log_metrics(
                {"epoch_au_percent": row["au_percent"], "epoch_samples": row["samples"]}, step=row["epoch"]
            )
        for epoch, figures in self.epoch_series().items():
            tracker.log_metrics(figures, step=epoch)
        if log_series:
            requests = sorted((q for r in self.results for q in r.requests), key=lambda q: q.finished)
            tracker.log_series(TIMELINE_METRIC, [q.latency_ms for q in requests])
        if len(self.runs) > 1:  # what compare samples of a storage run read back from MLflow (step = run)
            tracker.log_series(REPEATS_METRIC, run_rates(self.runs))
        tracker.set_tags({**self.record.tags(), **fit_tags(self.record.fit)})
        self.log_files(tracker, files, out_dir)

    def epoch_series(self) -> Dict[int, Dict[str, float]]:
        """Per epoch (of the first measured run): MLPerf samples/s summed over accelerators and AU
        averaged over them, as MLflow series next to the AU."""
        first = [r.epochs for r in self.results if r.run == self.results[0].run] if self.results else []
        series: Dict[int, Dict[str, float]] = {}
        for epoch, value in per_epoch(first, lambda e: e.mlperf_samples_per_second, sum).items():
            series.setdefault(epoch, {})["epoch_samples_per_second"] = value
        if (self.record.computation_time or 0) > 0:
            for epoch, value in per_epoch(first, lambda e: e.mlperf_au, mean).items():
                series.setdefault(epoch, {})["epoch_mlperf_au_percent"] = 100.0 * value
        return series

    @classmethod
    def from_files(cls, job_dir: Path) -> "StorageReport":
        """The report of a finished run, read back from its directory (to upload it later)."""
        summary = read_summary(job_dir)
        clients: Dict[tuple, ReaderResult] = {}

        def client(row: Mapping[str, Any]) -> ReaderResult:
            key = (int(row.get("run") or 0), int(row["client"]))
            return clients.setdefault(key, ReaderResult(key[1], [], run=key[0]))

        kinds = {f.name: int if f.default is MISSING else type(f.default) for f in fields(EpochStats)}
        for row in summary["epochs"]:
            client(row).epochs.append(
                EpochStats(**{k: kinds[k](v) for k, v in row.items() if k in kinds and v not in ("", None)})
            )
        with (job_dir / cls.TIMELINE_FILE).open() as fh:
            for order, row in enumerate(csv.DictReader(fh)):
                client(row).requests.append(
                    Request(row["key"], int(row["epoch"]), int(row["bytes"]), float(row["latency_ms"]), float(order))
                )
        return cls(
            [clients[c] for c in sorted(clients)],
            StorageMetrics.from_metrics(summary["results"]),
            summary.get("prepare", {}),
            summary.get("runs", []),
            summary.get("clients", []),
        )

    @classmethod
    def repeats(cls, job_dir: Path) -> List[float]:
        """samples/s of each measured run (storage.runs > 1: runs.csv; [] with one run)."""
        return run_rates(read_summary(job_dir).get("runs", []))
