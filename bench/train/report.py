"""The training scenario's report: per-rank timings merged into the job's numbers (the typed
record, TrainMetrics, with its efficiency figures), the radix_metrics dict, the run's files and its
MLflow record.

Files: metrics_epoch.jsonl (a line per epoch), step_times.csv (a row per measured step),
run_summary.json (results, epochs, compile, environment, config, ranks) and summary.csv.
A DDP step is as slow as its slowest rank, so step i's time (and data wait) is the max over
ranks; throughput is the sum of each rank's images / its own window.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from bench.config import BenchConfig
from bench.machine.fitness import Verdict
from bench.maths.stats import UNSTABLE_CV, step_time_stats
from bench.results import read_summary, write_jsonl
from bench.runtime.reporting import ModelReport, model_figures, repeat_throughputs
from bench.runtime.sweep_view import model_view
from bench.train.result import CheckpointWrite, EpochRecord, TrainMetrics, TrainOutcome, TrainResult

# MLflow's per-epoch series (step = epoch): epoch_<figure> for each of an epoch's figures
EPOCH_SERIES = ("images_per_second", "seconds", "loss", "lr", "data_wait_seconds", "compute_seconds")
RANK_FIELDS = ("rank", "host", "images", "window_seconds", "peak_memory_bytes", "param_checksum")  # run_summary.json


# ---- how a training run shows in a sweep and in `compare`: its table columns, its plots, what compare
# samples (per-step images/s), and the accuracy curve it reads back (bench.analysis asks the report
# class, TrainReport, for VIEW, and branches on no mode name).
# the sweep's own figures (bench.analysis.scaling), among the record's columns (header, key, format, at)
SCALING_COLUMNS = [
    ("data wait %", "data_wait_percent", "{:.1f}", 11),
    ("speedup", "speedup", "{:.2f}", 12),
    ("scaling eff %", "scaling_efficiency_percent", "{:.1f}", 13),
]


# plots: throughput and scaling efficiency vs process count, throughput vs batch, step times, accuracy
TIMELINE = ("Step-time distribution", "Step time (ms)", "step_time_distribution.png")
VIEW = model_view(TrainMetrics, TIMELINE, "step_time_ms", SCALING_COLUMNS)  # step_time_ms: the steps' MLflow series


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def read_val_curve(job_dir: Path) -> List[Tuple[float, float]]:
    """(wall_seconds, val_top1) of every evaluated epoch in metrics_epoch.jsonl, in time order;
    epochs without an evaluation (no val_top1) and lines that are not JSON objects are skipped."""
    path = job_dir / "metrics_epoch.jsonl"
    if not path.is_file():
        return []
    points = []
    for line in path.read_text().splitlines():
        try:
            epoch = json.loads(line)
        except ValueError:
            continue
        if isinstance(epoch, dict) and _finite(epoch.get("val_top1")) and _finite(epoch.get("wall_seconds")):
            points.append((float(epoch["wall_seconds"]), float(epoch["val_top1"])))
    return sorted(points)


def merge_ranks(ranks: Sequence[TrainResult]) -> TrainResult:
    """Rank 0's result with the step timeline of the whole job (the max over ranks per step)."""
    result = ranks[0]
    if len(ranks) <= 1:
        return result
    return replace(  # zip: the steps every rank has
        result,
        step_times_ms=[max(step) for step in zip(*(r.step_times_ms for r in ranks), strict=False)],
        data_wait_ms=[max(step) for step in zip(*(r.data_wait_ms for r in ranks), strict=False)],
        window_seconds=max(r.window_seconds for r in ranks),
        peak_memory_bytes=max(r.peak_memory_bytes for r in ranks),
    )


