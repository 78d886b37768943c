"""python -m bench.tools.gpu_check, the first command on a new GPU box. This machine has no GPU:
the refusal is real; the checks' judging is exercised on real CPU runs where a check can run on a
CPU, and on recorded GPU-shaped results (mocked_gpu) where it cannot."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from bench.tools import gpu_check

CPU_BASE = ["allow_cpu=true", "model.arch=resnet18", "data=synthetic", "data.batch_size=4", "data.image_size=32",
            "data.num_classes=10", "train.epochs=1", "train.steps_per_epoch=3", "benchmark.warmup_steps=1",
            "benchmark.progress=false", "tracking.enabled=false"]


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the machine without CUDA")
def test_without_cuda_it_says_so_in_one_line_and_exits_2(capsys):
    assert gpu_check.main([]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("[ERROR] gpu_check needs a CUDA GPU: torch.cuda.is_available() is False")


def test_the_checks_that_can_run_on_a_cpu_pass_through_real_bench_processes(tmp_path):
    """bf16 (CPU autocast), CUDA-event timing (on a CPU: the wall clock, synchronised steps) and
    inference: each a real `python -m bench` process whose final line the judge reads."""
    chosen = [c for c in gpu_check.checks(1, str(tmp_path / "digits")) if c.name in ("bf16", "cuda_events", "inference")]
    lines = []
    rows = gpu_check.run_checks(chosen, CPU_BASE, tmp_path, echo=lines.append)
    assert [(c.name, ok) for c, ok, _ in rows] == [("bf16", True), ("cuda_events", True), ("inference", True)], lines
    assert "latency p50" in rows[2][2] and "gpu_check: 3 of 3 checks passed" in gpu_check.table(rows)


def recorded(metrics_by_check):
    """A runner that answers from GPU-shaped results instead of running bench (mocked_gpu)."""
    def runner(overrides, run_dir: Path):
        name = run_dir.name
        if name == "profiler":
            run_dir.mkdir(parents=True)
            (run_dir / "trace_rank0.json").write_text(json.dumps({"traceEvents": [{"cat": "kernel"}, {"cat": "cpu_op"}]}))
        found = metrics_by_check.get(name)
        return (found, "") if found is not None else (None, "[ERROR] run failed: CUDA error: an illegal memory access")
    return runner


GOOD = {"images_per_second": 2400.0, "final_loss": 6.9, "measured_steps": 20, "world_size": 1}


def test_a_gpu_box_that_passes_every_check_exits_0_mocked_gpu(tmp_path, capsys):
    results = {
        "fp32": {**GOOD, "tf32": False}, "tf32": {**GOOD, "tf32": True}, "amp_fp16": {**GOOD, "grad_scaler": True},
        "bf16": {**GOOD, "autocast_dtype": "bfloat16"}, "channels_last": {**GOOD, "channels_last": True},
        "compile": {**GOOD, "compile": True},
        "cuda_events": {**GOOD, "step_time_ms_mean": 50.0, "elapsed_seconds": 1.02},
        "ddp_nccl": {**GOOD, "world_size": 8, "params_in_sync": True},
        "nvml": {**GOOD, "gpu_util_mean_pct": 97.0, "gpu_power_mean_w": 390.0, "energy_joules": 400.0,
                 "images_per_joule": 6.0},
        "find_max_batch": {**GOOD, "batch_size_requested": 65536, "batch_size_found": 512, "batch_size": 512},
        "profiler": GOOD, "inference": {**GOOD, "mode": "inference", "latency_ms_p50": 9.0, "latency_ms_p99": 11.0},
        "pinned_loader": {**GOOD, "data": "imagefolder", "data_wait_fraction": 0.02},
        "fit_to_measure": {**GOOD, "fit_to_measure": True},
    }
    rows = gpu_check.run_checks(gpu_check.checks(8, "/digits"), [], tmp_path, runner=recorded(results),
                                echo=lambda line: None)
    assert all(ok for _, ok, _ in rows), [(c.name, figures) for c, ok, figures in rows if not ok]
    assert len(rows) == 14 and "gpu_check: 14 of 14 checks passed" in gpu_check.table(rows)


def test_what_a_failing_gpu_box_looks_like_mocked_gpu(tmp_path):
    results = {"compile": {**GOOD, "compile": False, "compile_fallback": "inductor: no triton"},
               "cuda_events": {**GOOD, "step_time_ms_mean": 20.0, "elapsed_seconds": 1.0},  # 0.4: events miss work
               "ddp_nccl": {**GOOD, "world_size": 8, "params_in_sync": False},
               "find_max_batch": {**GOOD, "batch_size_requested": 65536, "batch_size_found": 65536}}  # never OOMed
    chosen = [c for c in gpu_check.checks(8, "/digits") if c.name in (*results, "nvml", "tf32")]
    rows = {c.name: (ok, figures) for c, ok, figures in gpu_check.run_checks(chosen, [], tmp_path,
                                                                              runner=recorded(results),
                                                                              echo=lambda line: None)}
    assert not any(ok for ok, _ in rows.values())
    assert "fell back: inductor: no triton" in rows["compile"][1]
    assert "= 0.400" in rows["cuda_events"][1] and "weights in sync: False" in rows["ddp_nccl"][1]
    assert rows["tf32"][1] == "[ERROR] run failed: CUDA error: an illegal memory access"
