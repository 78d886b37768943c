"""A training job's numbers from its ranks: per-rank timings merged (a DDP step is as slow as its
slowest rank: step i's time and data wait are the max over ranks; throughput is the sum of each
rank's images / its own window) into the typed record, TrainMetrics, with its efficiency figures."""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Dict, List, Sequence

from bench.config import BenchConfig
from bench.maths.stats import UNSTABLE_CV, step_time_stats
from bench.results import RepeatFigures
from bench.runtime.fit_watch import fit_figures
from bench.runtime.reporting import Execution, efficiency
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


def repeat_throughputs(ranks: Sequence[TrainResult]) -> List[float]:
    """images/s of each measured window (benchmark.repeats), summed over ranks like the run's own."""
    count = min((len(r.repeat_seconds) for r in ranks), default=0)
    return [
        sum(r.repeat_images[i] / r.repeat_seconds[i] for r in ranks if r.repeat_seconds[i] > 0) for i in range(count)
    ]


def summarize(ranks: Sequence[TrainResult], config: BenchConfig, device: str, device_name: str) -> TrainMetrics:
    """The run's record from every rank's result: every number a run reports, plus the settings that
    change speed."""
    result, world_size = merge_ranks(ranks), len(ranks)
    seconds = result.window_seconds
    images = result.images * world_size
    data_wait_s = sum(result.data_wait_ms) / 1000.0
    if world_size > 1:  # global: the sum over ranks of each one's images / its own window
        throughput = sum(r.images_per_second for r in ranks)
    else:
        throughput = images / seconds if seconds > 0 else 0.0
    stats = step_time_stats(result.step_times_ms)
    wait_fraction = data_wait_s / seconds if seconds > 0 else 0.0
    steps_per_epoch = config.train.steps_per_epoch
    if steps_per_epoch is None and result.epochs:
        steps_per_epoch = max(e.steps for e in result.epochs)  # one pass over the dataset
    execution = Execution.of(config, result.precision, result.compile, device, device_name, wait_fraction)
    extra = {**result.extra.figures(path=False), **(result.accuracy.figures() if result.accuracy is not None else {})}
    record = TrainMetrics(
        images_per_second=throughput,
        total_images=images,
        elapsed_seconds=seconds,
        lr=result.base_lr,
        batch_size=result.batch_size,
        global_batch_size=result.batch_size * world_size,
        epochs=config.train.epochs,
        steps_per_epoch=steps_per_epoch,
        measured_steps=result.measured_steps,
        warmup_steps=result.warmup_steps,
        world_size=world_size,
        images_per_second_per_device=throughput / world_size,
        distributed=str(config.distributed.name),
        scaling=str(config.distributed.scaling),
        **(rank_figures(ranks) if world_size > 1 else {}),
        **stats,
        data_wait_seconds=data_wait_s,
        data_wait_fraction=wait_fraction,
        peak_memory_mb=result.peak_memory_bytes / 2**20,
        final_loss=result.final_loss,
        final_lr=result.final_lr,
        parameters=result.parameters,
        param_checksum=result.param_checksum,
        model=config.model.arch,
        data=str(config.data.name),
        image_size=config.data.image_size,
        optimizer=str(config.optimizer.name),
        nesterov=bool(config.optimizer.nesterov) if str(config.optimizer.name) == "sgd" else None,
        norm=str(config.model.norm),
        fused_optimizer=result.fused_optimizer,
        execution=execution,
        gpu=result.gpu.figures(),
        extra=extra,
        repeat=RepeatFigures.of(repeat_throughputs(ranks)),
        # progressive phases change the FLOPs per image: no single TFLOP/s figure
        efficiency=efficiency(
            execution,
            None if config.data.progressive else extra.get("gflops_per_image_fwd_bwd"),
            throughput,
            world_size,
            result.images,
            result.gpu.energy_joules,
        ),
        fit=fit_figures(result.fit, [r.fit for r in ranks if r.rank != 0]),
    )
    record.unstable = (record.step_time_cv or 0.0) > UNSTABLE_CV
    return record