def rank_figures(ranks: Sequence[TrainResult]) -> Dict[str, Any]:
    """Per-rank throughput, so a straggler shows, and whether DDP kept the weights identical (the global
    images/s, their sum, is summarize's)."""
    throughputs = [r.images_per_second for r in ranks]
    return {
        "rank_images_per_second_min": min(throughputs),
        "rank_images_per_second_max": max(throughputs),
        "rank_slowest": min(range(len(ranks)), key=lambda i: throughputs[i]),
        "rank_spread": 1.0 - min(throughputs) / max(throughputs) if max(throughputs) > 0 else 0.0,
        "params_in_sync": len({r.param_checksum for r in ranks}) == 1,
    }


def summarize(outcome: TrainOutcome, config: BenchConfig) -> TrainMetrics:
    """The run's record from every rank's result: every number a run reports, plus the settings that
    change speed."""
    ranks, result = outcome.ranks, merge_ranks(outcome.ranks)
    if (steps_per_epoch := config.train.steps_per_epoch) is None and result.epochs:
        steps_per_epoch = max(e.steps for e in result.epochs)  # one pass over the dataset
    extra = {**result.extra.figures(path=False), **(result.accuracy.figures() if result.accuracy is not None else {})}
    # progressive phases change the FLOPs per image: no single TFLOP/s figure
    gflops = None if config.data.progressive else extra.get("gflops_per_image_fwd_bwd")
    record = TrainMetrics(
        **model_figures(outcome, result, config, gflops),
        lr=result.base_lr,
        epochs=config.train.epochs,
        steps_per_epoch=steps_per_epoch,
        distributed=str(config.distributed.name),
        scaling=str(config.distributed.scaling),
        **(rank_figures(ranks) if len(ranks) > 1 else {}),
        **step_time_stats(result.step_times_ms),
        final_loss=result.final_loss,
        final_lr=result.final_lr,
        param_checksum=result.param_checksum,
        optimizer=str(config.optimizer.name),
        nesterov=bool(config.optimizer.nesterov) if str(config.optimizer.name) == "sgd" else None,
        norm=str(config.model.norm),
        fused_optimizer=result.fused_optimizer,
        extra=extra,
    )
    record.unstable = (record.step_time_cv or 0.0) > UNSTABLE_CV
    return record


