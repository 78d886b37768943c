"""The inference scenario's report: the radix_metrics dict, the run's files and its MLflow record.

Files: latency.csv (a row per measured batch: latency_ms, data_wait_ms), run_summary.json,
summary.csv, repeats.csv (benchmark.repeats > 1), and the profiler's two files when asked for.
Per-batch latency percentiles (latency_ms_p50/p95/p99) sit beside images/s; the sweep report
plots the latency distribution where a training sweep plots step times.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, List

from bench.config import BenchConfig
from bench.infer.result import InferMetrics, InferOutcome, InferResult
from bench.maths.stats import mean, percentile
from bench.results import read_summary
from bench.runtime.reporting import ModelReport, model_figures, repeat_throughputs
from bench.runtime.sweep_view import model_view

if TYPE_CHECKING:
    import pandas as pd


# How an inference run shows in a sweep: its table columns and its plots (the per-batch latency
# where a training sweep plots step times), and what compare samples.
FLOPS_COLUMN = [("GFLOPs/image", "gflops_per_image_forward", "{:.2f}", 8)]  # a figure of its `extra`


def inference_plots(frame: "pd.DataFrame", out: Path, title: str) -> List[Path]:
    from bench.runtime.plots import plot_training

    return plot_training(frame, out, title, ("Per-batch latency", "Latency per batch (ms)", "latency_distribution.png"))


TIMELINE_METRIC = "latency_ms"  # the MLflow series of the per-batch latencies
VIEW = model_view(InferMetrics, inference_plots, TIMELINE_METRIC, FLOPS_COLUMN)


def summarize(outcome: InferOutcome, config: BenchConfig) -> InferMetrics:
    result = outcome.result
    latency, gflops = result.latency_ms, result.extra.get("gflops_per_image_forward")
    return InferMetrics(
        **model_figures(outcome, result, config, gflops),
        # None without a measured batch: the fields' default, left out of the final line
        latency_ms_mean=mean(latency),
        latency_ms_p50=percentile(latency, 50),
        latency_ms_p95=percentile(latency, 95),
        latency_ms_p99=percentile(latency, 99),
        latency_ms_min=min(latency, default=None),
        latency_ms_max=max(latency, default=None),
        extra=dict(result.extra),
    )


@dataclass
class InferReport(ModelReport):
    view = VIEW  # what a sweep and compare show of inference runs
    TIMELINE_FILE, TIMELINE_INDEX, TIMELINE_COLUMN = "latency.csv", "batch", "latency_ms"

    @classmethod
    def from_outcome(cls, outcome: InferOutcome, config: BenchConfig) -> "InferReport":
        return cls(
            result=outcome.result,
            record=summarize(outcome, config),
            repeat_rates=repeat_throughputs(outcome.ranks),
            require_fit=bool(config.benchmark.require_fit),
        )

    def headline(self) -> str:
        r = self.record
        return (
            f"inference {r.model} {r.execution.precision} bs={r.batch_size} on {r.execution.device_name}: "
            f"{r.images_per_second:.1f} images/s, latency p50 {r.latency_ms_p50:.2f} ms, "
            f"p99 {r.latency_ms_p99:.2f} ms ({r.measured_steps} batches, {r.elapsed_seconds:.2f} s)"
        )

    @classmethod
    def from_files(cls, job_dir: Path) -> "InferReport":
        """The report of a finished run, read back from its directory (to upload it later)."""
        summary = read_summary(job_dir)
        record = InferMetrics.from_metrics(summary["results"])
        result = InferResult(**cls.read_window(job_dir, summary, record), latency_ms=cls.timeline(job_dir))
        return cls(result=result, record=record, repeat_rates=cls.repeats(job_dir))
