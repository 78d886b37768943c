"""The fast ImageNet pipeline's recipes (docs/training.md, "The twelve recipes"): every command of
the table composes into a valid config, a sweep's line job by job (a preset's own
hydra.sweeper.params included), as `python -m bench` would, with the seed's values where the table
names them (issue 30, items 7 and 8); and every value in which a recipe differs from the seed is
named in its row, with its reason in the table of the seed's defaults (issue 34.4)."""

from __future__ import annotations

import functools
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
@pytest.mark.slow  # in-process, but every recipe composed: ~3 s each
def test_every_recipe_composes(compose, number, what, command):
    found = jobs(command)
    assert len(found) >= (2 if "-m" in command.split() else 1)
    for job in found:
        config = composed(*job, "data.root=/data/imagenet")
        assert config.model.arch == "resnet50" and config.train.epochs >= 5
        if "-m" in command.split():
            assert len(found) in (3, 4)


@functools.lru_cache(maxsize=None)
def composed(*overrides: str):
    """The checked config of these overrides, composed once for the module's tests (none edits one)."""
    from bench.config import compose

    return compose(*overrides)


def configs(compose, number: int):
    command = next(c for n, _, c in recipe_commands() if int(n) == number)
    return [composed(*job, "data.root=/data/imagenet") for job in jobs(command)]


@pytest.mark.slow  # in-process, but composes a recipe's jobs and two presets' sweeps: ~2.5 CPU-s
def test_recipe_8_compares_the_three_schedules_with_milestones_in_epochs(compose):
    """Issue 30.7: `-m +experiment=imagenet_fast scheduler=multistep,...` gave multistep [100, 150]
    counted in steps (the lr /100 inside ImageNet's first epoch): the presets count them in epochs.
    Issue 34.4: the seed's recipe 8 compares them on its defaults (imagenet_baseline)."""
    found = configs(compose, 8)
    assert [str(c.scheduler.name) for c in found] == ["multistep", "cosine", "onecycle"]
    multistep = found[0].scheduler
    assert multistep.milestones == [30, 60, 80] and str(multistep.milestone_unit) == "epochs"
    assert all(c.train.epochs == 90 and str(c.precision.name) == "amp_fp16" for c in found)
    assert found[2].scheduler.pct_start == 0.3 and found[2].optimizer.lr == 0.1  # the seed's OneCycle
    for preset in ("imagenet_baseline", "imagenet_fast"):
        obvious = jobs(f"-m +experiment={preset} scheduler=multistep,cosine,onecycle")
        assert str(compose(*obvious[0]).scheduler.milestone_unit) == "epochs"
    assert compose(*obvious[0]).scheduler.milestones == [6, 12, 16]  # imagenet_fast's, scaled to 18 epochs
    assert compose("scheduler=multistep").scheduler.milestones == [100, 150]  # the group's own default stays


@pytest.mark.slow  # in-process, but composes every preset: ~2 CPU-s
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


# ---- issue 34.4: the seed's values, and every difference named ---------------------------------------

