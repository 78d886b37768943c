"""Bad configs fail fast, as real `python -m bench` processes: a clear message, no traceback,
and no MLflow run (the errors happen before the tracking store is even created)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench import config_dir

EXIT_CONFIG = 2
# Appended to the device-level cases: irrelevant to the check under test, they only make a
# regression (a run that starts instead of being refused) fail in seconds, not minutes.
TINY_RUN = ("train.epochs=1", "train.steps_per_epoch=1", "benchmark.warmup_steps=0", "data.batch_size=2")


def _cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


needs_no_cuda = pytest.mark.skipif(_cuda_available(), reason="checks the CPU-only error path; a CUDA GPU is present")


def run_bench(tmp_path: Path, *overrides: str) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env["MLFLOW_TRACKING_URI"] = f"sqlite:///{tmp_path}/mlflow.db"
    env.pop("HYDRA_FULL_ERROR", None)
    proc = subprocess.run([sys.executable, "-m", "bench", *overrides, f"hydra.run.dir={tmp_path}/run"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=90)
    assert proc.returncode != 0, f"expected a failure for {overrides}:\n{proc.stdout}\n{proc.stderr}"
    assert "Traceback" not in proc.stdout + proc.stderr
    assert_no_mlflow_run(tmp_path)
    return proc


def assert_no_mlflow_run(tmp_path: Path) -> None:
    # Every error here is raised before bench opens the tracker: no store, so no run at all
    # (in particular none left RUNNING).
    assert not (tmp_path / "mlflow.db").exists()
    assert not (tmp_path / "mlruns").exists()


def single_error_line(proc: subprocess.CompletedProcess) -> str:
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("[ERROR]")]
    assert len(errors) == 1, proc.stderr
    return errors[0]


# --- rejected by Hydra and the schema (no bench code runs) --------------------------------

def test_unknown_group_option_lists_the_choices(tmp_path):
    proc = run_bench(tmp_path, "model=nope")
    out = proc.stdout + proc.stderr
    assert "model/nope" in out
    assert "Available options in 'model'" in out
    for option in sorted(p.stem for p in (Path(config_dir()) / "model").glob("*.yaml")):
        assert option in out


def test_wrong_type_names_the_key(tmp_path):
    proc = run_bench(tmp_path, "data.batch_size=abc")
    out = proc.stdout + proc.stderr
    assert "data.batch_size" in out
    assert "abc" in out
    assert "Integer" in out or "int" in out


def test_unknown_key_names_the_key(tmp_path):
    proc = run_bench(tmp_path, "data.batch_sise=8")
    out = proc.stdout + proc.stderr
    assert "data.batch_sise" in out


# --- rejected by bench.validate, before torch is imported ---------------------------------

@pytest.mark.parametrize("overrides, key", [
    (["data.batch_size=0"], "data.batch_size"),
    (["train.steps_per_epoch=0"], "train.steps_per_epoch"),
    (["benchmark.measure_steps=0"], "benchmark.measure_steps"),
    (["model.arch=foo"], "model.arch"),
    (["scheduler=multistep", "scheduler.milestones=[]"], "scheduler.milestones"),
    (["+benchmark.warmup_step=5"], "benchmark.warmup_step"),  # `+` gets past Hydra's schema check
], ids=["batch_size", "steps_per_epoch", "measure_steps", "arch", "milestones", "added_unknown_key"])
def test_semantic_error_is_one_line_with_exit_2(tmp_path, overrides, key):
    proc = run_bench(tmp_path, *overrides)
    assert proc.returncode == EXIT_CONFIG, proc.stderr
    # the whole of stderr is the one sentence; stdout (the metrics line) stays empty
    assert proc.stderr.strip().splitlines() == [single_error_line(proc)]
    assert proc.stdout.strip() == ""
    line = single_error_line(proc)
    assert line.startswith(f"[ERROR] {key}=")
    assert "accepted" in line


def test_unknown_arch_lists_the_known_ones(tmp_path):
    line = single_error_line(run_bench(tmp_path, "model.arch=foo"))
    assert "resnet50" in line and "vit_b_16" in line


# --- rejected after torch looks at the device (a few seconds each) ------------------------

@needs_no_cuda
def test_gpu_experiment_on_cpu_machine_is_refused(tmp_path):
    proc = run_bench(tmp_path, "+experiment=a100_bf16", *TINY_RUN)
    assert proc.returncode == EXIT_CONFIG
    assert "[ERROR] CUDA not available and allow_cpu=false" in proc.stderr
    assert single_error_line(proc).startswith("[ERROR] CUDA not available")
    assert "allow_cpu=true" in single_error_line(proc)  # says how to get past it
    assert proc.stdout.strip() == ""


@needs_no_cuda
def test_amp_fp16_on_cpu_is_refused(tmp_path):
    proc = run_bench(tmp_path, "precision=amp_fp16", "allow_cpu=true", "+experiment=cpu_smoke", *TINY_RUN)
    assert proc.returncode == EXIT_CONFIG
    line = single_error_line(proc)
    assert line.startswith("[ERROR] precision=")
    assert "amp_fp16" in line
    assert "needs a CUDA GPU" in line
    assert proc.stdout.strip() == ""
