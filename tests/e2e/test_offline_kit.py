"""The offline kit as a user on an air-gapped cluster installs it: `pip install --no-index --find-links
KIT bench` into a fresh venv of the CUDA image's Python (3.12, its packages on the path as the image's
site-packages), with no network, then the smoke command, tracked by the kit's MLflow. The kit and the
image are .ci/gpu_day's (built while CI has the index, cached under ~/.cache/bench-gpuday): without
them the test skips and says so. The same venv shows the s3 extra missing: storage=s3 is one [ERROR]
naming `bench[s3]`, exit 2, before anything runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "bench-gpuday"
HANG_GUARD_S = 600


def built_kit():
    kit, image, python = CACHE / "kit", CACHE / "image", CACHE / "python"
    manifest = kit / "kit.json"
    if not (
        manifest.is_file() and json.loads(manifest.read_text()).get("complete") and image.is_dir() and python.is_file()
    ):
        pytest.skip(f"no kit built here: `bash .ci/gpu_day` builds one (and the image to install it on) under {CACHE}")
    return kit, image.resolve(), python.read_text().strip()


def offline():
    """A network namespace with only loopback up, where this machine lets us make one."""
    can = (
        subprocess.run(["unshare", "-n", "true"], capture_output=True).returncode == 0
        if sys.platform == "linux"
        else False
    )
    return ["unshare", "-n"] if can else []


def test_the_kit_installs_with_no_index_into_a_fresh_venv_and_runs_the_smoke_command(tmp_path, tiny):
    kit, image, python = built_kit()
    venv = tmp_path / "venv"
    # without a pip of its own (ensurepip costs seconds of CPU): this pip installs into it (--python)
    subprocess.run([python, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=HANG_GUARD_S)
    py = str(venv / "bin" / "python")
    site = subprocess.run(
        [py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], capture_output=True, text=True
    )
    Path(site.stdout.strip(), "cuda_image.pth").write_text(f"{image}\n")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "MLFLOW_TRACKING_URI")}

    install = subprocess.run(
        [*offline(), sys.executable, "-m", "pip", "--python", py, "install", "-q", "--no-compile", "--no-index",
         "--find-links", str(kit), "bench"],
        capture_output=True, text=True, env=env, timeout=HANG_GUARD_S,
    )  # fmt: skip
    assert install.returncode == 0, install.stderr

    work = tmp_path / "work"
    work.mkdir()
    small = [*tiny, "train.epochs=1"]
    smoke = subprocess.Popen(
        [*offline(), py, "-m", "bench", *small, "hydra.run.dir=run", "tracking.experiment=kit"],
        cwd=work, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    s3 = subprocess.run(
        [py, "-m", "bench", "+experiment=storage_resnet50_h100", "storage=s3", "storage.bucket=b", "hydra.run.dir=s3"],
        cwd=work, env=env, capture_output=True, text=True, timeout=HANG_GUARD_S,
    )  # fmt: skip
    out, err = smoke.communicate(timeout=HANG_GUARD_S)

    assert smoke.returncode == 0, err
    metrics = json.loads(out.strip().splitlines()[-1])["radix_metrics"]
    assert metrics["images_per_second"] > 0
    # where the venv's Python finds bench and mlflow (their specs: importing them again would compile
    # both from source once more, seconds of CPU; the smoke run above imported and ran both)
    where = subprocess.run(
        [py, "-c", "from importlib.util import find_spec as at; print(at('bench').origin); print(at('mlflow').origin)"],
        cwd=work, capture_output=True, text=True, env=env,
    )  # fmt: skip
    found = where.stdout.splitlines()  # bench and mlflow from the kit, not this checkout
    assert len(found) == 2 and all(path.startswith(str(venv)) for path in found), where
    assert (work / "mlflow.db").is_file() and "MLflow run" in err

    errors = [line for line in s3.stderr.splitlines() if line.startswith("[ERROR]")]
    assert s3.returncode == 2 and len(errors) == 1 and "pip install 'bench[s3]'" in errors[0], s3.stderr
    assert "Traceback" not in s3.stderr