NOT_NAMED = "not named"  # the seed gives no value: any value bench picks is a difference to name
SWEPT = "swept"  # the recipe sweeps it: each job's own value, nothing to compare
PROGRESSIVE = "0,128,512;5,160,384;10,192,320;15,224,256"  # the seed's schedule when it names none
SEED_ONECYCLE = "0 → 1 → 0.01"  # the seed's one-cycle lr from 0 to its peak and down to 1% of it (issue 40.8)
# The fast-ImageNet seed's defaults, in bench's keys. `lr` is the lr the run starts at (optimizer.lr,
# times the first phase's global batch / 256 with scheduler.scale_lr). Keys the seed does not name hold
# bench's schema default: a preset that changes one names it too.
SEED = {
    "train.epochs": 90,
    "optimizer": "sgd",
    "lr": 0.1,
    "optimizer.weight_decay": 1e-4,
    "optimizer.grad_clip_norm": 1.0,
    "optimizer.exclude_bn_bias_from_wd": False,
    "optimizer.nesterov": False,
    "precision": "amp_fp16",
    "precision.channels_last": False,
    "compile": False,
    "scheduler": "multistep",
    "scheduler.milestones": NOT_NAMED,
    "scheduler.pct_start": 0.3,
    "onecycle_range": SEED_ONECYCLE,
    "data.progressive": None,
    "data.batch_size": 256,
    "data.image_size": 224,
    "data.num_workers": 8,
    "train.label_smoothing": 0.0,
    "model.zero_init_residual": False,
    "distributed.nproc_per_node": 1,
}
UNNAMED = {"optimizer.nesterov", "precision.channels_last", "compile", "model.zero_init_residual"}  # hold the default
FAST = {"data.progressive": PROGRESSIVE, "scheduler": "onecycle"}  # #2, "the recommended one"
# Each recipe's own settings (the second column of the table), over the defaults.
RECIPES = {
    1: {},
    2: FAST,
    3: {"distributed.nproc_per_node": 2},
    4: {**FAST, "distributed.nproc_per_node": 4},
    5: {"precision": "bf16", "distributed.nproc_per_node": NOT_NAMED},
    6: {"data.progressive": "0,96,2048;4,128,1024;8,160,512;12,224,256"},
    7: {"optimizer": "adamw", "lr": NOT_NAMED, "optimizer.weight_decay": NOT_NAMED},
    8: {"scheduler": SWEPT},
    9: {"precision": SWEPT},
    10: {"train.epochs": 5, "data.batch_size": 32},
    11: {**FAST, "distributed.nproc_per_node": NOT_NAMED},  # "all optimisations": the recommended ones
    12: {},
    13: {
        "train.epochs": 18,
        "lr": 0.4,
        "precision": "bf16",
        "data.progressive": PROGRESSIVE,
        "optimizer.exclude_bn_bias_from_wd": True,
        "scheduler": "cosine",
        "data.num_workers": 16,
    },
    14: {"data.progressive": "0,128,128;5,160,96;10,192,64;15,224,48"},
    15: {"train.epochs": 5, "precision": "bf16", "data.progressive": "0,128,512;3,224,256"},
    16: {"train.epochs": 30, "data.progressive": PROGRESSIVE},
    17: {**FAST, "distributed.nproc_per_node": SWEPT},  # bench's own rows: the recommended recipe
    18: {**FAST, "distributed.nproc_per_node": 2},
}


def recipe_values(config) -> dict:
    """The compared values of a composed config, in the SEED's keys."""
    from bench.config.data import parse_progressive
    from bench.train.optim import effective_lr

    c = config
    phases = parse_progressive(c.data.progressive) if c.data.progressive else []
    batch = phases[0].batch_size if phases else c.data.batch_size
    values = {
        "train.epochs": c.train.epochs,
        "optimizer": str(c.optimizer.name),
        "lr": round(effective_lr(c.optimizer, c.scheduler, batch * c.distributed.world_size), 6),
        "optimizer.weight_decay": c.optimizer.weight_decay,
        "optimizer.grad_clip_norm": c.optimizer.grad_clip_norm,
        "optimizer.exclude_bn_bias_from_wd": c.optimizer.exclude_bn_bias_from_wd,
        "optimizer.nesterov": c.optimizer.nesterov,
        "precision": str(c.precision.name),
        "precision.channels_last": c.precision.channels_last,
        "compile": c.compile,
        "scheduler": str(c.scheduler.name),
        "data.progressive": c.data.progressive,
        "data.num_workers": c.data.num_workers,
        "train.label_smoothing": c.train.label_smoothing,
        "model.zero_init_residual": c.model.zero_init_residual,
        "distributed.nproc_per_node": c.distributed.nproc_per_node,
    }
    if c.scheduler.name == "multistep":
        values["scheduler.milestones"] = list(c.scheduler.milestones)
    if c.scheduler.name == "onecycle":
        values["scheduler.pct_start"] = c.scheduler.pct_start
        values["onecycle_range"] = onecycle_range(c.scheduler)
    if not phases:  # a progressive schedule sets the batch and the size
        values["data.batch_size"], values["data.image_size"] = c.data.batch_size, c.data.image_size
    return values