@dataclass
class TrainReport(ModelReport):
    # what a sweep and compare show of training runs (bench.analysis asks; VIEW above)
    view = VIEW
    # the per-step file and column the timeline is read back from
    TIMELINE_FILE, TIMELINE_COLUMN = "step_times.csv", "step_time_ms"

    ranks: List[TrainResult] = field(default_factory=list)  # every rank's (read back: their run_summary.json figures)
    run_name: Optional[str] = None  # a new MLflow run name (the batch benchmark.find_max_batch found)

    @classmethod
    def from_outcome(cls, outcome: TrainOutcome, config: BenchConfig) -> "TrainReport":
        return cls(
            result=merge_ranks(outcome.ranks),
            record=summarize(outcome, config),
            repeat_rates=repeat_throughputs(outcome.ranks),
            require_fit=bool(config.benchmark.require_fit),
            ranks=list(outcome.ranks),
        )

    def headline(self) -> str:
        r = self.record
        return (
            f"{r.model} {r.execution.precision} bs={r.batch_size} x{r.world_size} on {r.execution.device_name}: "
            f"{r.images_per_second:.1f} images/s, step p50 {r.step_time_ms_p50:.2f} ms, "
            f"p99 {r.step_time_ms_p99:.2f} ms ({r.measured_steps} steps, {r.elapsed_seconds:.2f} s)"
        )

    def write(
        self, out_dir: Path, config: Mapping[str, Any], environment: Mapping[str, Any], run_id: Optional[str]
    ) -> List[Path]:
        """metrics_epoch.jsonl, and run_summary.json with the epochs and every rank's figures."""
        # an epoch's line: what it measured; evaluation and phase keys only where they apply
        epochs = [{k: v for k, v in asdict(e).items() if v is not None} for e in self.result.epochs]
        ranks = [
            {**{k: getattr(r, k) for k in RANK_FIELDS}, "fit": r.fit.as_dict() if r.fit is not None else {}}
            for r in self.ranks
        ]
        summary = {"results": self.metrics, "epochs": epochs, "compile": self.result.compile}
        summary.update(environment=dict(environment), config=dict(config), mlflow_run_id=run_id, ranks=ranks)
        return [*self.write_run(out_dir, summary), write_jsonl(out_dir / "metrics_epoch.jsonl", epochs)]

    @property
    def problems(self) -> List[str]:
        """What failed after the measurement (it does not void it, but the run is not FINISHED)."""
        error = CheckpointWrite.read(self.record.figure).checkpoint_error
        save_error = self.record.figure("checkpoint_save_error")
        found = [f"the checkpoint could not be written: {error}"] if error is not None else []
        if save_error is not None:  # checkpoint.every_epochs: none was written after it
            found.append(f"a training checkpoint could not be written: {save_error} (no later checkpoint was written)")
        return found + super().problems

    def log_to(self, tracker: Any, files: List[Path], out_dir: Path, log_series: bool) -> None:
        """The epochs' series, the run's new name and the checkpoint it resumed from, then the model runs' own."""
        if tracker.active:
            for number, epoch in enumerate(self.result.epochs, start=1):
                series = {f"epoch_{name}": getattr(epoch, name) for name in EPOCH_SERIES}
                if epoch.val_top1 is not None:  # the accuracy curve, by epoch (wall seconds: metrics_epoch.jsonl)
                    series.update(val_top1=epoch.val_top1, val_top5=epoch.val_top5)
                    series.update(epoch_eval_seconds=epoch.eval_seconds, epoch_wall_seconds=epoch.wall_seconds)
                tracker.log_metrics(series, step=epoch.epoch if epoch.repeat is None else number)
            if self.run_name:
                tracker.rename(self.run_name)
            # which checkpoint train.resume=auto (or a path) continued from
            if (resumed := self.record.figure("resumed_from")) is not None:
                tracker.log_params({"resumed_from": resumed})
        super().log_to(tracker, files, out_dir, log_series)

    @classmethod
    def from_files(cls, job_dir: Path) -> "TrainReport":
        """The report of a finished run, read back from its directory (to upload it later)."""
        summary = read_summary(job_dir)
        record = TrainMetrics.from_metrics(summary["results"])
        result = TrainResult(
            **cls.read_window(job_dir, summary, record),
            step_times_ms=cls.timeline(job_dir),
            epochs=[EpochRecord(**e) for e in summary["epochs"]],
            base_lr=record.lr,
            final_lr=record.final_lr,
            final_loss=record.final_loss,
        )
        ranks = [
            TrainResult(
                **{k: v for k, v in r.items() if k not in ("images", "fit")},
                measured_images=r["images"],
                fit=Verdict.from_dict(r["fit"]) if r.get("fit") else None,
            )
            for r in summary.get("ranks", [])
        ]
        return cls(result=result, record=record, repeat_rates=cls.repeats(job_dir), ranks=ranks)

    @classmethod
    def read_back(cls, job_dir: Path) -> Dict[str, Any]:
        """The sweep frame's columns of its own: the accuracy curve (metrics_epoch.jsonl)."""
        return {"val_curve": read_val_curve(job_dir)}

    @classmethod
    def read_back_mlflow(cls, client: Any, run_id: str) -> Dict[str, Any]:
        """The accuracy curve: (wall seconds, val top-1) per evaluated epoch, from the per-epoch series
        log_to logs (step = epoch; step 0 is the final figure)."""

        def by_epoch(name: str) -> Dict[int, float]:
            return {m.step: m.value for m in client.get_metric_history(run_id, name) if m.step > 0}

        walls, top1 = by_epoch("epoch_wall_seconds"), by_epoch("val_top1")
        return {"val_curve": [(walls[e], top1[e]) for e in sorted(walls) if e in top1]}
