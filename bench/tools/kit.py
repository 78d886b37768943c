"""`python -m bench.tools.kit`: an offline install kit, built where the package index is, for a machine
without it (an air-gapped cluster, a GPU box with no network). The kit is one folder of wheels: bench's
own (conf/ inside) and every dependency the target lacks, for the target's Python and platform;
packages that ship only an sdist (antlr4-python3-runtime, hydra's parser runtime) are built to wheels.

    pip freeze --all > installed.txt                                  # on the target (--all: pip, setuptools too)
    python -m bench.tools.kit --have installed.txt --out ./bench-kit  # here: --python 3.12 by default
    pip install --no-index --find-links ./bench-kit bench             # on the target, no network

pip judges environment markers (`; python_version < "3.12"`) by the Python it runs on, whatever
`--python-version` says: the kit's pip runs on an interpreter of the target's version (`--python`: a
path, or a version found here: this Python, python3.N on PATH, pyenv's), else the target's pins cannot
be met and pip backtracks without end. Each pin of `--have` is first checked for a target wheel (one
refusal naming it), and the resolve is stopped after `--resolve-timeout` seconds (default 600).

`--have` is the target's `pip freeze` (names with versions; a bare name is taken as present in any
version): the kit leaves those out, and every requirement of bench and of the kit's packages on a
version listed there is checked (exit 2 naming the ones the target does not meet). The wheels are
resolved for `--python`/`--glibc`/`--arch`, whatever this machine runs. kit.json lists them with their
sizes and what the kit takes from the target (`from_target`, the versions the index had: CI installs
exactly those to rehearse the target). Exit 0 built, 1 the index or a build failed, 2 bad arguments.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from importlib.metadata import metadata
from importlib.util import find_spec
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from packaging.markers import default_environment
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from bench.errors import EXIT_CONFIG, EXIT_FAILED, print_error
from bench.machine.children import die_with_parent, exit_without_teardown, stop_proof_folder, stop_signals
from bench.machine.writable import writable_dir_refusal
from bench.storage.writer_lock import FolderBusy, hold

ROOT = Path(__file__).resolve().parents[2]
# what the wheel is built from (pyproject's package-dir): a copy of these only, so results, data sets
# and a stale build/ never reach the wheel
SOURCES = ("pyproject.toml", "README.md", "bench", "conf", "launchers/hydra_plugins")
SDIST_TRIES = 5  # packages found only as an sdist, built to wheels one at a time
PIP = (sys.executable, "-m", "pip", "--disable-pip-version-check")
HEARTBEAT_S = 10  # how often a long pip step says where it is
# the build's temporary folders (pip's own among them), inside --out: a build killed outright (SIGKILL)
# leaves them where the next build into that folder clears them, not in TMPDIR
WORK = ".work"
LOCK = ".kit-lock"  # held while a build writes its --out (bench.storage.writer_lock: freed when it dies)


class KitError(Exception):
    def __init__(self, message: str, code: int = EXIT_FAILED):
        super().__init__(message)
        self.code = code


def read_have(path: Path) -> Dict[str, Optional[str]]:
    """A `pip freeze`: name -> version (None for a bare name, an URL or a local build's path)."""
    have: Dict[str, Optional[str]] = {}
    for raw in path.read_text().splitlines():
        if not (line := raw.split("#", 1)[0].strip()) or line.startswith("-"):
            continue  # comments, blank lines, -e / --index-url lines
        if not (found := re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[.*\])?\s*(?:===?\s*(\S+)|@.*)?", line)):
            raise KitError(f"--have {path}: {raw.strip()!r} is not a line of `pip freeze` (name==version)", EXIT_CONFIG)
        have[canonicalize_name(found.group(1))] = found.group(2)
    return have


def platform_args(python: str, glibc: str, arch: str) -> List[str]:
    """pip's flags for wheels that run on the target: its CPython, and every manylinux tag up to its glibc."""
    major, minor = (int(part) for part in glibc.split("."))
    tags = [f"manylinux_{major}_{m}_{arch}" for m in range(minor, 16, -1)]
    tags += [f"manylinux2014_{arch}", f"manylinux2010_{arch}", f"manylinux1_{arch}"]
    flags = ["--only-binary=:all:", "--python-version", python, "--implementation", "cp"]
    return flags + [flag for tag in tags for flag in ("--platform", tag)]


def marker_env(python: str, arch: str) -> Dict[str, str]:
    """The target's environment markers (python_version, platform_machine, ...), not this machine's."""
    env: Dict[str, str] = {key: str(value) for key, value in default_environment().items()}
    target = {"python_version": python, "python_full_version": f"{python}.0", "implementation_name": "cpython"}
    target.update(platform_python_implementation="CPython", sys_platform="linux", platform_system="Linux")
    return {**env, **target, "platform_machine": arch, "os_name": "posix"}


def say(line: str) -> None:
    print(f"kit: {line}", file=sys.stderr, flush=True)


def pip(*args: str, python: str = "", doing: str = "", limit: float = 0, total: int = 0) -> subprocess.CompletedProcess:
    """pip, on `python` where given (else this Python), in a process group of its own (`pip --python`
    runs a second pip: both end with it). With `doing`, says so now and every HEARTBEAT_S where pip is
    (its `Collecting X` lines, N of `total`); with `limit`, stops it after that many seconds (KitError)."""
    if doing:
        say(doing + (f" (at most {limit:.0f} s)" if limit else ""))
    deadline = time.monotonic() + (limit or float("inf"))
    # pip's own temporary folders in one of ours: a pip stopped mid-way leaves none behind
    with tempfile.TemporaryFile("w+") as log, stop_proof_folder("bench-kit-pip-") as tmp:
        cmd, env = [*PIP, *(["--python", python] if python else []), *args], {**os.environ, "TMPDIR": tmp}
        # a Ctrl-C or SIGTERM held while pip starts and while it is killed: one landing between the start and
        # the `try` left pip running into the folder removed below (seen on a loaded machine)
        with stop_signals(signal.SIG_BLOCK):
            proc = subprocess.Popen(  # pip is killed with the kit, even by SIGKILL (PR_SET_PDEATHSIG)
                cmd, stdout=log, stderr=subprocess.STDOUT, text=True, start_new_session=True, env=env,
                preexec_fn=functools.partial(die_with_parent, os.getpid(), ctrl_c=True),
            )  # fmt: skip
            try:
                with stop_signals(signal.SIG_UNBLOCK):
                    while proc.poll() is None:
                        with contextlib.suppress(subprocess.TimeoutExpired):
                            proc.wait(timeout=max(0.1, min(HEARTBEAT_S, deadline - time.monotonic())))
                            break
                        log.seek(0)
                        seen = re.findall(r"^Collecting (\S+)", log.read(), re.M)
                        at = f"{len(seen)}{f' of {total}' if total else ''} ({seen[-1] if seen else 'starting'})"
                        if time.monotonic() >= deadline:
                            raise KitError(f"{doing}: gave up after {limit:.0f} s, at {at}: pip had not finished")
                        if doing:
                            say(f"{doing}: {at}")
            finally:
                if proc.poll() is None:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
        log.seek(0)
        text = log.read()
    return subprocess.CompletedProcess(proc.args, proc.returncode, text, text)


def pip_errors(done: subprocess.CompletedProcess) -> str:
    """pip's own ERROR lines (the last three) and a conflict's causes, else its last line."""
    lines = [line[len("ERROR: ") :] for line in done.stderr.splitlines() if line.startswith("ERROR: ")]
    causes = re.search(r"The conflict is caused by:\n((?: {4}.*\n)+)", done.stderr)
    lines = lines[-3:] + ([line.strip() for line in causes.group(1).splitlines()] if causes else [])
    return " / ".join(lines) or (done.stderr.strip().splitlines() or ["no output"])[-1]


def setuptools_builds(pyproject: Path) -> bool:
    """Whether this Python's setuptools meets the setuptools pin of `pyproject`'s [build-system] requires."""
    if sys.version_info < (3, 11) or not find_spec("setuptools"):
        return False  # Python 3.10 has no TOML reader: pip then makes the build environment
    import tomllib

    pins = [Requirement(text) for text in tomllib.loads(pyproject.read_text())["build-system"]["requires"]]
    installed = Version(metadata("setuptools")["Version"])
    return all(installed in pin.specifier for pin in pins if canonicalize_name(pin.name) == "setuptools")


def build_bench_wheel(source: Path, out: Path) -> Path:
    with stop_proof_folder("bench-kit-src-") as tmp:
        for name in SOURCES:
            if (source / name).is_dir():
                shutil.copytree(source / name, Path(tmp) / name, ignore=shutil.ignore_patterns("__pycache__"))
            elif (source / name).is_file():
                shutil.copy2(source / name, Path(tmp) / name)
        # with this Python's setuptools where it meets the source's own pin: no index needed, no build
        # environment made (an older one cannot build bench's metadata: its license is an SPDX expression)
        isolation = ["--no-build-isolation"] if setuptools_builds(Path(tmp) / "pyproject.toml") else []
        done = pip("wheel", "-q", "--no-deps", *isolation, "-w", str(out), tmp)
    if done.returncode != 0:
        raise KitError(f"bench's wheel did not build: {pip_errors(done)}")
    return max(out.glob("bench-*.whl"), key=lambda path: path.stat().st_mtime)


def resolve(wheel: Path, args: argparse.Namespace, out: Path, flags: Sequence[str], have: Dict[str, Any]) -> List[dict]:
    """pip's resolution for the target (metadata only: nothing large is downloaded), held to the target's
    versions, as its report's `install` list, on the target's Python within --resolve-timeout. A
    requirement found only as an sdist is built to a pure-Python wheel into `out`."""
    spec = f"{wheel}[{','.join(args.extras)}]" if args.extras else str(wheel)
    built: List[str] = []
    deadline = time.monotonic() + args.resolve_timeout
    # the target's versions as constraints, where the index can have them (not a local build's 2.11.0a0+nv)
    found = [f"{name}=={version}" for name, version in have.items() if version and re.fullmatch(r"\d[\w.!]*", version)]
    with stop_proof_folder("bench-kit-resolve-") as tmp:
        # each pin first, alone: one the index cannot meet would send the resolve backtracking without end
        done = pip(
            "install", "--dry-run", "--no-deps", "--ignore-installed", "--target", f"{tmp}/pins", *flags, *found,
            python=args.interpreter, doing=f"checking the target's {len(found)} pins for wheels",
            limit=args.resolve_timeout, total=len(found),
        ) if found else subprocess.CompletedProcess([], 0, "", "")  # fmt: skip
        if missing := re.search(r"satisfies the requirement (\S+) \(from versions: ([^)]*)\)", done.stdout):
            raise KitError(
                f"--have {args.have}: {missing[1]} has no wheel for the target on the index (its versions for the "
                f"target: {', '.join(missing[2].split(', ')[-5:])}): give a version it has, or leave the package "
                "out so the kit carries one",
                EXIT_CONFIG,
            )
        if done.returncode != 0:
            raise KitError(f"the target's pins could not be checked: {pip_errors(done)}")
        constraints = Path(tmp) / "have.txt"
        constraints.write_text("".join(f"{pin}\n" for pin in found))
        for _ in range(SDIST_TRIES + 1):
            report = Path(tmp) / "report.json"
            done = pip(
                "install", "--dry-run", "--ignore-installed", "--report", str(report), "--target",
                f"{tmp}/target", "--find-links", str(out), "-c", str(constraints), *flags, spec,
                python=args.interpreter, doing="resolving bench's requirements for the target",
                limit=deadline - time.monotonic(),
            )  # fmt: skip
            if done.returncode == 0:
                return list(json.loads(report.read_text())["install"])
            # pip names what it found no wheel of: "satisfies the requirement X", or "depends on X" in a conflict
            named = re.findall(r"(?:satisfies the requirement|depends on) ([^\s;]+)", done.stdout + done.stderr)
            # (a package the target has is never built here: its version came from --have)
            todo = [req for req in dict.fromkeys(named) if req not in built and name_of(req) not in have]
            if not todo or not build_sdist(todo[0], out, flags):
                raise KitError(f"the dependencies did not resolve for the target: {pip_errors(done)}")
            built.append(todo[0])
    raise KitError(f"more than {SDIST_TRIES} packages ship only as sdists: {', '.join(built)}")


def name_of(requirement: str) -> str:
    """A requirement's package name, canonical (pip's messages name requirements as they were written)."""
    return canonicalize_name(re.split(r"[\s<>=!~\[;]", requirement, maxsplit=1)[0])


def build_sdist(requirement: str, out: Path, flags: Sequence[str]) -> bool:
    """Builds `requirement` from its sdist into a wheel in `out`; False where it has none or it builds
    for this machine only (not pure Python)."""
    before = set(out.glob("*.whl"))
    index = [flag for flag in flags if flag == "--no-index" or flag.startswith("--find-links=")]
    done = pip("wheel", "-q", "--no-deps", "--no-binary", name_of(requirement), *index, "-w", str(out), requirement)
    made = set(out.glob("*.whl")) - before
    for path in (path for path in made if not path.name.endswith("-none-any.whl")):  # built for this machine only
        path.unlink()
    return done.returncode == 0 and bool(made) and all(path.exists() for path in made)


def unmet(items: Sequence[dict], have: Dict[str, Optional[str]], env: Dict[str, str]) -> List[str]:
    """Requirements of the kit's packages on a version the target has that it does not meet."""
    problems = []
    for item in items:
        meta = item["metadata"]
        extras = item.get("requested_extras") or [""]
        for line in meta.get("requires_dist") or []:
            try:
                req = Requirement(line)
            except InvalidRequirement:
                continue
            version = have.get(canonicalize_name(req.name))
            if version is None or (req.marker and not any(req.marker.evaluate({**env, "extra": e}) for e in extras)):
                continue
            with contextlib.suppress(InvalidVersion):  # a version no specifier can judge
                if not req.specifier.contains(Version(version), prereleases=True):
                    problems.append(f"{meta['name']} needs {req.name}{req.specifier}, the target has {version}")
    return problems


def build(args: argparse.Namespace) -> dict:
    have = read_have(args.have)
    out: Path = args.out
    if out.exists() and any(out.iterdir()) and not (out / "kit.json").exists():
        raise KitError(f"--out {out} is a folder with files and not a kit: give an empty or new folder", EXIT_CONFIG)
    # one build per --out: a second would clear the folder the first is filling (refused, the first untouched)
    lock = hold(out, None, "wait for that build to end, or give another --out", name=LOCK, what="kit folder")
    for path in (path for path in out.iterdir() if path.name != LOCK):  # a kit made before, or one stopped
        shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()
    (out / WORK).mkdir()
    (out / "kit.json").write_text('{"complete": false}\n')  # a failed build leaves a folder a re-run may clear
    tempfile.tempdir = str(out / WORK)  # every temporary folder and file of this build
    try:
        flags = platform_args(args.python, args.glibc, args.arch)
        flags += ["--no-index", f"--find-links={args.find_links}"] if args.find_links else []
        say(f"building bench's wheel from {args.source}")
        wheel = build_bench_wheel(args.source, out)
        items = resolve(wheel, args, out, flags, have)
        if problems := unmet(items, have, marker_env(args.python, args.arch)):
            raise KitError(
                f"--have {args.have}: the target falls short: {'; '.join(problems)}. Upgrade it there, or leave "
                "the package out of --have so the kit carries it",
                EXIT_CONFIG,
            )
        chosen = {canonicalize_name(i["metadata"]["name"]): i["metadata"]["version"] for i in items}
        from_target = {name: version for name, version in chosen.items() if name in have}
        for path in out.glob("*.whl"):  # an sdist built on the way for a package the target turned out to have
            if canonicalize_name(path.name.split("-")[0]) in have and path != wheel:
                path.unlink()
        # bench's wheel and the sdists built on the way
        present = {canonicalize_name(path.name.split("-")[0]) for path in out.glob("*.whl")}
        wanted = [f"{name}=={version}" for name, version in chosen.items() if name not in have and name not in present]
        if wanted:
            doing = f"downloading {len(wanted)} wheels"
            done = pip("download", "--no-deps", "-d", str(out), *flags, *wanted, doing=doing, total=len(wanted))
            if done.returncode != 0:
                raise KitError(f"the kit's wheels did not download: {pip_errors(done)}")
        wheels = {path.name: path.stat().st_size for path in sorted(out.glob("*.whl"))}
        manifest = {
            "complete": True,
            "python": args.python,
            "platform": f"manylinux (glibc {args.glibc}) {args.arch}",
            "extras": list(args.extras),
            "bench": wheel.name,
            "wheels": wheels,
            "size_bytes": sum(wheels.values()),
            "from_target": dict(sorted(from_target.items())),
            "install": f"pip install --no-index --find-links {out} "
            + (f"'bench[{','.join(args.extras)}]'" if args.extras else "bench"),
        }
        (out / "kit.json").write_text(json.dumps(manifest, indent=1) + "\n")
        return manifest
    finally:
        tempfile.tempdir = None
        shutil.rmtree(out / WORK, ignore_errors=True)
        lock.release()


def parse(argv: Optional[Sequence[str]]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.tools.kit", description=__doc__.split("\n\n")[0])
    text = "the target's `pip freeze --all` (what it already has)"
    parser.add_argument("--have", type=Path, required=True, help=text)
    parser.add_argument("--out", type=Path, default=Path("bench-kit"), help="the kit's folder (default ./bench-kit)")
    text = "the target's Python: major.minor, found here (default 3.12), or a path"
    parser.add_argument("--python", default="3.12", help=text)
    parser.add_argument("--glibc", default="2.28", help="the target's glibc (default 2.28: torch's own floor)")
    parser.add_argument("--arch", default="x86_64", help="the target's machine (default x86_64)")
    parser.add_argument("--extras", default="", help="bench's extras to carry, comma-separated (s3, slurm, ...)")
    parser.add_argument("--source", type=Path, default=ROOT, help="bench's source tree (default: this checkout)")
    parser.add_argument("--find-links", help="take the wheels from this folder (or URL) only, not the index")
    parser.add_argument("--resolve-timeout", type=float, default=600, help="seconds the resolve may take (600)")
    args = parser.parse_args(argv)
    args.extras = [e.strip() for e in args.extras.split(",") if e.strip()]
    if not re.fullmatch(r"3\.\d+|.*/.*", args.python) or not re.fullmatch(r"2\.\d+", args.glibc):
        raise KitError(f"--python {args.python} --glibc {args.glibc}: accepted 3.N or a path, and 2.N", EXIT_CONFIG)
    if not args.have.is_file():
        raise KitError(f"--have {args.have} is not a file: give the target's `pip freeze` output", EXIT_CONFIG)
    if not (args.source / "pyproject.toml").is_file():
        raise KitError(f"--source {args.source} has no pyproject.toml: give bench's source tree", EXIT_CONFIG)
    if refused := writable_dir_refusal("--out", str(args.out)):
        raise KitError(refused, EXIT_CONFIG)
    # pip only warns of an extra a package lacks, and builds the kit without it
    known = metadata("bench").get_all("Provides-Extra") or []
    if unknown := [extra for extra in args.extras if canonicalize_name(extra) not in known]:
        given, accepted = ",".join(unknown), ", ".join(sorted(known))
        raise KitError(f"--extras={given!r} is not valid: accepted bench's extras ({accepted})", EXIT_CONFIG)
    args.interpreter, args.python = interpreter(args.python)
    return args


def interpreter(python: str) -> Tuple[str, str]:
    """--python's interpreter and its major.minor: the path given, or for a version this Python,
    python3.N on PATH or pyenv's build of it."""
    root = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv")
    here = [sys.executable, shutil.which(f"python{python}"), *sorted(root.glob(f"versions/{python}.*/bin/python3.*"))]
    asked = "import sys; print('%d.%d' % sys.version_info[:2])"
    for candidate in map(str, [python] if "/" in python else filter(None, here)):
        with contextlib.suppress(OSError):
            done = subprocess.run([candidate, "-c", asked], capture_output=True, text=True)
            if done.returncode == 0 and ("/" in python or done.stdout.strip() == python):
                return candidate, done.stdout.strip()
    raise KitError(
        f"--python {python}: no such Python here (pip judges a package's markers by the Python it runs on): "
        "give the path of an interpreter of the target's version (pyenv install, a venv's bin/python)",
        EXIT_CONFIG,
    )


def main(argv: Optional[Sequence[str]] = None) -> int:
    # SIGTERM as Ctrl-C (KeyboardInterrupt): pip's processes and the temporary folders go; the caller's
    # handler back at the end (main called in-process leaves no handler behind for the caller's forks)
    previous = signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        args = parse(argv)
        manifest = build(args)
    except KitError as exc:
        return print_error(str(exc), exc.code)
    except FolderBusy as exc:
        return print_error(f"--out {exc}")
    except KeyboardInterrupt:
        return 130
    finally:
        signal.signal(signal.SIGTERM, previous)
    names = ", ".join(sorted(canonicalize_name(n.split("-")[0]) for n in manifest["wheels"]))
    where = f"{args.out} (Python {args.python}, {manifest['platform']})"
    print(f"kit: {len(manifest['wheels'])} wheels, {manifest['size_bytes'] / 2**20:.1f} MiB in {where}: {names}")
    print(f"from the target ({len(manifest['from_target'])}): {', '.join(manifest['from_target'])}")
    print(f"on the target: {manifest['install']}")
    return 0


if __name__ == "__main__":
    exit_without_teardown(main)
