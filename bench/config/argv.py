"""Config keys spelled as flags (`--data.batch_size=8`, `--data.batch_size 8`, the style of argparse
CLIs such as the seed's) read as Hydra's overrides (`data.batch_size=8`). Hydra's own flags (--cfg,
--help, -m, --config-name, ...) hold no dot and name no config key, so they pass untouched;
`--experiment=NAME` is `+experiment=NAME`.
Import-light: run by `python -m bench` before Hydra starts."""

from __future__ import annotations

import dataclasses
import re
from typing import List, Optional, Sequence, Tuple

from bench.config.schema import BenchConfig

DOTTED = re.compile(r"^[A-Za-z_]\w*(\.\w+)+$")  # data.batch_size, storage.s3.bucket
PRESET = "experiment"  # --experiment=NAME is +experiment=NAME


def top_level_keys() -> List[str]:
    """The schema's top-level keys and groups (mode, seed, model, data, ...), `experiment` and `hydra`."""
    return [f.name for f in dataclasses.fields(BenchConfig) if f.name != "defaults"] + [PRESET, "hydra"]


def _config_key(name: str, top: Sequence[str]) -> bool:
    return (bool(DOTTED.match(name)) and name.split(".")[0] in top) or name in top


def _not_a_value(arg: str, top: Sequence[str]) -> bool:
    """The argument after `--key` is a flag or an override of its own (`hydra.run.dir=x`), not key's value."""
    key, sep, _ = arg.lstrip("+~").partition("=")
    return arg.startswith("--") or arg in ("-m", "-c") or (bool(sep) and _config_key(key, top))


def as_overrides(argv: Sequence[str]) -> Tuple[List[str], Optional[str]]:
    """argv with every `--key=value` / `--key value` whose key is a config key as `key=value`; and the
    one-line reason when such a flag has no value (None when all is well)."""
    top, out, args = top_level_keys(), [], list(argv)
    index = 0
    while index < len(args):
        arg = args[index]
        index += 1
        name, sep, value = arg[2:].partition("=")
        if not arg.startswith("--") or not _config_key(name, top):
            out.append(arg)
            continue
        if not sep:
            if index >= len(args) or _not_a_value(args[index], top):
                return out, (
                    f"{arg} is not valid: accepted {name}=VALUE (Hydra's spelling; --{name}=VALUE and "
                    f"--{name} VALUE are read as it)"
                )
            value, index = args[index], index + 1
        out.append(f"+{name}={value}" if name == PRESET else f"{name}={value}")
    return out, None
