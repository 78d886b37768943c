"""A training job's numbers from its ranks: per-rank timings merged (a DDP step is as slow as its
slowest rank: step i's time and data wait are the max over ranks; throughput is the sum of each
rank's images / its own window) into the typed record, TrainMetrics, with its efficiency figures."""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Dict, Sequence

from bench.config import BenchConfig
from bench.maths.stats import UNSTABLE_CV, step_time_stats
from bench.runtime.reporting import model_figures
from bench.train.result import TrainMetrics, TrainResult


def merge_ranks(ranks: Sequence[TrainResult]) -> TrainResult:
    """Rank 0's result with the step timeline of the whole job (the max over ranks per step)."""
    result = ranks[0]
    if len(ranks) <= 1:
        return result
    steps = min(len(r.step_times_ms) for r in ranks)
    waits = min(len(r.data_wait_ms) for r in ranks)
    return replace(
        result,
        step_times_ms=[max(r.step_times_ms[i] for r in ranks) for i in range(steps)],
        data_wait_ms=[max(r.data_wait_ms[i] for r in ranks) for i in range(waits)],
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


def summarize(ranks: Sequence[TrainResult], config: BenchConfig, device: str, device_name: str) -> TrainMetrics:
    """The run's record from every rank's result: every number a run reports, plus the settings that
    change speed."""
    result = merge_ranks(ranks)
    steps_per_epoch = config.train.steps_per_epoch
    if steps_per_epoch is None and result.epochs:
        steps_per_epoch = max(e.steps for e in result.epochs)  # one pass over the dataset
    extra = {**result.extra.figures(path=False), **(result.accuracy.figures() if result.accuracy is not None else {})}
    # progressive phases change the FLOPs per image: no single TFLOP/s figure
    gflops = None if config.data.progressive else extra.get("gflops_per_image_fwd_bwd")
    record = TrainMetrics(
        **model_figures(ranks, result, config, device, device_name, gflops),
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
