"""docker/entrypoint.sh in front of real bench runs, outside a container: bash runs the script,
BENCH_PYTHON points it at this interpreter and PYTHONPATH at this checkout, the working
directory stands in for /results. Tiny CPU runs (ResNet-18 at 32x32, two steps)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import List

REPO = Path(__file__).resolve().parents[2]
ENTRYPOINT = REPO / "docker" / "entrypoint.sh"
S3_SECRET = "bench-entrypoint-canary-52c9e1"  # in the environment; never in any output
SMALL = [
    "model=resnet18",
    "data.image_size=32",
    "benchmark.warmup_steps=1",
    "benchmark.progress=false",
    "tracking.enabled=false",
]


def run_entrypoint(bench, args: List[str], merged: bool = False, **env: str) -> subprocess.CompletedProcess:
    environment = bench.env(
        BENCH_PYTHON=sys.executable, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1", AWS_SECRET_ACCESS_KEY=S3_SECRET, **env
    )
    return subprocess.run(
        ["bash", str(ENTRYPOINT), *args],
        cwd=bench.cwd,
        env=environment,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT if merged else subprocess.PIPE,
        timeout=900,
    )


def test_radix_flags_run_bench_radix_and_end_with_the_metrics_line(bench, tmp_path):
    proc = run_entrypoint(
        bench,
        [
            "--lr",
            "0.1",
            "--batch-size",
            "4",
            "--epochs",
            "1",
            "--steps-per-epoch",
            "2",
            "--allow-cpu",
            *SMALL,
            f"hydra.run.dir={tmp_path}/radix",
        ],
    )
    metrics = bench.metrics(proc)  # exit 0, the last stdout line is {"radix_metrics": ...}
    assert proc.stdout.strip().splitlines() == [proc.stdout.strip()]  # and the only one: logs go to stderr
    assert (metrics["model"], metrics["lr"], metrics["batch_size"], metrics["steps_per_epoch"]) == (
        "resnet18",
        0.1,
        4,
        2,
    )
    assert metrics["total_images"] == 8
    assert (tmp_path / "radix" / "run_summary.json").is_file()
    assert S3_SECRET not in proc.stdout + proc.stderr


def test_hydra_overrides_run_bench_and_stdout_last_puts_the_metrics_line_last_in_a_merged_log(bench, tmp_path):
    """The Kubernetes Jobs' way (BENCH_STDOUT_LAST=1): `kubectl logs ... | tail -1` is the final line."""
    proc = run_entrypoint(
        bench,
        [
            "+experiment=cpu_smoke",
            *SMALL,
            "data.batch_size=4",
            "train.epochs=1",
            "train.steps_per_epoch=2",
            f"hydra.run.dir={tmp_path}/hydra",
        ],
        merged=True,
        BENCH_STDOUT_LAST="1",
    )
    assert proc.returncode == 0, proc.stdout
    lines = proc.stdout.strip().splitlines()
    assert any("results in" in line for line in lines[:-1])  # bench logs after its final line
    metrics = json.loads(lines[-1])["radix_metrics"]
    assert (metrics["model"], metrics["total_images"]) == ("resnet18", 8)
    assert (tmp_path / "hydra" / "run_summary.json").is_file()
    assert S3_SECRET not in proc.stdout


def test_a_bad_flag_is_one_line_and_no_run(bench):
    proc = run_entrypoint(bench, ["--lr", "0.1", "--batchsize", "3", "--allow-cpu"])
    assert proc.returncode == 2 and proc.stdout == ""
    (line,) = proc.stderr.splitlines()
    assert line.startswith("[ERROR] --batchsize is not valid") and "--batch-size" in line
    assert not list(bench.cwd.glob("outputs/*")) and not (bench.cwd / "mlflow.db").exists()


def test_a_bad_override_is_bench_own_one_line_refusal(bench):
    proc = run_entrypoint(bench, ["--lr", "0.1", "--allow-cpu", "precision=fp64"])
    error = bench.single_error(proc)
    assert "precision" in error and "fp64" in error


def test_a_config_key_as_a_flag_goes_through_to_bench(bench):
    """Issue 30.10: the seed's --data.batch_size=8 style, through the image's entrypoint too."""
    proc = run_entrypoint(
        bench, ["+experiment=cpu_smoke", "--data.batch_size=8", "--data.image_size", "16", "--cfg", "job"]
    )
    assert proc.returncode == 0, proc.stderr
    assert "  batch_size: 8\n" in proc.stdout and "  image_size: 16\n" in proc.stdout
