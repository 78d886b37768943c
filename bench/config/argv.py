"""Config keys spelled as flags (`--data.batch_size=8`, `--data.batch_size 8`, the style of argparse
CLIs such as the seed's) read as Hydra's overrides (`data.batch_size=8`). Hydra's own flags (--cfg,
--help, -m, --config-name, ...) hold no dot and name no config key, so they pass untouched;
`--experiment=NAME` is `+experiment=NAME`; any other flag is refused in one line (not Hydra's usage
dump). The GPU-benchmark seed's key names (`training.epochs`, `profiling.enabled`, ...) are read as
bench's (SEED_KEYS; docs/configuration.md, "The seed's keys").
Import-light: run by `python -m bench` before Hydra starts."""

from __future__ import annotations

import dataclasses
import difflib
import functools
import re
import sys
import textwrap
import typing
from pathlib import Path
from typing import List, Optional, Sequence, Tuple

from hydra._internal.utils import get_args_parser

from bench import config_dir
from bench.config.schema import BenchConfig

DOTTED = re.compile(r"^[A-Za-z_]\w*(\.\w+)+$")  # data.batch_size, storage.s3.bucket
PRESET = "experiment"  # --experiment=NAME is +experiment=NAME
# The GPU-benchmark seed's spelling -> bench's: a whole key, or a first part that maps every key under it
SEED_KEYS = {
    "training.batch_size": "data.batch_size",
    "training.precision": "precision",
    "training.seed": "seed",
    "training.cudnn_benchmark": "cudnn_benchmark",
    "model.channels_last": "precision.channels_last",
    "benchmark.sync_cuda": "benchmark.sync",
    "training": "train",  # training.epochs, training.steps_per_epoch, ...
    "profiling": "profile",  # profiling.enabled, profiling.steps, ...
}
SEED_VALUES = {"precision": {"amp": "amp_fp16"}}  # the seed's option names -> bench's
# the seed's keys bench has no key for, as what bench does instead: dropped, and said
SEED_DROPPED = {"benchmark.log_step_times": "bench always writes step_times.csv (every measured step's time)"}


def bench_key(key: str) -> Optional[str]:
    """bench's name for a key in the seed's spelling (`training.epochs` -> `train.epochs`); None if it is not one."""
    first, dot, rest = key.partition(".")
    if not dot:  # `training=5` names no key of the seed's either
        return None
    if key in SEED_KEYS:
        return SEED_KEYS[key]
    return f"{SEED_KEYS[first]}.{rest}" if first in SEED_KEYS and "." not in SEED_KEYS[first] else None


def seed_spelling(argv: Sequence[str]) -> Tuple[List[str], List[str]]:
    """argv with each override in the seed's spelling in bench's (`training.epochs=5` -> `train.epochs=5`,
    a `+`/`~` kept), and `seed key -> bench key` for each one read so."""
    out, read = [], []
    for arg in argv:
        prefix = arg[: len(arg) - len(arg.lstrip("+~"))]
        key, sep, value = arg[len(prefix) :].partition("=")
        new = bench_key(key) if (sep or prefix == "~") and not arg.startswith("-") else None
        if key in SEED_DROPPED and not arg.startswith("-"):
            read.append(f"{key} -> none: {SEED_DROPPED[key]}")
            continue
        if new is None:
            out.append(arg)
            continue
        bench_value = ",".join(SEED_VALUES.get(new, {}).get(v, v) for v in value.split(","))
        out.append(f"{prefix}{new}{sep}{bench_value}")
        read.append(f"{key} -> {new}" if bench_value == value else f"{key}={value} -> {new}={bench_value}")
    return out, read


def hydra_flags(taking_a_value: bool = False) -> List[str]:
    """Hydra's own command-line flags (--cfg, -m, --help, ...), from its argument parser; `taking_a_value`:
    only those followed by their value (--cfg job, --config-name NAME, ...)."""
    actions = [action for action in get_args_parser()._actions if action.nargs is None or not taking_a_value]
    return sorted(s for action in actions for s in action.option_strings)


def unknown_flag(argv: Sequence[str]) -> Optional[str]:
    """The one-line reason for a flag that is neither Hydra's nor a config key (argparse would print
    Hydra's usage and `unrecognized arguments`); None when there is none."""
    flags = hydra_flags()
    for arg in argv:
        name = arg.split("=", 1)[0]
        if arg.startswith("-") and name not in flags and not re.fullmatch(r"-[\d.]+", arg):
            close = difflib.get_close_matches(name, flags + [f"--{key}" for key in _keys(BenchConfig)], n=1)
            return (
                f"{arg} is not valid: accepted a config key as a flag (--data.batch_size=8) or one of Hydra's "
                "flags (--help, --cfg job, -m, --config-name, ...: --hydra-help lists them)"
                + (f" (did you mean {close[0]}?)" if close else "")
            )
    return None


