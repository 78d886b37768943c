"""Issue 30.10: config keys spelled as argparse flags (seed 002's `--data.batch_size=8`) read as
Hydra's overrides; Hydra's own flags pass untouched; a flag without its value is one line."""

from __future__ import annotations

import pytest

from bench.config.argv import as_overrides


@pytest.mark.parametrize(
    "argv, expected",
    [
        (["--data.batch_size=8"], ["data.batch_size=8"]),
        (["--data.batch_size", "8", "--model", "resnet18"], ["data.batch_size=8", "model=resnet18"]),
        (["--train.steps_per_epoch", "-1"], ["train.steps_per_epoch=-1"]),
        (["--tracking.uri", "sqlite:///x.db?mode=ro"], ["tracking.uri=sqlite:///x.db?mode=ro"]),  # '=' in a value
        (
            ["--seed=3", "--mode", "inference", "--experiment=cpu_smoke"],
            ["seed=3", "mode=inference", "+experiment=cpu_smoke"],
        ),
        (["-m", "--data.batch_size=8,16", "--hydra.sweep.dir=x"], ["-m", "data.batch_size=8,16", "hydra.sweep.dir=x"]),
        # Hydra's flags, and overrides already in Hydra's spelling, are left as they are
        (
            ["--cfg", "job", "--package", "data", "--config-name", "config", "--config-dir", "d", "--info", "plugins"],
            None,
        ),
        (
            ["--help", "--hydra-help", "--multirun", "--version", "--shell-completion", "--experimental-rerun", "f"],
            None,
        ),
        (
            ["-m", "-c", "job", "-cn", "config", "-cp", "p", "-cd", "d", "-p", "data", "--run", "data.batch_size=8"],
            None,
        ),
        (["+experiment=cpu_smoke", "~data.progressive", "--cfg=job"], None),
    ],
)
def test_config_keys_as_flags_become_overrides(argv, expected):
    assert as_overrides(argv) == (argv if expected is None else expected, None)


@pytest.mark.parametrize(
    "argv",
    [
        ["--data.batch_size"],
        ["--data.batch_size", "--cfg", "job"],
        ["--seed", "-m"],
        ["--data.batch_size", "hydra.run.dir=out"],
        ["--seed", "+experiment=cpu_smoke"],
    ],
)
def test_a_flag_without_its_value_is_refused_naming_the_hydra_spelling(argv):
    _, problem = as_overrides(argv)
    name = argv[0][2:]
    assert problem == (
        f"--{name} is not valid: accepted {name}=VALUE (Hydra's spelling; --{name}=VALUE and "
        f"--{name} VALUE are read as it)"
    )
