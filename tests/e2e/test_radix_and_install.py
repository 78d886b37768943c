"""The original Radix CLI, and a non-editable install that finds its configs from anywhere."""

from __future__ import annotations

import subprocess
import sys

import pytest

from bench.tools.radix import hydra_overrides, parse


def test_radix_defaults_match_the_original_cli():
    args, extra = parse([])
    assert (args.lr, args.batch_size, args.epochs, args.steps_per_epoch, args.allow_cpu) == (0.1, 128, 1, 200, False)
    assert extra == []
    overrides = hydra_overrides(args, ["precision=bf16"])
    assert "model=resnet50" in overrides and "data=synthetic" in overrides
    assert "optimizer.lr=0.1" in overrides and "allow_cpu=false" in overrides
    assert overrides[-1] == "precision=bf16"  # pass-through overrides come last and win


def test_radix_cli_runs_resnet50_with_the_same_contract(bench, tmp_path):
    proc = bench.run(
        "--lr",
        "0.05",
        "--batch-size",
        "2",
        "--epochs",
        "1",
        "--steps-per-epoch",
        "2",
        "--allow-cpu",
        "benchmark.warmup_steps=1",
        "data.image_size=64",
        f"hydra.run.dir={tmp_path}/run",
        module="bench.radix",
    )
    metrics = bench.metrics(proc)
    assert metrics["model"] == "resnet50" and metrics["data"] == "synthetic"
    assert (metrics["lr"], metrics["batch_size"], metrics["epochs"], metrics["steps_per_epoch"]) == (0.05, 2, 1, 2)
    assert metrics["total_images"] == 4
    assert metrics["images_per_second"] == pytest.approx(4 / metrics["elapsed_seconds"])
    (run,) = bench.runs()
    assert run.info.status == "FINISHED" and run.data.params["optimizer.lr"] == "0.05"


def test_radix_cli_rejects_unknown_flags_in_one_line(bench):
    proc = bench.run("--batchsize", "3", module="bench.radix")
    assert proc.returncode == 2
    assert "--batchsize" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="checks the no-CUDA refusal")
def test_radix_cli_without_allow_cpu_refuses_the_cpu(bench, tmp_path):
    proc = bench.run(f"hydra.run.dir={tmp_path}/run", module="bench.radix")
    assert proc.returncode == 2
    assert "[ERROR] CUDA not available and allow_cpu=false" in proc.stderr
    assert not bench.db.exists()


def test_non_editable_install_finds_its_configs_from_another_directory(bench, repo, tmp_path):
    """Build a real wheel, install it into a plain target dir, run it from an unrelated cwd."""
    wheel_dir, site, elsewhere = tmp_path / "wheel", tmp_path / "site", tmp_path / "elsewhere"
    elsewhere.mkdir()
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(wheel_dir),
            str(repo),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (wheel,) = wheel_dir.glob("bench-*.whl")
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(site), str(wheel)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    assert (site / "bench" / "conf" / "config.yaml").is_file()
    assert (site / "bench" / "conf" / "experiment" / "cpu_smoke.yaml").is_file()

    env = bench.env(PYTHONPATH=str(site))
    where = subprocess.run(
        [sys.executable, "-c", "import bench; print(bench.__file__); print(bench.config_dir())"],
        cwd=elsewhere,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert all(line.startswith(str(site)) for line in where.stdout.split())

    # fresh: what is tested is a new interpreter finding the installed wheel on its PYTHONPATH
    # (the fork server would exec these anyway: PYTHONPATH differs from its own)
    composed = bench.run("+experiment=cpu_smoke", "--cfg", "job", env=env, cwd=elsewhere, fresh=True)
    assert composed.returncode == 0, composed.stderr
    assert "arch: resnet18" in composed.stdout and "allow_cpu: true" in composed.stdout

    metrics = bench.metrics(
        bench.run(
            "+experiment=cpu_smoke",
            "train.epochs=1",
            "train.steps_per_epoch=2",
            "tracking.enabled=false",
            env=env,
            cwd=elsewhere,
            fresh=True,
        )
    )
    assert metrics["model"] == "resnet18" and metrics["total_images"] == 32
    assert list(elsewhere.glob("outputs/*/*/run_summary.json"))
