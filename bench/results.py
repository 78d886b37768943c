"""Turn a TrainResult into the reported numbers and the files of the output directory.

Files: metrics_epoch.jsonl (a line per epoch), step_times.csv (a row per measured step),
run_summary.json (config + environment + results) and summary.csv (one row). The last
stdout line of a run is `{"radix_metrics": {...}}` (the original Radix contract, extended).
"""

from __future__ import annotations

import csv
import json
import math
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any, Dict, List, Mapping, Sequence

UNSTABLE_CV = 0.2  # step-time coefficient of variation above which a result is flagged
AU_THRESHOLD = 0.90  # accelerator utilization below which a run is input-bound (MLPerf Storage's ResNet-50 bar)


def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (numpy's default method); q in [0, 100]."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100.0
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def step_time_stats(times_ms: Sequence[float]) -> Dict[str, float]:
    if not times_ms:
        return {}
    mean = sum(times_ms) / len(times_ms)
    std = math.sqrt(sum((t - mean) ** 2 for t in times_ms) / len(times_ms))
    return {
        "step_time_ms_mean": mean,
        "step_time_ms_p50": percentile(times_ms, 50),
        "step_time_ms_p95": percentile(times_ms, 95),
        "step_time_ms_p99": percentile(times_ms, 99),
        "step_time_ms_min": min(times_ms),
        "step_time_ms_max": max(times_ms),
        "step_time_ms_std": std,
        "step_time_cv": std / mean if mean else 0.0,
    }


def merge_ranks(result: Any, ranks: Sequence[Mapping[str, Any]]) -> tuple:
    """Rank 0's TrainResult, with the step timeline of the whole job: a DDP step is as slow
    as its slowest rank, so step i's time (and data wait) is the max over ranks."""
    if len(ranks) <= 1:
        return result, list(ranks)
    steps = min(len(r["step_times_ms"]) for r in ranks)
    waits = min(len(r["data_wait_ms"]) for r in ranks)
    merged = replace(
        result,
        step_times_ms=[max(r["step_times_ms"][i] for r in ranks) for i in range(steps)],
        data_wait_ms=[max(r["data_wait_ms"][i] for r in ranks) for i in range(waits)],
        window_seconds=max(r["window_seconds"] for r in ranks),
        peak_memory_bytes=max(r["peak_memory_bytes"] for r in ranks),
    )
    return merged, list(ranks)


def rank_figures(ranks: Sequence[Mapping[str, Any]]) -> Dict[str, Any]:
    """Per-rank throughput, so a straggler shows, and whether DDP kept the weights identical."""
    throughputs = [r["images"] / r["window_seconds"] if r["window_seconds"] > 0 else 0.0 for r in ranks]
    checksums = {r["param_checksum"] for r in ranks}
    return {
        "images_per_second": sum(throughputs),  # global: the sum over ranks
        "rank_images_per_second_min": min(throughputs),
        "rank_images_per_second_max": max(throughputs),
        "rank_slowest": min(range(len(ranks)), key=lambda i: throughputs[i]),
        "rank_spread": 1.0 - min(throughputs) / max(throughputs) if max(throughputs) > 0 else 0.0,
        "params_in_sync": len(checksums) == 1,
    }


def summarize(result: Any, cfg: Mapping[str, Any], device: str, device_name: str, world_size: int,
              ranks: Sequence[Mapping[str, Any]] = ()) -> Dict[str, Any]:
    """The radix_metrics dict: every number a run reports, plus the settings that change speed."""
    seconds = result.window_seconds
    images = result.images * world_size
    data_wait_s = sum(result.data_wait_ms) / 1000.0
    stats = step_time_stats(result.step_times_ms)
    per_rank = rank_figures(ranks) if len(ranks) > 1 else {}
    throughput = per_rank.get("images_per_second", images / seconds if seconds > 0 else 0.0)
    metrics: Dict[str, Any] = {
        "images_per_second": throughput,
        "total_images": images,
        "elapsed_seconds": seconds,
        "lr": result.base_lr,
        "batch_size": result.batch_size,
        "global_batch_size": result.batch_size * world_size,
        "epochs": cfg["train"]["epochs"],
        "steps_per_epoch": cfg["train"]["steps_per_epoch"],
        "measured_steps": result.measured_steps,
        "warmup_steps": result.warmup_steps,
        "world_size": world_size,
        "images_per_second_per_device": throughput / world_size,
        "distributed": cfg["distributed"]["name"],
        "scaling": cfg["distributed"]["scaling"],
        **{k: v for k, v in per_rank.items() if k != "images_per_second"},
        **stats,
        "unstable": stats.get("step_time_cv", 0.0) > UNSTABLE_CV,
        "data_wait_seconds": data_wait_s,
        "data_wait_fraction": data_wait_s / seconds if seconds > 0 else 0.0,
        "peak_memory_mb": result.peak_memory_bytes / 2**20,
        "final_loss": result.final_loss,
        "final_lr": result.final_lr,
        "parameters": result.parameters,
        "model": cfg["model"]["arch"],
        "data": cfg["data"]["name"],
        "image_size": cfg["data"]["image_size"],
        "optimizer": cfg["optimizer"]["name"],
        "fused_optimizer": result.fused_optimizer,
        **result.precision,
        "compile": bool(result.compile.get("active")),
        "cudnn_benchmark": bool(cfg["cudnn_benchmark"]),
        "device": device,
        "device_name": device_name,
    }
    metrics.update(input_pipeline(metrics["data_wait_fraction"]))
    if result.compile.get("fallback_reason"):
        metrics["compile_fallback"] = result.compile["fallback_reason"]
    return metrics


def input_pipeline(data_wait_fraction: float) -> Dict[str, Any]:
    """Accelerator utilization au = the share of the measured window not spent waiting for data
    (compute time / wall time, as MLPerf Storage defines AU); input_bound when au < 0.90.
    Real data options' dataset facts (dataset_size, corrupt_skipped, ...) come in TrainResult.extra."""
    au = min(1.0, max(0.0, 1.0 - data_wait_fraction))
    return {"au": au, "input_bound": au < AU_THRESHOLD}


def write_outputs(out_dir: Path, cfg: Mapping[str, Any], environment: Mapping[str, Any],
                  metrics: Mapping[str, Any], result: Any, extra: Mapping[str, Any] | None = None) -> List[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    epochs_path = out_dir / "metrics_epoch.jsonl"
    with epochs_path.open("w") as fh:
        for record in result.epochs:
            fh.write(json.dumps(asdict(record)) + "\n")

    steps_path = out_dir / "step_times.csv"
    with steps_path.open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["step", "step_time_ms", "data_wait_ms"])
        for index, (step_ms, wait_ms) in enumerate(zip(result.step_times_ms, result.data_wait_ms), start=1):
            writer.writerow([index, f"{step_ms:.4f}", f"{wait_ms:.4f}"])

    summary_path = out_dir / "run_summary.json"
    summary = {"results": dict(metrics), "epochs": [asdict(e) for e in result.epochs],
               "compile": result.compile, "environment": dict(environment), "config": dict(cfg), **(extra or {})}
    summary_path.write_text(json.dumps(summary, indent=2, default=str) + "\n")

    csv_path = out_dir / "summary.csv"
    with csv_path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(metrics))
        writer.writeheader()
        writer.writerow(dict(metrics))
    return [epochs_path, steps_path, summary_path, csv_path]


def headline(metrics: Mapping[str, Any]) -> str:
    if metrics.get("mode") == "storage":  # the storage benchmark has no model or steps of its own
        from bench.iobench.report import headline as storage_headline

        return storage_headline(metrics)
    return ("{model} {precision} bs={batch_size} x{world_size} on {device_name}: {images_per_second:.1f} images/s, "
            "step p50 {step_time_ms_p50:.2f} ms, p99 {step_time_ms_p99:.2f} ms ({measured_steps} steps, "
            "{elapsed_seconds:.2f} s)").format(**metrics)


def final_line(metrics: Mapping[str, Any]) -> str:
    return json.dumps({"radix_metrics": dict(metrics)}, default=str)
