"""The scenarios a run can measure, by `mode` name: the one place that maps a mode to its class.

Kept apart from bench.scenarios (the Protocol and the helpers) and free of bench's imports but
bench.errors, so bench.config.load can check `mode` (and the mode's own rules) once the config is
composed, without an import circle. A class is named as
"module:Class" and imported when a run needs it (a mode's code stays unloaded until then).

Adding a scenario: one line here, and one in OPTIONS when it has config keys of its own (or
`register(mode, target, options=)` at run time, as the toy scenario of tests/e2e/test_toy_scenario.py does).
"""

from __future__ import annotations

import importlib
from typing import Any, Dict, List, Union

from bench.errors import ConfigError

SCENARIOS: Dict[str, Union[str, type]] = {
    "train": "bench.train.scenario:TrainScenario",
    "storage": "bench.iobench.scenario:StorageScenario",
    "inference": "bench.infer.scenario:InferScenario",
}


# a scenario's own config namespace: a top-level key named after its mode, holding this dataclass
# ("module:Class", imported when the schema is stored: keep that module light, a dataclass and its checks)
OPTIONS: Dict[str, Union[str, type]] = {}

DEFAULT_MODE = "train"  # the schema's default; runs recorded before `mode` existed are training runs


def register(mode: str, target: Union[str, type], options: Union[str, type, None] = None) -> None:
    """Add (or replace) the scenario of `mode`: a class, or "module:Class" imported when needed; and
    `options`, the dataclass of its own config namespace (`<mode>.<key>=...`). Before the config is
    composed (bench.config.compose, or before `python -m bench` stores its schema)."""
    SCENARIOS[mode] = target
    if options is not None:
        OPTIONS[mode] = options


def unregister(mode: str) -> None:
    SCENARIOS.pop(mode, None)
    OPTIONS.pop(mode, None)


def namespaces() -> Dict[str, type]:
    """mode -> its config namespace's dataclass, for the scenarios that have one."""
    return {mode: _resolve(target) for mode, target in OPTIONS.items()}


def modes() -> List[str]:
    return list(SCENARIOS)


def scenario_class(mode: Any) -> Any:
    """The class of `mode`'s scenario (KeyError for a mode no scenario has)."""
    return _resolve(SCENARIOS[str(mode)])


def _resolve(target: Union[str, type]) -> Any:
    if isinstance(target, str):
        module, _, name = target.partition(":")
        return getattr(importlib.import_module(module), name)
    return target


def check_config(config: Any) -> None:
    """After composition (bench.config.load): `mode` names a registered scenario, then that scenario's
    own config rules (its `check`). ConfigError: one line, exit 2."""
    if config.mode not in SCENARIOS:  # a str, not an Enum: a registered scenario is a mode
        raise ConfigError("mode", config.mode, "one of " + ", ".join(SCENARIOS))
    scenario_class(config.mode)().check(config)  # the mode's own rules, beside its code (bench.<scenario>.rules)
