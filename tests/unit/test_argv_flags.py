"""Issue 30.10: config keys spelled as argparse flags (seed 002's `--data.batch_size=8`) read as
Hydra's overrides; Hydra's own flags pass untouched; a flag without its value is one line."""

from __future__ import annotations

import re

import pytest

from bench.config.argv import as_overrides, unknown_flag


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


# ---- issue 34.5: the GPU-benchmark seed's spelling, other flags ----------------------------------------


@pytest.mark.parametrize(
    "argv, expected, read",
    [
        (
            ["--training.epochs=5", "--data.batch_size=512", "+experiment=cpu_smoke"],  # the command
            ["train.epochs=5", "data.batch_size=512", "+experiment=cpu_smoke"],
            ["training.epochs -> train.epochs"],
        ),
        (
            ["--training.batch_size", "64", "--training.precision=bf16", "--training.seed", "3"],
            ["data.batch_size=64", "precision=bf16", "seed=3"],
            ["training.batch_size -> data.batch_size", "training.precision -> precision", "training.seed -> seed"],
        ),
        (
            ["profiling.enabled=true", "--model.channels_last=true", "-m", "training.batch_size=8,16"],
            ["profile.enabled=true", "precision.channels_last=true", "-m", "data.batch_size=8,16"],
            [
                "profiling.enabled -> profile.enabled",
                "model.channels_last -> precision.channels_last",
                "training.batch_size -> data.batch_size",
            ],
        ),
        (["+profiling.steps=3", "~training.resume"], ["+profile.steps=3", "~train.resume"], None),
        (["train.epochs=5", "model.arch=resnet18", "--cfg", "job"], None, []),  # bench's own: untouched
    ],
)
def test_the_seeds_keys_are_read_as_benchs(argv, expected, read):
    from bench.config.argv import seed_spelling

    flags, problem = as_overrides(argv)
    assert problem is None
    out, names = seed_spelling(flags)
    assert out == (flags if expected is None else expected)
    if read is not None:
        assert names == read


def test_the_seeds_keys_table_in_the_docs_is_the_mapping():
    from pathlib import Path

    from bench.config.argv import SEED_KEYS, bench_key

    doc = (Path(__file__).resolve().parents[2] / "docs" / "configuration.md").read_text()
    table = doc.split("## The seed's keys")[1].split("\n## ")[0]
    rows = dict(re.findall(r"^\| `([\w.<>]+)` \| `([\w.<>]+)`", table, re.M))
    assert {seed.replace(".<key>", ""): bench.replace(".<key>", "") for seed, bench in rows.items()} == SEED_KEYS
    assert bench_key("training.steps_per_epoch") == "train.steps_per_epoch" and bench_key("train.epochs") is None
    assert bench_key("training") is None  # not a key in either spelling: refused as an unknown key


@pytest.mark.parametrize(
    "argv, hint",
    [
        (["--zzz=3"], ""),
        (["-x"], ""),
        (["--trian.epochs=3"], " (did you mean --train.epochs?)"),
        (["--cfg", "job", "--multirun", "--confg-name=x"], " (did you mean --config-name?)"),
    ],
)
def test_a_flag_that_is_neither_hydras_nor_a_key_is_one_line(argv, hint):
    assert unknown_flag(argv) == (
        f"{argv[-1]} is not valid: accepted a config key as a flag (--data.batch_size=8) or one of Hydra's "
        "flags (--help, --cfg job, -m, --config-name, ...: --hydra-help lists them)" + hint
    )
    assert unknown_flag(["--cfg=job", "-m", "--info", "plugins", "-cn", "config", "data.batch_size=-1", "-1"]) is None


# ---- issue 40.7: every key of the GPU-benchmark seed, as a flag and as key=value --------------------------

STEP_TIMES = "benchmark.log_step_times -> none: bench always writes step_times.csv (every measured step's time)"


@pytest.mark.parametrize(
    "key, value, read_as, expected",
    [
        ("training.epochs", "3", lambda c: c.train.epochs, 3),
        ("training.precision", "fp32", lambda c: str(c.precision.name), "fp32"),
        ("training.precision", "amp", lambda c: str(c.precision.name), "amp_fp16"),  # the seed's name for it
        ("training.precision", "bf16", lambda c: str(c.precision.name), "bf16"),
        ("training.seed", "3", lambda c: c.seed, 3),
        ("training.cudnn_benchmark", "false", lambda c: c.cudnn_benchmark, False),  # a top-level key in bench
        ("data.batch_size", "8", lambda c: c.data.batch_size, 8),
        ("model.channels_last", "true", lambda c: c.precision.channels_last, True),
        ("benchmark.warmup_steps", "7", lambda c: c.benchmark.warmup_steps, 7),
        ("benchmark.measure_steps", "9", lambda c: c.benchmark.measure_steps, 9),
        ("benchmark.measure_seconds", "2.5", lambda c: c.benchmark.measure_seconds, 2.5),
        ("benchmark.sync_cuda", "true", lambda c: c.benchmark.sync, True),
        ("profiling.enabled", "true", lambda c: c.profile.enabled, True),
        ("benchmark.log_step_times", "true", None, STEP_TIMES),  # what bench does instead, in the one line
    ],
)
@pytest.mark.slow  # in-process, but composes each seed key in both spellings: ~2.6 CPU-s
def test_every_key_of_the_gpu_benchmark_seed_reaches_benchs(compose, key, value, read_as, expected):
    from bench.config.argv import seed_spelling

    for argv in ([f"--{key}={value}"], [f"{key}={value}"]):
        flags, problem = as_overrides(argv)
        assert problem is None and not unknown_flag(flags), argv
        overrides, read = seed_spelling(flags)
        config = compose(*overrides)
        if read_as is None:
            assert overrides == [] and read == [expected]
        else:
            assert read_as(config) == expected, argv
            assert all(line.startswith(key) for line in read) and bool(read) == (overrides != flags)  # said once
