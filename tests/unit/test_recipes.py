"""The fast ImageNet pipeline's recipes (docs/training.md, "The twelve recipes"): every command of
the table composes into a valid config, a sweep's line job by job (a preset's own
hydra.sweeper.params included), as `python -m bench` would, with the seed's values where the table
names them (issue 30, items 7 and 8)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import List

import pytest

from bench.__main__ import quote_list_values
from bench.launch.preview import jobs_of, preset_sweep

DOC = Path(__file__).resolve().parents[2] / "docs" / "training.md"


def recipe_commands():
    table = DOC.read_text().split("## The twelve recipes of the fast ImageNet pipeline")[1].split("\n## ")[0]
    return re.findall(r"^\| (\d+) \| (.+?) \| `python -m bench (.+?)` \| .+ \|$", table, re.M)


def jobs(command: str) -> List[List[str]]:
    words = shlex.split(command)
    overrides = [quote_list_values(w) for w in words if w not in ("-m", "--multirun")]  # as the CLI does
    if "-m" not in words:
        return [overrides]
    return jobs_of(preset_sweep(overrides) + overrides)


def test_the_table_holds_every_recipe():
    recipes = recipe_commands()
    assert [int(n) for n, _, _ in recipes] == list(range(1, 19))
    named = {m for _, _, command in recipes for m in re.findall(r"\+experiment=(\w+)", command)}
    shipped = {p.stem for p in (DOC.parents[1] / "conf" / "experiment").glob("imagenet_*.yaml")}
    assert shipped <= named  # every ImageNet preset is one of the recipes


@pytest.mark.parametrize("number, what, command", recipe_commands(), ids=lambda v: str(v)[:30])
def test_every_recipe_composes(compose, number, what, command):
    found = jobs(command)
    assert len(found) >= (2 if "-m" in command.split() else 1)
    for job in found:
        config = compose(*job, "data.root=/data/imagenet")
        assert config.model.arch == "resnet50" and config.train.epochs >= 5
        if "-m" in command.split():
            assert len(found) in (3, 4)


def configs(compose, number: int):
    command = next(c for n, _, c in recipe_commands() if int(n) == number)
    return [compose(*job, "data.root=/data/imagenet") for job in jobs(command)]


def test_recipe_8_compares_the_three_schedules_with_milestones_in_epochs(compose):
    """Issue 30.7: `-m +experiment=imagenet_fast scheduler=multistep,...` gave multistep [100, 150]
    counted in steps (the lr /100 inside ImageNet's first epoch): the presets count them in epochs."""
    found = configs(compose, 8)
    assert [str(c.scheduler.name) for c in found] == ["multistep", "cosine", "onecycle"]
    multistep = found[0].scheduler
    assert multistep.milestones == [6, 12, 16] and str(multistep.milestone_unit) == "epochs"
    assert all(c.train.epochs == 18 and str(c.precision.name) == "bf16" for c in found)
    obvious = jobs("-m +experiment=imagenet_fast scheduler=multistep,cosine,onecycle")
    assert str(compose(*obvious[0]).scheduler.milestone_unit) == "epochs"
    assert compose("scheduler=multistep").scheduler.milestones == [100, 150]  # the group's own default stays


def test_the_presets_hold_the_seeds_values(compose):
    """Issue 30.8: the seed's settings, as docs/training.md's table names them."""
    speed = configs(compose, 13)[0]
    assert (str(speed.scheduler.name), speed.optimizer.lr, speed.data.num_workers) == ("cosine", 0.4, 16)
    assert speed.scheduler.scale_lr is False and speed.train.epochs == 18 and str(speed.precision.name) == "bf16"
    assert speed.optimizer.exclude_bn_bias_from_wd and speed.data.progressive
    debug = configs(compose, 10)[0]
    assert (debug.data.batch_size, debug.train.epochs, debug.data.progressive) == (32, 5, None)
    assert str(debug.precision.name) == "amp_fp16" and debug.optimizer.lr == 0.1 and not debug.scheduler.scale_lr
    five = configs(compose, 5)[0]
    assert str(five.precision.name) == "bf16" and five.distributed.world_size == 4
    three = configs(compose, 3)[0]
    assert three.distributed.world_size == 2 and str(three.scheduler.name) == "multistep"
    assert configs(compose, 6)[0].data.progressive == "0,96,2048;4,128,1024;8,160,512;12,224,256"
    low = configs(compose, 14)[0]
    assert low.data.progressive == "0,128,128;5,160,96;10,192,64;15,224,48" and str(low.precision.name) == "amp_fp16"
    quick = configs(compose, 15)[0]
    assert quick.data.progressive == "0,128,512;3,224,256" and quick.train.epochs == 5
    best = configs(compose, 16)[0]
    assert (best.train.epochs, best.optimizer.lr, str(best.scheduler.name)) == (30, 0.1, "multistep")
    assert str(best.precision.name) == "amp_fp16" and str(best.scheduler.milestone_unit) == "epochs"


class Epochs:
    """What bench.train.build reads of EpochData to place milestones: the steps planned per epoch."""

    def __init__(self, config, steps_per_epoch: int):
        self.config, self.per_epoch = config, steps_per_epoch

    def planned(self, first: int, skip: int = 0) -> int:
        return max(0, self.config.train.epochs - first) * self.per_epoch - skip

    def steps(self, epoch: int) -> int:
        return self.per_epoch


def test_milestones_in_steps_inside_the_first_of_several_epochs_are_named_in_a_warning(compose, caplog):
    from bench.train.build import _in_steps

    config = compose("scheduler=multistep", "train.epochs=18")
    with caplog.at_level("WARNING", logger="bench"):
        kept = _in_steps(config.scheduler, Epochs(config, 5004), warmup=0)
    assert kept.milestones == [100, 150]  # as asked: a warning, not a change
    assert "scheduler.milestones [100, 150] are optimizer steps: all fall in epoch 1 of 18 (5004 steps)" in caplog.text
    assert "x0.01 from step 150 on; scheduler.milestone_unit=epochs" in caplog.text
    caplog.clear()
    epochs = compose("+experiment=imagenet_fast", "scheduler=multistep", "data.root=/data/imagenet")
    placed = _in_steps(epochs.scheduler, Epochs(epochs, 5004), warmup=0)
    assert placed.milestones == [6 * 5004, 12 * 5004, 16 * 5004] and not caplog.text
    # issue 33.3: recipe 10 keeps the seed's 30/60/80 in a 5-epoch run: past its end, never clamped to it
    debug = configs(compose, 10)[0]
    assert list(debug.scheduler.milestones) == [30, 60, 80] and debug.train.epochs == 5
    past = _in_steps(debug.scheduler, Epochs(debug, 40037), warmup=10)
    assert past.milestones == [10 + 30 * 40037, 10 + 60 * 40037, 10 + 80 * 40037]
