"""Runs on a real CUDA GPU (marked `gpu`, skipped without one): the CUDA-event timing, the
precisions a GPU has, NVML sampling and the environment it records. `python -m pytest -m gpu`
on one GPU: under 90 s (issue 27 §5), every window short (tiny models, or 1 s of ResNet-50); the
test that needs 2 GPUs is a skip with its reason on a one-GPU box."""

from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.gpu


@pytest.fixture
def gpu_tiny(tiny):
    return [a for a in tiny if a != "+experiment=cpu_smoke"] + ["allow_cpu=false"]


@pytest.mark.parametrize(
    "precision,dtype,scaler",
    [("fp32", "none", False), ("tf32", "none", False), ("amp_fp16", "float16", True), ("bf16", "bfloat16", False)],
)
def test_gpu_precisions_with_channels_last(bench, gpu_tiny, tmp_path, precision, dtype, scaler):
    proc = bench.run(
        *gpu_tiny,
        f"precision={precision}",
        "precision.channels_last=true",
        "tracking.enabled=false",
        f"hydra.run.dir={tmp_path}/run",
    )
    metrics = bench.metrics(proc)
    assert metrics["device"] == "cuda"
    assert metrics["autocast_dtype"] == dtype and metrics["grad_scaler"] is scaler
    assert metrics["peak_memory_mb"] > 0
    assert metrics["images_per_second"] == pytest.approx(metrics["total_images"] / metrics["elapsed_seconds"])


def test_gpu_events_agree_with_strict_sync_and_nvml_samples(bench, gpu_tiny, tmp_path):
    """CUDA-event step times without host syncs vs benchmark.sync=true: same work, close numbers;
    NVML samples the window (at its start and end at least, however short)."""
    figures = {}
    for sync in ("false", "true"):
        proc = bench.run(
            *gpu_tiny,
            "model=resnet50",
            "data.image_size=224",
            "data.batch_size=64",
            "train.steps_per_epoch=10000",
            "benchmark.warmup_steps=5",
            f"benchmark.sync={sync}",
            "benchmark.measure_seconds=1",
            "tracking.enabled=false",
            f"hydra.run.dir={tmp_path}/run-{sync}",
        )
        figures[sync] = bench.metrics(proc)
    assert figures["true"]["images_per_second"] == pytest.approx(figures["false"]["images_per_second"], rel=0.15)
    assert figures["false"]["gpu_samples"] >= 2 and figures["false"]["gpu_util_mean_pct"] > 0
    assert figures["false"]["device_name"] != "cpu"


@pytest.mark.skipif(
    torch.cuda.device_count() < 2, reason=f"needs 2 CUDA GPUs; this box has {torch.cuda.device_count()}"
)
def test_gpu_ddp_nccl_two_gpus(bench, gpu_tiny, tmp_path):
    """2 ranks on 2 GPUs with NCCL: one GPU per rank, weights in sync, global throughput summed."""
    proc = bench.run(
        *gpu_tiny,
        "distributed=ddp",
        "distributed.nproc_per_node=2",
        "tracking.enabled=false",
        f"hydra.run.dir={tmp_path}/run",
    )
    metrics = bench.metrics(proc)
    assert metrics["world_size"] == 2 and metrics["params_in_sync"] is True
    assert metrics["images_per_second"] == pytest.approx(
        metrics["rank_images_per_second_min"] + metrics["rank_images_per_second_max"]
    )
