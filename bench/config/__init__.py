"""The config layer: the schema (one dataclass per group), loading a composed config into it,
and composing one outside `python -m bench` (tools, tests). Torch-free.

    config = load(cfg)            # a composed DictConfig -> a checked BenchConfig
    config = compose("model=resnet18", "data.batch_size=8")   # the same, from overrides
    config = check(config)        # a BenchConfig edited in Python, checked again as `load` checks
    as_plain(config)              # nested dict of plain values: files, MLflow params
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import os
import threading
from enum import Enum
from typing import Any, Dict, List, Optional, Tuple

from hydra.core.config_store import ConfigStore
from omegaconf import DictConfig, OmegaConf, open_dict

from bench.config.hydra_errors import (
    SWEEP_FROM_PYTHON,
    reject_non_finite,
    reject_unknown_attributes,
    reject_unknown_keys,
    reworded,
)
from bench.config.optimizer import chosen_optimizers_values
from bench.config.scenario import named_twice, typed, without_target
from bench.config.schema import BenchConfig, register_configs, schema
from bench.config.storage import changed_benchmark_keys
from bench.errors import ConfigError, ConfigProblem
from bench.results import leaves


def load(cfg: DictConfig) -> BenchConfig:
    """Check the keys, type the scenario's node (bench.config.scenario), resolve every interpolation and
    build the typed config (each group's __post_init__ runs here), then the scenario checks it (its
    `check`: its own rules). Raises ConfigError / ConfigProblem: one sentence, exit 2."""

    reject_unknown_keys(cfg)
    with reworded():  # e.g. a ${...} that points nowhere
        config = OmegaConf.to_object(_scenario_typed(cfg))
    assert isinstance(config, BenchConfig)
    config.scenario.check(config)  # the scenario's own rules, beside its code (e.g. TrainScenario.check)
    if config.mode != "storage":  # the storage benchmark's keys, read by it alone: never ignored unsaid
        for key, value in changed_benchmark_keys(config.storage)[:1]:
            raise ConfigError(key, value, f"its default with mode={config.mode} (read by mode=storage only)")
    reject_non_finite(config)
    return config


def _scenario_typed(cfg: DictConfig) -> DictConfig:
    """A copy of `cfg` (the caller's stays as composed) whose scenario node is its class's."""
    cfg = copy.deepcopy(cfg)
    with reworded():  # a scenario key of the wrong type
        typed(cfg)
    return cfg


# Hydra's compose API keeps one global state (GlobalHydra): two threads composing at once (bench.api.run
# from two threads) raised "GlobalHydra is already initialized" in the second
_COMPOSING = threading.Lock()
# Hydra reads and merges every YAML file of the config again on each compose (~0.2 CPU-s); the same
# overrides over unchanged files compose the same config, and `compare --rerun` composes each side once
# a round. Kept: the last few compositions, keyed by what they were made of; each caller gets a copy.
_COMPOSED: Dict[Tuple[Any, ...], DictConfig] = {}
_COMPOSED_KEPT = 32


def compose(*overrides: str) -> BenchConfig:
    """The config `python -m bench <overrides>` would run (no Hydra run dir, no job)."""
    return load(composed(*overrides))


def composed(*overrides: str) -> DictConfig:
    """Hydra's composition of `overrides`, as `python -m bench` composes it (not loaded: not checked)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    from bench import config_dir

    if "-m" in overrides or "--multirun" in overrides:  # Hydra's compose API runs none, and reads -m as an override
        raise ConfigProblem(SWEEP_FROM_PYTHON, "-m")
    if (twice := named_twice(overrides)) is not None:
        raise twice
    register_configs()
    # a folder added to Hydra's search path is not watched for changes: composed every time
    kept = not any(o.lstrip("+~").startswith("hydra.searchpath") for o in overrides)
    with _COMPOSING:
        if kept and (key := _made_of(overrides)) in _COMPOSED:
            return copy.deepcopy(_COMPOSED[key])
        with initialize_config_dir(config_dir=config_dir(), version_base="1.3"), reworded(overrides):
            cfg = hydra_compose(config_name="config", overrides=list(overrides))
        chosen_optimizers_values(cfg, overrides)
        if len(_COMPOSED) >= _COMPOSED_KEPT:
            _COMPOSED.clear()
        if kept:  # its key made again: a process's first compose stores Hydra's plugins in ConfigStore
            _COMPOSED[_made_of(overrides)] = copy.deepcopy(cfg)
    return cfg


def _made_of(overrides: Tuple[str, ...]) -> Tuple[Any, ...]:
    """What a composition is made of: the overrides, every file of the config folder (its modification
    time and size: ~0.5 ms for conf/'s ~70) and the names in Hydra's ConfigStore."""
    from bench import config_dir

    files = sorted(os.path.join(root, name) for root, _dirs, names in os.walk(config_dir()) for name in names)
    stats = []
    for path in files:
        with contextlib.suppress(OSError):  # gone since the walk (an editor's swap file): not part of it
            stat = os.stat(path)
            stats.append((path, stat.st_mtime_ns, stat.st_size))
    return overrides, config_dir(), tuple(stats), _stored_names(ConfigStore.instance().repo)


def _stored_names(repo: Dict[str, Any], prefix: str = "") -> Tuple[str, ...]:
    nested = (
        _stored_names(node, f"{prefix}{name}/") if isinstance(node, dict) else (prefix + name,)
        for name, node in sorted(repo.items())
    )
    return tuple(name for names in nested for name in names)


def shown(cfg: DictConfig) -> DictConfig:
    """A composed config as `--cfg job` shows it: the scenario's keys with their defaults, no `_target_`
    (none at all for a scenario without keys of its own: the built-in ones)."""
    cfg = _scenario_typed(cfg)
    if not cfg.scenario:
        with open_dict(cfg):
            cfg.pop("scenario")
    return cfg


def check(config: BenchConfig) -> BenchConfig:
    """A BenchConfig edited as a dataclass (bench.api), checked again as the command line checks
    its config: a key that is not the schema's (`config.data.batch_sise = 8`), a value of the
    wrong type (`config.data.batch_size = "abc"`), then everything `load` checks. A new one."""

    reject_unknown_attributes(config)
    with reworded():  # merged into the schema as Hydra merges an override: OmegaConf names the full key
        cfg = OmegaConf.merge(schema(), dataclasses.asdict(config))
    assert isinstance(cfg, DictConfig)
    return load(cfg)


def sweep_problem(overrides: List[str]) -> Optional[str]:
    """A multirun's overrides, before any job: each value given to an open set's key
    (`storage.workload.format=raw,xyz`) is checked as an Enum key's are, so that a bad one refuses the
    sweep rather than its job. The one-line reason, or None."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from bench.registries import KEYS, check_name

    for override in OverridesParser.create().parse_overrides(overrides):
        key = override.key_or_group
        if key in KEYS and not override.is_delete():
            try:
                for value in override.sweep_iterator() if override.is_sweep_override() else [override.value()]:
                    check_name(key, str(value))
            except ConfigError as exc:
                return str(exc)
    return None


def as_plain(config: Any) -> Dict[str, Any]:
    """A config object (or one group of it) as nested dicts of plain values, choices as strings."""
    # no `defaults`, and no `scenario` for a scenario with no keys of its own (the built-in ones)
    return without_target(
        leaves(dataclasses.asdict(config), lambda value: value.value if isinstance(value, Enum) else value)
    )
