"""Bad configs fail fast, as real `python -m bench` processes: one `[ERROR]` line naming the
key, the value and what is accepted, exit 2, no traceback, and no MLflow run (the errors
happen before the tracking store is even created). The value checks themselves are unit
tests (tests/unit/test_config.py); these prove the command-line path."""

from __future__ import annotations

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


def refused(bench, tmp_path: Path, *overrides: str, module: str = "bench") -> str:
    """Run, expect exit 2 with exactly one [ERROR] line, nothing else on stderr/stdout, no MLflow store; return the line."""
    env = bench.env(f"sqlite:///{tmp_path}/mlflow.db")
    proc = bench.run(*overrides, f"hydra.run.dir={tmp_path}/run", module=module, env=env)
    assert proc.returncode == EXIT_CONFIG, f"expected exit 2 for {overrides}:\n{proc.stdout}\n{proc.stderr}"
    assert "Traceback" not in proc.stdout + proc.stderr
    assert proc.stdout.strip() == ""
    errors = bench.error_lines(proc.stderr)
    assert len(errors) == 1, proc.stderr
    assert [line for line in proc.stderr.splitlines() if line.strip()] == errors, proc.stderr  # nothing but it
    assert not (tmp_path / "mlflow.db").exists() and not (tmp_path / "mlruns").exists()
    return errors[0]


# --- rejected while Hydra composes (reworded from Hydra's multi-line report) -----------------

def test_unknown_group_option_lists_the_choices(bench, tmp_path):
    line = refused(bench, tmp_path, "model=nope")
    assert line.startswith("[ERROR] model='nope' is not valid: accepted one of ")
    for option in sorted(p.stem for p in (Path(config_dir()) / "model").glob("*.yaml")):
        assert option in line


def test_wrong_type_names_the_key(bench, tmp_path):
    line = refused(bench, tmp_path, "data.batch_size=abc")
    assert line == "[ERROR] data.batch_size='abc' is not valid: accepted an integer."


def test_unknown_key_names_the_key_and_the_closest_one(bench, tmp_path):
    line = refused(bench, tmp_path, "data.batch_sise=8")
    assert line.startswith("[ERROR] data.batch_sise='8' is not valid: accepted a key of data")
    assert "did you mean data.batch_size?" in line


def test_choice_outside_the_enum_lists_the_choices(bench, tmp_path):
    line = refused(bench, tmp_path, "precision.autocast_dtype=float8")
    assert line == "[ERROR] precision.autocast_dtype='float8' is not valid: accepted one of float16, bfloat16."


def test_unparsable_override_is_one_line(bench, tmp_path):
    line = refused(bench, tmp_path, "data.batch_size=[")
    assert "a command-line override could not be parsed" in line


def test_hydra_full_error_still_gives_hydras_own_report(bench, tmp_path):
    proc = bench.run("data.batch_size=abc", f"hydra.run.dir={tmp_path}/run", env=bench.env(HYDRA_FULL_ERROR="1"))
    assert proc.returncode != 0
    assert "Traceback" in proc.stderr and "full_key: data.batch_size" in proc.stderr


# --- rejected by the schema's checks, before torch is imported ----------------------------

@pytest.mark.parametrize("overrides, key", [
    (["data.batch_size=0"], "data.batch_size"),
    (["+benchmark.warmup_step=5"], "benchmark.warmup_step"),  # `+` gets past Hydra's schema check
], ids=["value", "added_unknown_key"])
def test_semantic_error_is_one_line_with_exit_2(bench, tmp_path, overrides, key):
    line = refused(bench, tmp_path, *overrides)
    assert line.startswith(f"[ERROR] {key}=") and "accepted" in line


def test_radix_cli_refuses_like_bench(bench, tmp_path):
    line = refused(bench, tmp_path, "--allow-cpu", "data.batch_size=0", module="bench.radix")
    assert line.startswith("[ERROR] data.batch_size=0 is not valid")


# --- rejected after torch looks at the device and the model registry ------------------------

@needs_no_cuda
def test_gpu_experiment_on_cpu_machine_is_refused(bench, tmp_path):
    line = refused(bench, tmp_path, "+experiment=a100_bf16", *TINY_RUN)
    assert line.startswith("[ERROR] CUDA not available and allow_cpu=false")
    assert "allow_cpu=true" in line  # says how to get past it


@needs_no_cuda
def test_amp_fp16_on_cpu_is_refused(bench, tmp_path):
    line = refused(bench, tmp_path, "precision=amp_fp16", "allow_cpu=true", "+experiment=cpu_smoke", *TINY_RUN)
    assert line.startswith("[ERROR] precision=") and "amp_fp16" in line and "needs a CUDA GPU" in line


# --- the CLI stays import-light: --cfg, --help and refused configs load neither torch nor mlflow ---

HEAVY = ("torch", "mlflow")


def _heavy_imports(importtime_log: str) -> list[str]:
    """Module names from `python -X importtime` lines that are torch/mlflow or inside them."""
    found = []
    for line in importtime_log.splitlines():
        if not line.startswith("import time:") or line.count("|") < 2:
            continue
        module = line.rsplit("|", 1)[1].strip()
        if any(module == top or module.startswith(top + ".") for top in HEAVY):
            found.append(module)
    return found


def test_heavy_import_detector_parses_importtime_lines():
    log = ("import time: self [us] | cumulative | imported package\n"
           "import time:       120 |        120 |   torchvision_like\n"
           "import time:       123 |        456 |     torch._C\n"
           "import time:        12 |         34 | mlflow\n"
           "import time:        12 |         34 |   omegaconf\n")
    assert _heavy_imports(log) == ["torch._C", "mlflow"]


@pytest.mark.parametrize("flags", [["--cfg", "job"], ["--help"], ["hydra/launcher=slurm", "--cfg", "job"],
                                   ["hydra/launcher=slurm_local", "--help"]],
                         ids=["cfg-job", "help", "cfg-job-slurm", "help-slurm_local"])
def test_cli_prints_config_without_importing_torch_or_mlflow(tmp_path, flags):
    """With a Slurm launcher too: Hydra imports its plugins (bench's launchers among them) at start."""
    if "slurm" in flags[0]:
        pytest.importorskip("hydra_plugins.hydra_submitit_launcher", reason="needs hydra-submitit-launcher")
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "bench", *flags],
                          cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "arch: resnet50" in proc.stdout
    assert "import time:" in proc.stderr  # the log is there, so an empty result means something
    assert _heavy_imports(proc.stderr) == []
    if "--help" in flags:
        assert "precision: amp_fp16, bf16, fp32, tf32" in proc.stdout
    if "slurm" in flags[0]:
        assert "bench.launch.slurm" in proc.stderr  # bench's launcher was imported, and it stayed light


def test_a_refused_config_imports_neither_torch_nor_mlflow(tmp_path):
    """Schema errors come back before the heavy imports: fast, and nothing is opened."""
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "bench", "data.batch_size=0"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 2
    assert _heavy_imports(proc.stderr) == []


def test_a_sweep_preview_lists_its_jobs_without_importing_torch_or_mlflow(tmp_path):
    """-m with --cfg job: Hydra alone prints a traceback ("Only one of --run, --multirun, --cfg...")."""
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "bench", "-m", "data.batch_size=64,128",
                           "precision=fp32,bf16", "--cfg", "job"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.splitlines()[0].startswith("a sweep of 4 jobs")
    assert "  #3  data.batch_size=128 precision=bf16" in proc.stdout and "Traceback" not in proc.stderr
    assert _heavy_imports(proc.stderr) == [] and not (tmp_path / "multirun").exists()
