"""What the run ran on: host, CPU, Python and library versions, GPU (via NVML when present)
and the environment variables that change speed. Every field that cannot be read is
left out, quietly: a CPU-only machine has no NVML and that is not an error."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import platform
import re
import socket
import subprocess
import sys
from email.parser import HeaderParser
from importlib import metadata, util
from pathlib import Path
from typing import Any, Dict, Optional, Sequence, Tuple

import torch

from bench.secrets import environ_items, looks_secret_env, redact

SPEED_ENV_PREFIXES = ("NCCL_", "CUDA_", "OMP_", "MKL_", "TORCH_", "PYTORCH_", "CUBLAS_", "CUDNN_")


def _torchvision_version() -> Optional[str]:
    """torchvision.__version__ ('0.29.1+cu130', with the build's tag that its package metadata
    lacks), read from its version.py when torchvision is not imported: a run of bench's own model
    on synthetic data never needs its ~1 s import."""
    if "torchvision" in sys.modules:
        return str(sys.modules["torchvision"].__version__)
    spec = util.find_spec("torchvision")
    with contextlib.suppress(OSError, TypeError):
        text = Path(str(spec.origin)).with_name("version.py").read_text() if spec else ""
        if found := re.search(r"^__version__\s*=\s*['\"]([^'\"]+)['\"]", text, re.MULTILINE):
            return found.group(1)
    with contextlib.suppress(metadata.PackageNotFoundError):
        return metadata.version("torchvision")
    return None


def _cpu_model() -> str:
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as fh:
        for line in fh:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


PACKAGES_FILE = "packages.txt"  # the run's installed packages, one `name==version` a line (an MLflow artifact)


def _name_and_version(dist: metadata.Distribution) -> Tuple[Optional[str], Optional[str]]:
    """A distribution's Name and Version from the headers of its METADATA (PKG-INFO for eggs), by the
    parser `dist.metadata` uses, given only the head of the file: `dist.metadata` parses the whole
    file, README included, each time it is asked (listing ~300 packages took ~0.3 CPU-s a run that way)."""
    text = dist.read_text("METADATA") or dist.read_text("PKG-INFO") or ""
    headers = HeaderParser().parsestr(text.partition("\n\n")[0])  # the headers end at the first blank line
    return headers["Name"], headers["Version"]


@functools.lru_cache(maxsize=1)
def installed_packages() -> Tuple[str, ...]:
    """Every installed distribution as `name==version`, sorted: what a run needs to be reproduced
    (read once a process: the environment capture and packages.txt both ask)."""
    found = set()
    for dist in metadata.distributions():
        name, version = _name_and_version(dist)
        if name:
            found.add(f"{name}=={version}")
    return tuple(sorted(found, key=str.lower))


def write_packages(out_dir: Path) -> Path:
    """packages.txt: every installed package as name==version (the environment holds its hash)."""
    from bench.results import write_text

    return write_text(out_dir / PACKAGES_FILE, "\n".join(installed_packages()) + "\n")


def _git(*args: str) -> Optional[str]:
    """A git command in the directory bench's code runs from; None outside a checkout (a wheel) or without git."""
    try:
        done = subprocess.run(
            ["git", "-C", str(Path(__file__).resolve().parent), *args], capture_output=True, text=True, timeout=5
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


CODE_DIRS = ("bench/", "conf/")  # an untracked file elsewhere (digits/, compare/) is data, not code


def code_provenance(packages: Sequence[str]) -> Dict[str, Any]:
    """Which code ran: bench's version, the git commit of its checkout and whether tracked files
    differed from it or new files lay under bench/ or conf/ (dirty), and a short hash of the package
    list (two runs with the same hash ran the same packages)."""
    from bench import __version__

    found: Dict[str, Any] = {
        "bench_version": __version__,
        "packages_sha256": hashlib.sha256("\n".join(packages).encode()).hexdigest()[:16],
    }
    top = _git("rev-parse", "--show-toplevel")
    here = Path(__file__).resolve().parents[2]  # the directory holding the bench package
    # only a checkout of bench itself: an installed wheel inside some other repository has no commit of ours
    if commit := (_git("rev-parse", "HEAD") if top and Path(top).resolve() == here else None):
        found["git_commit"] = commit
        # a changed tracked file, or a new file where bench's code and config live
        if (status := _git("status", "--porcelain")) is not None:
            found["git_dirty"] = any(not s.startswith("??") or s[3:].startswith(CODE_DIRS) for s in status.splitlines())
    return found


def nvml_devices() -> list:
    """Name, memory and driver of each visible GPU, or [] when NVML is missing (no GPU, no driver)."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:  # NVMLError_LibraryNotFound and friends: no GPU info
        return []
    try:
        driver = pynvml.nvmlSystemGetDriverVersion()
        devices = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            devices.append(
                {
                    "index": index,
                    "name": pynvml.nvmlDeviceGetName(handle),
                    "memory_total_mb": pynvml.nvmlDeviceGetMemoryInfo(handle).total // 2**20,
                    "driver": driver,
                }
            )
        return devices
    except Exception:
        return []
    finally:
        with contextlib.suppress(Exception):  # NVML that failed to start has nothing to shut down
            pynvml.nvmlShutdown()


def collect_environment() -> Dict[str, Any]:
    env: Dict[str, Any] = {
        "host": socket.gethostname(),
        "os": platform.platform(),
        "cpu_model": _cpu_model(),
        "cpu_cores": os.cpu_count(),
        "cpu_affinity": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torchvision": _torchvision_version(),
        "cuda_available": torch.cuda.is_available(),
    }
    if torch.version.cuda:
        env["cuda"] = torch.version.cuda
    if torch.backends.cudnn.is_available():
        env["cudnn"] = str(torch.backends.cudnn.version())
    if torch.cuda.is_available():
        env["gpu_count"] = torch.cuda.device_count()
        env["gpu_name"] = torch.cuda.get_device_name(0)
        env["gpu_capability"] = ".".join(map(str, torch.cuda.get_device_capability(0)))
        with contextlib.suppress(Exception):
            version = torch.cuda.nccl.version()  # a tuple in recent torch, an int in older ones
            env["nccl"] = ".".join(map(str, version)) if isinstance(version, tuple) else str(version)
    if gpus := nvml_devices():
        env.update(gpu_driver=gpus[0]["driver"], gpu_memory_mb=gpus[0]["memory_total_mb"], gpus=gpus)
    env.update(code_provenance(installed_packages()))
    # variables that change speed: an allow-list of prefixes, minus any name that looks like a
    # credential (TORCH_..._AUTH, ..._KEY), with URLs shown without their user:password
    env["env_vars"] = {
        name: redact(value)
        for name, value in sorted(environ_items())
        if name.startswith(SPEED_ENV_PREFIXES) and not looks_secret_env(name)
    }
    return env
