"""What the schema cannot check on its own, before any run state exists.

Hydra lets `+key=value` add keys the schema does not have (and `OmegaConf.to_object` drops
them without a word), so a typo like `+benchmark.warmup_step=5` would pass silently: this
walks the composed config against the schema first. The checks that need the world outside
the config (the dataset on disk, the device, the model registry) belong to the scenario
that needs them: see `Scenario.preflight` (bench.scenarios).
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import typing
from typing import Any

from omegaconf import DictConfig, OmegaConf

from bench.config.schema import BenchConfig
from bench.errors import ConfigError


def reject_unknown_keys(cfg: DictConfig, schema: type = BenchConfig, prefix: str = "") -> None:
    hints = typing.get_type_hints(schema)
    names = [f.name for f in dataclasses.fields(schema)]
    for key in map(str, cfg):
        if key != "defaults" and key not in names:
            container = OmegaConf.to_container(cfg, resolve=False)
            assert isinstance(container, dict)  # a DictConfig's container is a dict
            raise unknown_key(prefix + key, container.get(key))
        child: Any = cfg._get_node(key)
        if dataclasses.is_dataclass(hints.get(key)) and isinstance(child, DictConfig):
            reject_unknown_keys(child, hints[key], f"{prefix}{key}.")


def reject_unknown_attributes(node: Any, prefix: str = "") -> None:
    """A dataclass takes any attribute (`config.data.batch_sise = 8` in Python), and asdict drops
    it without a word: the same typo as `+data.batch_sise=8`, refused the same way."""
    names = [field.name for field in dataclasses.fields(node)]
    for name, value in vars(node).items():
        if name not in names:
            raise unknown_key(prefix + name, value)
        if dataclasses.is_dataclass(value):
            reject_unknown_attributes(value, f"{prefix}{name}.")


def unknown_key(dotted: str, value: Any = None) -> ConfigError:
    """`data.batch_sise` (or `trainn.epochs`) -> the ConfigError naming the group whose key is unknown
    and the closest key (`data.batch_size`, `train.epochs`)."""
    parts = dotted.split(".")
    schema: Any = BenchConfig
    depth = 0
    for depth, part in enumerate(parts[:-1]):  # down to the first part that is not a group of the schema
        hint = typing.get_type_hints(schema).get(part)
        if not dataclasses.is_dataclass(hint):
            break
        schema, depth = hint, depth + 1
    close = difflib.get_close_matches(parts[depth], [f.name for f in dataclasses.fields(schema)], n=1)
    group = ".".join(parts[:depth]) or "the config"
    fix = ".".join(parts[:depth] + close + parts[depth + 1 :])
    return ConfigError(dotted, value, f"a key of {group}" + (f" (did you mean {fix}?)" if close else ""))


def reject_non_finite(node: Any, prefix: str = "") -> None:
    """nan and inf parse as floats (`optimizer.lr=nan`), pass every range check and end as NaN in
    the results, which is not JSON: no config number may be non-finite."""
    for field in dataclasses.fields(node):
        value = getattr(node, field.name)
        key = f"{prefix}{field.name}"
        if dataclasses.is_dataclass(value):
            reject_non_finite(value, key + ".")
        elif isinstance(value, float) and not math.isfinite(value):
            raise ConfigError(key, value, "a finite number")
        elif isinstance(value, list) and any(isinstance(v, float) and not math.isfinite(v) for v in value):
            raise ConfigError(key, list(value), "finite numbers")
