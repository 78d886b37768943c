"""The inference scenario (mode=inference): the checks every run of a model has (dataset, device,
precision on that device, model, what fits: bench.runtime.scenario) and the out-of-memory
explanation, then forward passes in one process (bench.infer.loop); a sweep runs each job in a
process of its own, as training does. Its config rules (`InferScenario.check`: forward passes in one
process, so training-only keys are refused, not ignored) run when the config loads; torch-free, as
this module is.

Its report: the radix_metrics dict, the run's files and its MLflow record. Files: latency.csv (a row
per measured batch: latency_ms, data_wait_ms), run_summary.json, summary.csv, repeats.csv
(benchmark.repeats > 1), and the profiler's two files when asked for. Per-batch latency percentiles
(latency_ms_p50/p95/p99) sit beside images/s; the sweep report plots the latency distribution where
a training sweep plots step times.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from bench.config import BenchConfig
from bench.config.fields import changed_keys
from bench.config.run import TrainConfig
from bench.errors import ConfigError
from bench.infer.result import InferMetrics, InferOutcome, InferResult
from bench.maths.stats import step_time_stats
from bench.rank_context import RankContext
from bench.results import read_summary
from bench.runtime.model_names import check_arch, check_training_for_accuracy, once_per_run, refuse_find_max_batch
from bench.runtime.reporting import ModelReport, model_figures, repeat_throughputs
from bench.runtime.scenario import ModelScenario
from bench.runtime.sweep_view import model_view

# How an inference run shows in a sweep: its table columns and its plots (the per-batch latency
# where a training sweep plots step times), and what compare samples.
FLOPS_COLUMN = [("GFLOPs/image", "gflops_per_image_forward", "{:.2f}", 8)]  # a figure of its `extra`


TIMELINE = ("Per-batch latency", "Latency per batch (ms)", "latency_distribution.png")
VIEW = model_view(InferMetrics, TIMELINE, "latency_ms", FLOPS_COLUMN)  # latency_ms: the latencies' MLflow series
LATENCY = ("mean", "p50", "p95", "p99", "min", "max")  # InferMetrics' latency_ms_<figure>s


def summarize(outcome: InferOutcome, config: BenchConfig) -> InferMetrics:
    result = outcome.result
    # the per-batch latency's mean, percentiles, min and max, as training's step times have them ({} without
    # a measured batch: the fields' None default, left out of the final line)
    spread = step_time_stats(result.latency_ms)
    latency = {f"latency_ms_{name}": spread[f"step_time_ms_{name}"] for name in LATENCY if spread}
    return InferMetrics(
        **model_figures(outcome, result, config, result.extra.get("gflops_per_image_forward")),
        **latency,
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


TRAINING_ONLY_GROUPS = ("optimizer", "scheduler", "checkpoint")
TRAINING_ONLY_TRAIN_KEYS = ("eval_every", "target_accuracy", "label_smoothing", "resume")  # epochs/steps size inference


class InferScenario(ModelScenario):
    loop_modules = ("bench.infer.scenario", "bench.infer.loop")
    report_class = InferReport  # one rank; a launcher gives every sweep job a fresh process

    def check(self, config: BenchConfig) -> None:
        """mode=inference's config rules: training-only keys refused."""
        check_arch(config.model)  # torch-free: before any run, from compose_config too
        check_training_for_accuracy(config)
        training_only = {
            **once_per_run(config),  # what benchmark.repeats refuses too (bench.runtime.model_names)
            "benchmark.breakdown": config.benchmark.breakdown,
            "storage.save_checkpoint": config.storage.save_checkpoint,
        }
        for key, value in training_only.items():
            if value:
                raise ConfigError(key, value, "its default with mode=inference (a training-only key)")
        if config.train.mlperf_log:  # MLPerf Training's log: events of a training run to its target
            raise ConfigError(
                "train.mlperf_log", True, "false with mode=inference (MLPerf Training's log times a training run)"
            )
        # each training-only key whose value is not the schema's default
        groups = [(group, getattr(config, group)) for group in TRAINING_ONLY_GROUPS]
        changed = [key for group, current in groups for key in changed_keys(group, current, type(current)())]
        for key, value in changed + changed_keys("train", config.train, TrainConfig(), TRAINING_ONLY_TRAIN_KEYS):
            raise ConfigError(
                key,
                value,
                "its default with mode=inference (a training-only key: inference "
                "runs no optimizer, schedule or checkpoint)",
            )
        if config.distributed.world_size > 1:
            raise ConfigError(
                "distributed.nproc_per_node",
                config.distributed.nproc_per_node,
                "1 with mode=inference (one process; sweep data.batch_size or run one job per GPU)",
            )
        refuse_find_max_batch(config)

    def run_name(self, config: BenchConfig, batch_size: Optional[int] = None) -> str:
        return f"infer-{config.model.arch}-{config.precision.name}-bs{config.data.batch_size}"

    def measure(
        self, config: BenchConfig, device: Any, ctx: RankContext, monitor: Any, out_dir: Path, heartbeat: Any
    ) -> InferResult:
        from bench.infer.loop import infer

        return infer(config, device, monitor=monitor, ctx=ctx, on_step=heartbeat, out_dir=out_dir)
