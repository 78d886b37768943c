"""bench.tools.kit's logic in-process: the target's `pip freeze` read, the platform's wheel tags, and the
check of what the kit's packages require of the target's versions; then the kit built for real from a
local wheel folder (no index): a pin it cannot meet, the resolve's limit, a stop, what it says. The kit
built from the index is .ci/gpu_day's; tests/e2e/test_offline_kit.py installs it."""

from __future__ import annotations

import contextlib
import json
import os
import sys
import zipfile
from pathlib import Path
from types import SimpleNamespace
from typing import List, Tuple

import psutil
import pytest

from bench.tools import kit


def test_a_pip_freeze_is_read_with_versions_and_bare_names(tmp_path):
    freeze = tmp_path / "installed.txt"
    freeze.write_text(
        "# the image\nTorch==2.11.0\ntorchvision===0.26.0\nnumpy\nPyYAML @ file:///wheels/pyyaml.whl\n"
        "-e git+https://example.invalid/x.git#egg=x\nnvidia_ml_py==13.580.82  # NVML\n\n"
    )
    assert kit.read_have(freeze) == {
        "torch": "2.11.0", "torchvision": "0.26.0", "numpy": None, "pyyaml": None, "nvidia-ml-py": "13.580.82"
    }  # fmt: skip
    freeze.write_text("torch>=2.11\n")
    with pytest.raises(kit.KitError, match="not a line of `pip freeze`") as caught:
        kit.read_have(freeze)
    assert caught.value.code == 2


def test_the_wheels_asked_for_run_on_the_targets_python_and_glibc():
    flags = kit.platform_args("3.12", "2.28", "x86_64")
    assert flags[:5] == ["--only-binary=:all:", "--python-version", "3.12", "--implementation", "cp"]
    tags = flags[6::2]
    assert tags[0] == "manylinux_2_28_x86_64" and "manylinux_2_27_x86_64" in tags  # cuDNN's wheels are 2_27
    assert tags[-3:] == ["manylinux2014_x86_64", "manylinux2010_x86_64", "manylinux1_x86_64"]
    assert "manylinux_2_29_x86_64" not in tags


def test_a_requirement_the_targets_version_misses_is_named_and_markers_are_the_targets():
    items = [
        {"metadata": {"name": "bench", "requires_dist": ["torch>=2.11", "tomli; python_version < '3.11'"]}},
        {
            "metadata": {"name": "mlflow", "requires_dist": ["pandas<3", "numpy<2; extra == 'old'", "scipy"]},
            "requested_extras": None,
        },
    ]
    env = kit.marker_env("3.12", "x86_64")
    have = {"torch": "2.10.0", "tomli": "1.0", "pandas": "3.1.1", "numpy": "2.4.0", "scipy": None}
    assert kit.unmet(items, have, env) == [
        "bench needs torch>=2.11, the target has 2.10.0",
        "mlflow needs pandas<3, the target has 3.1.1",
    ]
    assert kit.unmet(items, {"torch": "2.11.0", "numpy": "1.0"}, env) == []


def test_bench_builds_with_this_pythons_setuptools_only_where_it_meets_the_sources_pin(tmp_path):
    """bench's license is an SPDX expression (setuptools 77): a kit made where setuptools is older builds
    bench in pip's own build environment, not with --no-build-isolation and the old one (which fails)."""
    from importlib.metadata import version

    here = int(version("setuptools").split(".")[0])
    assert kit.setuptools_builds(Path(__file__).parents[2] / "pyproject.toml") is (
        sys.version_info >= (3, 11) and here >= 77
    )
    for pin, builds in ((f"setuptools>={here}", True), (f"setuptools>={here + 1}", False), ("setuptools<1", False)):
        pyproject = tmp_path / f"{builds}-{pin}.toml"
        pyproject.write_text(f'[build-system]\nrequires = ["{pin}", "wheel"]\n[project]\nname = "x"\n')
        assert kit.setuptools_builds(pyproject) is (builds and sys.version_info >= (3, 11)), pin


