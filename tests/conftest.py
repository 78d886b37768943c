"""Shared helpers: run bench in a real subprocess, read its final line and its MLflow store."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Dict, Optional, Sequence

import pytest

from s3_server import s3_server  # noqa: F401 - the S3-on-loopback fixture (one server per test module)

REPO = Path(__file__).resolve().parents[1]

# Small, fast, CPU: every e2e run in the suite builds on this.
TINY = [
    "+experiment=cpu_smoke",
    "model=resnet18",
    "data.image_size=32",
    "data.batch_size=4",
    "data.num_classes=10",
    "train.epochs=1",
    "train.steps_per_epoch=3",
    "benchmark.warmup_steps=1",
]


def bench_env(tracking_uri: Optional[str] = None, **extra: str) -> Dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    env["PYTHONUNBUFFERED"] = "1"
    env.setdefault("OMP_NUM_THREADS", "2")
    if tracking_uri:
        env["MLFLOW_TRACKING_URI"] = tracking_uri
    env.update(extra)
    return env


def run_bench(cwd: Path, args: Sequence[str], module: str = "bench", env: Optional[Dict[str, str]] = None,
              timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", module, *args], cwd=cwd, env=env or bench_env(),
                          capture_output=True, text=True, timeout=timeout)


def radix_metrics(proc: subprocess.CompletedProcess) -> dict:
    assert proc.returncode == 0, f"exit {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    last = proc.stdout.strip().splitlines()[-1]
    return json.loads(last)["radix_metrics"]


def sqlite_uri(path: Path) -> str:
    return f"sqlite:///{path}"


def all_runs(tracking_uri: str) -> list:
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=tracking_uri)
    experiments = client.search_experiments()
    return client.search_runs([e.experiment_id for e in experiments]) if experiments else []


@pytest.fixture
def tiny_args():
    return list(TINY)


def pytest_collection_modifyitems(config, items):
    """Tests marked `gpu` need a real CUDA device: skipped (not failed) without one."""
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
