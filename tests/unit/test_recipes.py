"""The fast ImageNet pipeline's recipes (docs/training.md, "The twelve recipes"): every command of
the table composes into a valid config, a sweep's line job by job, as `python -m bench` would."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from bench.__main__ import quote_list_values
from bench.launch.preview import jobs_of

DOC = Path(__file__).resolve().parents[2] / "docs" / "training.md"


def recipe_commands():
    table = DOC.read_text().split("## The twelve recipes of the fast ImageNet pipeline")[1].split("\n## ")[0]
    return re.findall(r"^\| (\d+) \| (.+?) \| `python -m bench (.+)` \|$", table, re.M)


def test_the_table_holds_every_recipe():
    recipes = recipe_commands()
    assert [int(n) for n, _, _ in recipes] == list(range(1, 15))
    named = {m for _, _, command in recipes for m in re.findall(r"\+experiment=(\w+)", command)}
    shipped = {p.stem for p in (DOC.parents[1] / "conf" / "experiment").glob("imagenet_*.yaml")}
    assert shipped <= named  # every ImageNet preset is one of the recipes


@pytest.mark.parametrize("number, what, command", recipe_commands(), ids=lambda v: str(v)[:30])
def test_every_recipe_composes(compose, number, what, command):
    words = shlex.split(command)
    overrides = [quote_list_values(w) for w in words if w not in ("-m", "--multirun")]  # as the CLI does
    jobs = jobs_of(overrides) if "-m" in words else [overrides]
    assert len(jobs) >= (2 if "-m" in words else 1)
    for job in jobs:
        config = compose(*job, "data.root=/data/imagenet")
        assert config.model.arch == "resnet50" and config.train.epochs >= 5
        if "sweep" in what:
            assert len(jobs) in (3, 4)