@pytest.mark.slow  # starts processes inside bench (workers, readers, a fork)
def test_bad_arguments_are_one_error_line_and_exit_2(tmp_path, capsys):
    assert kit.main(["--have", str(tmp_path / "missing.txt")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("[ERROR] --have ") and "is not a file" in err and err.count("\n") == 1
    (tmp_path / "have.txt").write_text("torch==2.11.0\n")
    (tmp_path / "notakit").mkdir()
    (tmp_path / "notakit" / "results.csv").write_text("mine\n")
    assert kit.main(["--have", str(tmp_path / "have.txt"), "--out", str(tmp_path / "notakit")]) == 2
    err = capsys.readouterr().err
    assert err.count("[ERROR]") == 1 and "not a kit" in err
    assert (tmp_path / "notakit" / "results.csv").read_text() == "mine\n"  # nothing of the user's removed
    assert kit.main(["--have", str(tmp_path / "have.txt"), "--python", "312"]) == 2


# ---- the kit built for real, from a local wheel folder (--find-links: no index) ----------------------


def write_wheel(folder: Path, name: str, version: str, *requires: str) -> None:
    """A pure-Python wheel of `name` with these requirements (all pip reads to resolve and download)."""
    info = f"{name}-{version}.dist-info"
    files = {
        f"{name}.py": "",
        f"{info}/METADATA": "".join([f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"]
                                    + [f"Requires-Dist: {req}\n" for req in requires]),
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }  # fmt: skip
    files[f"{info}/RECORD"] = "".join(f"{path},,\n" for path in [*files, f"{info}/RECORD"])
    with zipfile.ZipFile(folder / f"{name}-{version}-py3-none-any.whl", "w") as whl:
        for path, text in files.items():
            whl.writestr(path, text)


def other_python() -> Tuple[str, str]:
    """An interpreter of another version than this one where there is one (pyenv's, CI's 3.12), else this."""
    here = "%d.%d" % sys.version_info[:2]
    for version in ("3.12", "3.13", "3.11", "3.10"):
        with contextlib.suppress(kit.KitError):
            found = kit.interpreter(version)
            if version != here:
                return found
    return sys.executable, here


@pytest.fixture
def wheels(tmp_path, bench):
    """A wheel folder (alpha 1.0; beta 2.0, which needs gamma on the target's Python only), a source
    tree of a `bench` needing alpha and beta, and the kit's environment: no pip configuration, its
    temporary folders in tmp/."""
    folder, source, tmp = tmp_path / "wheels", tmp_path / "source", tmp_path / "tmp"
    for path in (folder, source, tmp):
        path.mkdir()
    python, version = other_python()
    write_wheel(folder, "alpha", "1.0")
    write_wheel(folder, "beta", "2.0", f"gamma; python_version == '{version}'")
    write_wheel(folder, "gamma", "3.0")
    (source / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools>=64"]\nbuild-backend = "setuptools.build_meta"\n'
        '[project]\nname = "bench"\nversion = "0.0.1"\ndependencies = ["alpha>=1", "beta"]\n'
        "[tool.setuptools]\npy-modules = []\n"
    )
    env = {k: v for k, v in bench.env(TMPDIR=str(tmp), PIP_CONFIG_FILE=os.devnull).items() if k != "PIP_FIND_LINKS"}
    return SimpleNamespace(folder=folder, source=source, tmp=tmp, python=python, version=version, env=env)


def kit_args(wheels, have: str, *more: str) -> List[str]:
    (wheels.tmp.parent / "have.txt").write_text(have)
    return ["--have", str(wheels.tmp.parent / "have.txt"), "--out", str(wheels.tmp.parent / "kit"),
            "--source", str(wheels.source), "--python", wheels.python, *more]  # fmt: skip


def test_a_pin_the_index_cannot_meet_is_one_error_line_before_the_resolve(bench, wheels):
    done = bench.run(*kit_args(wheels, "alpha==2.0\nbeta\n", "--find-links", str(wheels.folder)),
                     module="bench.tools.kit", env=wheels.env)  # fmt: skip
    error = bench.single_error(done)
    assert done.returncode == 2
    assert error.startswith(f"[ERROR] --have {wheels.tmp.parent / 'have.txt'}: alpha==2.0 has no wheel for the target")
    assert "(its versions for the target: 1.0)" in error
    assert "resolving" not in done.stderr and list(wheels.tmp.iterdir()) == []


def pips(index) -> list:
    """The processes still asking a silent index (both of `pip --python`'s have its URL in their arguments)."""
    return [p for p in psutil.process_iter(["cmdline"]) if index.url in " ".join(p.info["cmdline"] or [])]


def test_a_resolve_that_does_not_end_is_stopped_at_its_limit_and_says_so(bench, wheels, silent_server):
    index = silent_server()
    done = bench.run(*kit_args(wheels, "", "--find-links", f"{index.url}/", "--resolve-timeout", "3"),
                     module="bench.tools.kit", env=wheels.env)  # fmt: skip
    error = bench.single_error(done)
    assert done.returncode == 1
    assert error.startswith("[ERROR] resolving bench's requirements for the target: gave up after 3 s, at "), error
    assert "kit: resolving bench's requirements for the target (at most 3 s)" in done.stderr
    assert pips(index) == [] and list(wheels.tmp.iterdir()) == []


def resolving_kit(bench, wheels, silent_server):
    """A kit started against a loopback index that never answers, once it says it is resolving:
    (the index, the kit's process)."""
    index = silent_server()
    proc = bench.start(*kit_args(wheels, "", "--find-links", f"{index.url}/", "--resolve-timeout", "120"),
                       module="bench.tools.kit", env=wheels.env, fresh=True)  # fmt: skip
    for line in proc.stderr:
        if line.startswith("kit: resolving"):
            break
    return index, proc


def test_a_second_kit_into_the_same_out_is_refused_in_one_line_and_clears_nothing_of_the_first(
    bench, wheels, silent_server
):
    """Two builds into one --out (the second would have cleared the folder the first fills): the second
    is one [ERROR] line naming the first (its pid), exit 2, and leaves the first's folder as it was;
    the first, stopped (SIGTERM) while resolving, still clears its temporary folders and its lock, and
    leaves no pip and nothing in TMPDIR (it was also
    test_a_kit_stopped_while_resolving_leaves_no_temporary_folder_and_no_pip, a kit of its own stopped
    the same way: the refused second touches nothing of the first, asserted below)."""
    index, first = resolving_kit(bench, wheels, silent_server)
    out = wheels.tmp.parent / "kit"
    work = out / ".work"  # the build's temporary folders: inside --out, not TMPDIR
    assert [path.name for path in work.iterdir() if path.name.startswith("bench-kit-resolve-")]

    def kept() -> list:  # the first's folder: its files and its resolve's temporary folders
        return [*(path.name for path in out.iterdir()), *(path.name for path in (out / ".work").iterdir())]

    before = kept()
    assert ".kit-lock" in before and any(name.startswith("bench-kit-resolve-") for name in before)
    second = bench.run(*kit_args(wheels, "", "--find-links", str(wheels.folder)), module="bench.tools.kit",
                       env=wheels.env)  # fmt: skip
    error = bench.single_error(second)
    assert second.returncode == 2
    assert error.startswith(f"[ERROR] --out {out} is being written by another run: pid {first.pid} on "), error
    assert error.endswith("Two runs must not write one kit folder: wait for that build to end, or give another --out")
    assert set(before) <= set(kept())  # nothing of the first's removed (its pip may have added more)
    first.terminate()
    err = first.communicate(timeout=60)[1]
    assert first.returncode == 130 and "Traceback" not in err, err
    left = {path.name for path in out.iterdir()}  # kit.json {"complete": false} and bench's wheel, for a re-run
    assert pips(index) == [] and "kit.json" in left and not left & {".kit-lock", ".work"}, left
    assert list(wheels.tmp.iterdir()) == [] and not work.exists()


def test_a_kit_killed_outright_leaves_its_folders_in_its_out_where_the_next_build_clears_them(
    bench, wheels, silent_server
):
    """SIGKILL runs no handler: the temporary folders stay, in --out/.work (not TMPDIR), the kit's pip
    dies with it (PR_SET_PDEATHSIG), and the next build into that --out clears them and succeeds.
    That build (from the wheel folder, the target pinning alpha==1.0) is also the kit built for real:
    it judges beta's marker on the target's Python (gamma comes with it), leaves out what the target
    has (alpha), writes kit.json and says what it does, step by step, leaving nothing in TMPDIR (it was
    test_a_kit_from_a_wheel_folder_judges_markers_on_the_targets_python_and_says_what_it_does, a
    second full build of its own)."""
    index, proc = resolving_kit(bench, wheels, silent_server)
    proc.kill()
    proc.communicate(timeout=60)
    work = wheels.tmp.parent / "kit" / ".work"
    assert [path.name for path in work.iterdir() if path.name.startswith("bench-kit-resolve-")]
    assert list(wheels.tmp.iterdir()) == []
    kits_pip = [p for p in pips(index) if p.info["cmdline"][:3] == [sys.executable, "-m", "pip"]]
    assert psutil.wait_procs(kits_pip, timeout=60)[1] == []  # (pip --python's second pip is its to end)
    again = bench.run(*kit_args(wheels, "alpha==1.0\n", "--find-links", str(wheels.folder)), module="bench.tools.kit",
                      env=wheels.env)  # fmt: skip
    assert again.returncode == 0, again.stderr
    assert not work.exists() and list(wheels.tmp.iterdir()) == []
    manifest = json.loads((wheels.tmp.parent / "kit" / "kit.json").read_text())
    assert sorted(manifest["wheels"]) == [
        "bench-0.0.1-py3-none-any.whl", "beta-2.0-py3-none-any.whl", "gamma-3.0-py3-none-any.whl"
    ]  # fmt: skip  # gamma: beta's marker, true on the target's Python (whichever runs the kit)
    assert manifest["python"] == wheels.version and manifest["from_target"] == {"alpha": "1.0"}
    said = [line for line in again.stderr.splitlines() if line.startswith("kit: ")]
    assert said[:2] == [f"kit: building bench's wheel from {wheels.source}",
                        "kit: checking the target's 1 pins for wheels (at most 600 s)"]  # fmt: skip
    assert "kit: resolving bench's requirements for the target (at most " in again.stderr
    assert "kit: downloading 2 wheels" in again.stderr


@pytest.mark.slow  # starts processes inside bench (workers, readers, a fork)
def test_python_is_a_version_found_here_or_an_interpreters_path():
    here = "%d.%d" % sys.version_info[:2]
    assert kit.interpreter(here) == (sys.executable, here)
    assert kit.interpreter(sys.executable) == (sys.executable, here)
    for wrong in ("3.99", "/nonexistent/python3"):
        with pytest.raises(kit.KitError, match=f"--python {wrong}: no such Python here") as caught:
            kit.interpreter(wrong)
        assert caught.value.code == 2
