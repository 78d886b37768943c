"""The A/B tools' one harness (`bench.overhead`, `bench.sweep_overhead`, `bench.tools.train_costs`,
`bench.data bench-loader`, `bench.iobench.compare`, `bench.tools.storage_ceiling`). Each declares its
sides (a callable per side: one pass, one figure), its unit and its threshold; bench.analysis.rounds
runs them alternating A-B-B-A, and `said` prints their ratio. A tool's flags that size the
workload are spellings of config keys (`--batch-size 32` is data.batch_size=32, SPELLINGS) and any other
key is taken as `python -m bench` takes it (`data.num_workers=4`, `--data.num_workers=4`: bench.config.argv)."""

from __future__ import annotations

import argparse
import math
import sys
from typing import List, Optional, Sequence, Tuple

from bench.analysis.rounds import Ratio

# a flag -> the config key it spells (a tool declares which of these it takes, with its own default)
SPELLINGS = {
    "--model": "model.arch",
    "--image-size": "data.image_size",
    "--batch-size": "data.batch_size",
    "--num-classes": "data.num_classes",
    "--classes": "data.num_classes",
    "--workers": "data.num_workers",
    "--threads": "cpu_threads",
    "--steps": "train.steps_per_epoch",
    "--warmup": "benchmark.warmup_steps",
    "--epochs": "train.epochs",
}


def spell(parser: argparse.ArgumentParser, flag: str, default: object, help: str = "", key: str = "") -> None:
    """`flag` on `parser` as a spelling of a config key (`key`, else SPELLINGS'), with the tool's own default."""
    key = key or SPELLINGS[flag]
    parser.set_defaults(spelled={**(parser.get_default("spelled") or {}), flag: key})
    kind = int if default is None else type(default)
    said = f"{help + '; ' if help else ''}the config key {key}"
    parser.add_argument(flag, type=kind, default=default, help=f"{said} (default {default})")


def parse(parser: argparse.ArgumentParser, argv: Optional[Sequence[str]]) -> Tuple[argparse.Namespace, List[str]]:
    """The tool's arguments, and its config overrides: each spelling flag's key=value, then every config
    key given as `python -m bench` reads it (`key=value`, `--key=value`, `--key value`, the seed's names).
    A flag that is neither the tool's nor a config key: argparse's usage line, exit 2."""
    from bench.config.argv import as_overrides, seed_spelling

    given, problem = as_overrides(list(sys.argv[1:] if argv is None else argv))
    if problem:
        parser.error(problem)
    keys = [arg for arg in given if "=" in arg and not arg.startswith("-")]
    args = parser.parse_args([arg for arg in given if arg not in keys])
    return args, seed_spelling([*spelled(args), *keys])[0]


def spelled(args: argparse.Namespace) -> List[str]:
    """The config keys the spelling flags of `args` set (`data.batch_size=32` for --batch-size 32)."""
    values = {key: getattr(args, flag[2:].replace("-", "_")) for flag, key in args.spelled.items()}
    return [f"{key}={value}" for key, value in values.items() if value is not None]


QUIET = ["benchmark.progress=false", "tracking.enabled=false"]


def one_epoch(steps: int, warmup: int) -> List[str]:
    """The keys of a short training run: one epoch of `steps` measured after `warmup`, no progress bar, untracked."""
    return ["train.epochs=1", f"train.steps_per_epoch={steps}", f"benchmark.warmup_steps={warmup}", *QUIET]


def below_one(args: argparse.Namespace, *names: str) -> Optional[str]:
    """The first of these integer flags below 1 (`rounds`: bench.analysis.rounds needs one), in one sentence."""
    for name in names:
        if (value := getattr(args, name)) is not None and value < 1:
            return f"--{name.replace('_', '-')}={value} is not valid: accepted an integer of 1 or more."
    return None


def said(ratio: Ratio, digits: int = 2) -> str:
    """A ratio as the A/B tools print it: `0.98 [95% 0.95-1.01] same`. One under 10^-digits keeps two
    significant digits (0.0042, not 0.00: a side far slower than the other is not 0x it)."""

    def shown(value: float) -> str:
        return f"{value:.{1 - math.floor(math.log10(value)) if 0 < value < 10**-digits else digits}f}"

    return f"{shown(ratio.ratio)} [95% {shown(ratio.low)}-{shown(ratio.high)}] {ratio.verdict_at(digits)}"