# Where hydra.mode can come from besides conf/ (which never sets it: tests/unit/test_config.py holds that):
# config files from another place (these flags), and these override keys
CONFIG_ELSEWHERE_FLAGS = ("--config-dir", "-cd", "--config-path", "-cp", "--config-name", "-cn")
MODE_KEYS = ("hydra", "hydra.mode", "hydra.searchpath")


def mode_is_the_command_lines(argv: Sequence[str]) -> bool:
    """True where nothing but -m can make this command a sweep: no flag brings config files from
    elsewhere, no override sets hydra.mode or the search path. There hydra.mode is unset, and Hydra's
    own way to learn that (Hydra.get_mode: the whole config composed once more before the run composes
    it, a fifth of a small run's CPU) has nothing to find."""
    for arg in argv:
        if arg.split("=", 1)[0] in CONFIG_ELSEWHERE_FLAGS:
            return False
        if not arg.startswith("-") and arg.lstrip("+~").split("=", 1)[0].strip() in MODE_KEYS:
            return False
    return True


def compose_once() -> None:
    """Hydra composes the whole config to read hydra.mode (Hydra.get_mode) before the run composes it
    again; where only -m can set the mode (mode_is_the_command_lines), the answer is "unset" without
    that compose. Hydra's own get_mode answers everywhere else (hydra-core is pinned to 1.3)."""
    from hydra._internal.hydra import Hydra

    hydras = Hydra.get_mode
    if not hasattr(hydras, "__wrapped__"):  # once per process: the bad-input table runs cli() again

        @functools.wraps(hydras)
        def get_mode(self, config_name, overrides):
            return None if mode_is_the_command_lines(sys.argv[1:]) else hydras(self, config_name, overrides)

        Hydra.get_mode = get_mode  # type: ignore[method-assign]


def help_groups(width: int = 80) -> str:
    """`--help`'s groups (Hydra's $APP_CONFIG_GROUPS put the presets on one 462-character line): each
    group's options wrapped to `width` columns; the presets counted, `--help experiment` lists them."""
    lines = []
    for group in sorted(p for p in Path(config_dir()).iterdir() if p.is_dir() and p.name != "hydra"):
        options = sorted(f.stem for f in group.glob("*.yaml"))
        said = f"{len(options)} presets, each with what it is: python -m bench --help {PRESET}"
        said = said if group.name == PRESET else ", ".join(options)
        lines.append(textwrap.fill(f"{group.name}: {said}", width, subsequent_indent="    ", break_on_hyphens=False))
    return "\n".join(lines)


def presets_help(width: int = 80) -> str:
    """`python -m bench --help experiment`: every preset, one a line with the first line of its comment."""
    lines = []
    for preset in sorted((Path(config_dir()) / PRESET).glob("*.yaml")):
        said = next((line[2:] for line in preset.read_text().splitlines() if line[:2] == "# " and "@" not in line), "")
        lines.append(textwrap.shorten(f"{preset.stem}: {said}", width, placeholder="..."))
    return "\n".join(lines)


def _keys(schema: type, prefix: str = "") -> List[str]:
    """Every key of the schema, dotted (data.batch_size, storage.workload.format, ...)."""
    hints = typing.get_type_hints(schema)
    keys = []
    for field in dataclasses.fields(schema):
        hint = hints.get(field.name)
        if isinstance(hint, type) and dataclasses.is_dataclass(hint):
            keys += _keys(hint, f"{prefix}{field.name}.")
        else:
            keys.append(prefix + field.name)
    return keys


def _config_key(name: str, top: Sequence[str]) -> bool:
    return (bool(DOTTED.match(name)) and name.split(".")[0] in top) or name in top


def _not_a_value(arg: str, top: Sequence[str]) -> bool:
    """The argument after `--key` is a flag or an override of its own (`hydra.run.dir=x`), not key's value."""
    key, sep, _ = arg.lstrip("+~").partition("=")
    return arg.startswith("--") or arg in ("-m", "-c") or (bool(sep) and _config_key(key, top))


def as_overrides(argv: Sequence[str]) -> Tuple[List[str], Optional[str]]:
    """argv with every `--key=value` / `--key value` whose key is a config key as `key=value`; and the
    one-line reason when such a flag has no value (None when all is well)."""
    # the schema's top-level keys and groups (mode, seed, model, data, ...), `experiment`, `hydra`, the seed's
    top = [f.name for f in dataclasses.fields(BenchConfig) if f.name != "defaults"] + [PRESET, "hydra", *SEED_KEYS]
    out, args = [], list(argv)
    while args:
        arg = args.pop(0)
        name, sep, value = arg[2:].partition("=")
        if not arg.startswith("--") or not _config_key(name, top):
            out.append(arg)
            continue
        if not sep:
            if not args or _not_a_value(args[0], top):
                return out, (
                    f"{arg} is not valid: accepted {name}=VALUE (Hydra's spelling; --{name}=VALUE and "
                    f"--{name} VALUE are read as it)"
                )
            value = args.pop(0)
        out.append(f"+{name}={value}" if name == PRESET else f"{name}={value}")
    return out, None
