"""The inference scenario's report: the radix_metrics dict, the run's files and its MLflow record.

Files: latency.csv (a row per measured batch: latency_ms, data_wait_ms), run_summary.json,
summary.csv, repeats.csv (benchmark.repeats > 1), and the profiler's two files when asked for.
Per-batch latency percentiles (latency_ms_p50/p95/p99) sit beside images/s; the sweep report
plots the latency distribution where a training sweep plots step times.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, List, Mapping, Optional, Union

from bench.config import BenchConfig
from bench.infer import sweep_view
from bench.infer.result import InferMetrics, InferOutcome, InferResult
from bench.maths.stats import mean, percentile
from bench.results import RepeatFigures, read_summary, read_window, write_csv
from bench.runtime.fit_watch import fit_figures, fit_problems, fit_tags
from bench.runtime.reporting import PROFILE_FILES, Execution, efficiency, read_repeats, write_repeats
from bench.scenario_base import BaseReport


def summarize(result: InferResult, config: BenchConfig, device: str, device_name: str) -> InferMetrics:
    seconds, images = result.window_seconds, result.images
    throughput = images / seconds if seconds > 0 else 0.0
    data_wait_s = sum(result.data_wait_ms) / 1000.0
    wait_fraction = data_wait_s / seconds if seconds > 0 else 0.0
    latency = result.latency_ms
    execution = Execution.of(config, result.precision, result.compile, device, device_name, wait_fraction)
    return InferMetrics(
        images_per_second=throughput,
        total_images=images,
        elapsed_seconds=seconds,
        batch_size=result.batch_size,
        global_batch_size=result.batch_size,
        measured_steps=result.measured_steps,
        warmup_steps=result.warmup_steps,
        images_per_second_per_device=throughput,
        # None without a measured batch: the fields' default, left out of the final line
        latency_ms_mean=mean(latency),
        latency_ms_p50=percentile(latency, 50),
        latency_ms_p95=percentile(latency, 95),
        latency_ms_p99=percentile(latency, 99),
        latency_ms_min=min(latency, default=None),
        latency_ms_max=max(latency, default=None),
        data_wait_seconds=data_wait_s,
        data_wait_fraction=wait_fraction,
        peak_memory_mb=result.peak_memory_bytes / 2**20,
        parameters=result.parameters,
        model=config.model.arch,
        data=str(config.data.name),
        image_size=config.data.image_size,
        execution=execution,
        gpu=result.gpu.figures(),
        extra=dict(result.extra),
        repeat=RepeatFigures.of(rates(result)),
        efficiency=efficiency(
            execution, result.extra.get("gflops_per_image_forward"), throughput, 1, images, result.gpu.energy_joules
        ),
        fit=fit_figures(result.fit),
    )


def rates(result: InferResult) -> List[float]:
    return [i / s for i, s in zip(result.repeat_images, result.repeat_seconds, strict=True) if s > 0]


@dataclass
class InferReport(BaseReport):
    view = sweep_view.VIEW  # what a sweep and compare show of inference runs (bench.infer.sweep_view)
    TIMELINE_FILE, TIMELINE_COLUMN = "latency.csv", "latency_ms"
    result: InferResult
    record: InferMetrics  # the radix_metrics contract, typed
    repeat_rates: List[float] = field(default_factory=list)
    require_fit: bool = False  # benchmark.require_fit: an unfit window is a problem (the run ends FAILED)

    @property
    def interrupted(self) -> Optional[str]:
        return self.result.interrupted  # a signal during the profiled batches: reported, then KILLED (bench.app)

    @property
    def problems(self) -> List[str]:
        return fit_problems(self.record.fit, self.require_fit)  # nothing but the files is written after the measurement

    @classmethod
    def from_outcome(cls, outcome: Union[InferOutcome, Mapping[str, Any]], config: BenchConfig) -> "InferReport":
        """`outcome`: an InferOutcome (or the same as a dict: result, device, device_name)."""
        known = outcome if isinstance(outcome, InferOutcome) else InferOutcome(**outcome)
        return cls(
            known.result,
            summarize(known.result, config, known.device, known.device_name),
            rates(known.result),
            require_fit=bool(config.benchmark.require_fit),
        )

    def headline(self) -> str:
        r = self.record
        return (
            f"inference {r.model} {r.execution.precision} bs={r.batch_size} on {r.execution.device_name}: "
            f"{r.images_per_second:.1f} images/s, latency p50 {r.latency_ms_p50:.2f} ms, "
            f"p99 {r.latency_ms_p99:.2f} ms ({r.measured_steps} batches, {r.elapsed_seconds:.2f} s)"
        )

    def write(
        self, out_dir: Path, config: Mapping[str, Any], environment: Mapping[str, Any], run_id: Optional[str]
    ) -> List[Path]:
        out_dir.mkdir(parents=True, exist_ok=True)
        result = self.result
        summary = {
            "results": self.metrics,
            "compile": result.compile,
            "environment": dict(environment),
            "config": dict(config),
            "mlflow_run_id": run_id,
        }
        pairs = zip(result.latency_ms, result.data_wait_ms, strict=True)  # one latency and one wait per batch
        rows = [(i, f"{latency:.4f}", f"{wait:.4f}") for i, (latency, wait) in enumerate(pairs, start=1)]
        files = [
            write_csv(out_dir / self.TIMELINE_FILE, ["batch", "latency_ms", "data_wait_ms"], rows),
            *self.write_summary(out_dir, summary),
        ]
        if len(self.repeat_rates) > 1:
            files.append(write_repeats(out_dir, result.repeat_images, result.repeat_seconds, self.repeat_rates))
        return files + [Path(f) for f in result.files if Path(f).is_file()]

    def log_to(self, tracker: Any, files: List[Path], out_dir: Path, log_series: bool) -> None:
        if not tracker.active:
            return
        if log_series:
            tracker.log_series(sweep_view.TIMELINE_METRIC, self.result.latency_ms)
        if len(self.repeat_rates) > 1:
            tracker.log_series(sweep_view.REPEATS_METRIC, self.repeat_rates)
        r = self.record
        tracker.set_tags(
            {
                "mode": r.mode,
                "model": r.model,
                "precision": r.execution.precision,
                "device_name": r.execution.device_name,
                **fit_tags(r.fit),
            }
        )
        self.log_files(tracker, files, out_dir)

    @classmethod
    def from_files(cls, job_dir: Path) -> "InferReport":
        """The report of a finished run, read back from its directory (to upload it later)."""
        record = InferMetrics.from_metrics(read_summary(job_dir)["results"])
        result = InferResult(
            **read_window(job_dir, record, cls.TIMELINE_FILE, PROFILE_FILES), latency_ms=cls.timeline(job_dir)
        )
        return cls(result, record, cls.repeats(job_dir))

    @classmethod
    def repeats(cls, job_dir: Path) -> List[float]:
        return read_repeats(job_dir)