def onecycle_range(scheduler) -> str:
    """The one-cycle lr's start, peak and end in multiples of its peak, as bench builds it."""
    import torch

    from bench.train.optim import build_scheduler

    optimizer = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=1.0, momentum=0.9)
    group = build_scheduler(optimizer, scheduler, 1000, 1.0).optimizer.param_groups[0]
    return " → ".join(f"{group[k] / group['max_lr']:g}" for k in ("initial_lr", "max_lr", "min_lr"))


def differences(number: int, config) -> dict:
    """{key: bench's value} where the job differs from the seed's recipe `number`."""
    seed = {**SEED, **RECIPES[number]}
    found = recipe_values(config)
    return {k: v for k, v in found.items() if seed[k] != SWEPT and (seed[k] == NOT_NAMED or seed[k] != v)}


def shown(value) -> str:
    """A value as the doc's tables write it."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, list):
        return "[" + ", ".join(map(str, value)) + "]"
    return f"{value:g}".replace("e-0", "e-") if isinstance(value, float) else str(value)


def defaults_table() -> dict:
    """docs/training.md's table of the seed's defaults: {key: (the seed's cell, bench's cell, why)}."""
    text = DOC.read_text().split("## The seed's defaults, and where bench differs")[1].split("\n## ")[0]
    rows = re.findall(r"^\| `([\w.]+)` \| (.+?) \| (.+?) \| (.+?) \|$", text, re.M)
    return {key: (seed, bench, why) for key, seed, bench, why in rows}


@pytest.mark.slow  # in-process, but composes every preset: ~1.5 CPU-s
def test_the_defaults_table_holds_the_seeds_values_and_the_presets(compose):
    table = defaults_table()
    assert set(table) == set(SEED)
    presets = {p.stem for p in (DOC.parents[1] / "conf" / "experiment").glob("imagenet_*.yaml")}
    for key, (seed, bench, why) in table.items():
        assert seed == (f"not named (bench's default: {shown(SEED[key])})" if key in UNNAMED else shown(SEED[key])), key
        assert len(why) > 20, key  # a reason, not a dash
        for part in bench.split("; "):  # "`VALUE` in `preset`, `preset` (prose)"
            ticked = re.findall(r"`([^`]+)`", part)
            for preset in [t for t in ticked[1:] if t in presets]:
                assert (
                    shown(recipe_values(composed(f"+experiment={preset}", "data.root=/data/imagenet"))[key])
                    == ticked[0]
                ), (key, preset)


# "the baseline's" / "the fast recipe" in a row: the differences of imagenet_baseline / imagenet_fast
# from the seed's #1 / #2
SHORTHANDS = {"the baseline's": (1, "imagenet_baseline"), "the fast recipe": (2, "imagenet_fast")}


@pytest.mark.slow  # in-process, but composes every recipe row: ~5 CPU-s
@pytest.mark.parametrize("number, what, command", recipe_commands(), ids=lambda v: str(v)[:30])
def test_every_difference_from_the_seed_is_named_in_its_row(compose, number, what, command):
    """The row's last column names (in backticks) each key in which a job of the command differs
    from the seed's recipe, and no key that does not differ; a shorthand covers its preset's
    differences; each named key has its reason in the defaults table."""
    cell = next(line for line in DOC.read_text().splitlines() if line.startswith(f"| {number} | "))
    cell = cell.rsplit(" | ", 2)[-1]
    named = set(re.findall(r"`([\w.]+)`", cell)) & set(SEED)
    found = set().union(*(differences(int(number), c) for c in configs(compose, int(number))))
    shorthand = set()
    for words, (seed_number, preset) in SHORTHANDS.items():
        if words in cell:
            covered = set(differences(seed_number, composed(f"+experiment={preset}", "data.root=/data/imagenet")))
            assert covered & found, f"#{number} names {words!r} and differs in none of its keys"
            shorthand |= covered
    assert named <= found, f"#{number} names keys that do not differ: {sorted(named - found)}"
    assert found <= named | shorthand, f"#{number} differs from the seed in {sorted(found - named - shorthand)}"
    assert found <= set(defaults_table())
