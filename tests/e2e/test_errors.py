"""The command line as real `python -m bench` processes, where only a process can tell:
HYDRA_FULL_ERROR gives Hydra's own report, and --cfg, --help, a sweep preview and a refused
config import neither torch nor mlflow. Every bad input's one-line refusal is a row of
tests/reliability/bad_inputs.py (run through the same entry code, six rows also as processes)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest


def test_hydra_full_error_still_gives_hydras_own_report(bench, tmp_path):
    proc = bench.run("data.batch_size=abc", f"hydra.run.dir={tmp_path}/run", env=bench.env(HYDRA_FULL_ERROR="1"))
    assert proc.returncode != 0
    assert "Traceback" in proc.stderr and "full_key: data.batch_size" in proc.stderr


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
    log = (
        "import time: self [us] | cumulative | imported package\n"
        "import time:       120 |        120 |   torchvision_like\n"
        "import time:       123 |        456 |     torch._C\n"
        "import time:        12 |         34 | mlflow\n"
        "import time:        12 |         34 |   omegaconf\n"
    )
    assert _heavy_imports(log) == ["torch._C", "mlflow"]


@pytest.mark.parametrize(
    "flags",
    [["--cfg", "job"], ["--help"], ["hydra/launcher=slurm", "--cfg", "job"], ["hydra/launcher=slurm_local", "--help"]],
    ids=["cfg-job", "help", "cfg-job-slurm", "help-slurm_local"],
)
def test_cli_prints_config_without_importing_torch_or_mlflow(tmp_path, flags):
    """With a Slurm launcher too: Hydra imports its plugins (bench's launchers among them) at start."""
    if "slurm" in flags[0]:
        pytest.importorskip("hydra_plugins.hydra_submitit_launcher", reason="needs hydra-submitit-launcher")
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "bench", *flags],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "import time:" in proc.stderr  # the log is there, so an empty result means something
    assert _heavy_imports(proc.stderr) == []
    if "--help" in flags:
        check_help(proc.stdout)
    else:
        assert "arch: resnet50" in proc.stdout
    if "slurm" in flags[0]:
        assert "bench.slurm" in proc.stderr  # bench's launcher was imported, and it stayed light


def check_help(text: str) -> None:
    """Issue 34.5: one screen (it was 207 lines, mostly the default config): the commands to start
    with, every group with its options, the presets counted, and where the full config is. Issue 40
    §10: 24 rows at 80 columns (a 462-character line of presets made it 34), the presets a command away."""
    assert len(text.splitlines()) <= 24 and max(len(line) for line in text.splitlines()) <= 80, text
    assert "arch: resnet50" not in text  # the config is --cfg job's
    assert len(re.findall(r"^  (?:python -m bench|mlflow ui)", text, re.M)) == 5
    assert "precision: amp_fp16, bf16, fp32, tf32" in text and "python -m bench --cfg job" in text
    presets = sorted(p.stem for p in (Path(__file__).resolve().parents[2] / "conf" / "experiment").glob("*.yaml"))
    assert f"experiment: {len(presets)} presets, each with what it is: python -m bench --help experiment" in text


def test_help_experiment_lists_every_preset_with_what_it_is(tmp_path):
    """Issue 40 §10: the command --help names for the presets: each one a line, what it is, 80 columns."""
    proc = subprocess.run(
        [sys.executable, "-m", "bench", "--help", "experiment"], cwd=tmp_path, capture_output=True, text=True
    )
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    lines = proc.stdout.splitlines()
    presets = sorted(p.stem for p in (Path(__file__).resolve().parents[2] / "conf" / "experiment").glob("*.yaml"))
    assert [line.split(":")[0] for line in lines] == presets and max(map(len, lines)) <= 80
    assert "cpu_smoke: A quick end-to-end check on any CPU" in proc.stdout
    # read only in part (`| head -1`): no BrokenPipeError traceback
    piped = subprocess.run(
        f"{sys.executable} -m bench --help experiment | head -1",
        shell=True,
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert piped.stdout == lines[0] + "\n" and piped.stderr == "", piped.stderr


def test_a_refused_config_imports_neither_torch_nor_mlflow(tmp_path):
    """Schema errors come back before the heavy imports: fast, and nothing is opened."""
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "bench", "data.batch_size=0"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 2
    assert _heavy_imports(proc.stderr) == []


def test_a_sweep_preview_lists_its_jobs_without_importing_torch_or_mlflow(tmp_path):
    """-m with --cfg job: Hydra alone prints a traceback ("Only one of --run, --multirun, --cfg...")."""
    proc = subprocess.run(
        [
            sys.executable,
            "-X",
            "importtime",
            "-m",
            "bench",
            "-m",
            "data.batch_size=64,128",
            "precision=fp32,bf16",
            "--cfg",
            "job",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.splitlines()[0].startswith("a sweep of 4 jobs")
    assert "  #3  data.batch_size=128 precision=bf16" in proc.stdout and "Traceback" not in proc.stderr
    assert _heavy_imports(proc.stderr) == [] and not (tmp_path / "multirun").exists()


def test_the_seeds_flag_style_runs_as_the_hydra_spelling(bench):
    """Issue 30.10: `python -m bench --data.batch_size=8` (seed 002) printed argparse's usage; now the
    config has batch 8."""
    proc = bench.run("--experiment=cpu_smoke", "--data.batch_size=8", "--data.image_size", "16", "--cfg", "job")
    assert proc.returncode == 0, proc.stderr
    assert "  batch_size: 8\n" in proc.stdout and "  image_size: 16\n" in proc.stdout
    # the refusal of a key flag without its value: tests/reliability/bad_inputs.py
