"""bench.tools.kit's logic in-process: the target's `pip freeze` read, the platform's wheel tags, and the
check of what the kit's packages require of the target's versions (the kit built for real, from the
index, is .ci/gpu_day's; tests/e2e/test_offline_kit.py installs it)."""

from __future__ import annotations

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
