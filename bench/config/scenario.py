"""The scenario of a run: the config group `scenario` (conf/scenario/<name>.yaml) is the one list of
scenarios. Each option sets `mode: <name>` and a `scenario:` node whose `_target_` names the class, a
dataclass whose fields are the scenario's own keys (`scenario.<key>`, defaults and checks in the class).

The composed node is untyped (the classes are not imported to compose); `typed` turns it into the class's
structured node when the config loads, so a wrong type or an unknown key is refused in one line naming
`scenario.<key>`, and `OmegaConf.to_object` builds the instance: a class defined in source, which pickles
to a launcher's workers and a Slurm job. `mode` names the option: a YAML that still sets `mode: storage`
after the group chose (a preset of a user's, `mode=` on the command line) gets that option's node.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence

from omegaconf import DictConfig, OmegaConf

from bench import config_dir
from bench.errors import ConfigError

TARGET = "_target_"


def names() -> List[str]:
    """The scenarios: conf/scenario/*.yaml."""
    return sorted(path.stem for path in (Path(config_dir()) / "scenario").glob("*.yaml"))


@functools.lru_cache(maxsize=None)
def _node(mode: str) -> Dict[str, Any]:
    option = OmegaConf.to_container(OmegaConf.load(Path(config_dir()) / "scenario" / f"{mode}.yaml"), resolve=False)
    return dict(option.get("scenario") or {}) if isinstance(option, dict) else {}


def named_twice(overrides: Sequence[str]) -> Optional[ConfigError]:
    """`mode=storage scenario=echo`: two scenarios named on one command line, of which `mode` would
    win unsaid: the refusal (one line, exit 2), or None; the same name twice, or a sweep of either, is fine."""
    given = {}
    for override in overrides:
        key, sep, value = override.lstrip("+~").partition("=")
        if sep and key in ("mode", "scenario") and "," not in value:
            given[key] = value.strip("'\"")
    if len(given) == 2 and given["mode"] != given["scenario"]:
        return ConfigError(
            "scenario",
            given["scenario"],
            f"{given['mode']} with mode={given['mode']} (mode=NAME chooses scenario=NAME: give one of them)",
        )
    return None


def node_of(mode: str) -> Dict[str, Any]:
    """The `scenario:` node of conf/scenario/<mode>.yaml (ConfigError for a mode no option has)."""
    if mode not in names():
        raise ConfigError("mode", mode, "one of " + ", ".join(names()))
    return dict(_node(mode))


def scenario_class(mode: Any) -> Any:
    """The class conf/scenario/<mode>.yaml names."""
    return import_target(node_of(str(mode))[TARGET])


def import_target(target: str) -> Any:
    module, _, name = target.rpartition(".")
    try:
        found = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError, ValueError) as exc:
        raise ConfigError("scenario._target_", target, f"a class bench can import ({exc})") from None
    if not (isinstance(found, type) and dataclasses.is_dataclass(found)):
        raise ConfigError("scenario._target_", target, "a dataclass (a subclass of bench.scenario_base.BaseScenario)")
    return found


def typed(cfg: DictConfig) -> None:
    """Replace the composed `scenario` node with its class's structured node, its keys merged in."""
    keys = dict(OmegaConf.to_container(cfg.scenario, resolve=False) or {})  # type: ignore[arg-type]
    mode = str(cfg.mode)
    target = keys.pop(TARGET, None)
    own = node_of(mode)
    if target != own[TARGET]:  # `mode` was set after the group chose: mode wins, keys given stay
        if target is not None and target not in [_node(name).get(TARGET) for name in names()]:
            raise ConfigError("scenario._target_", target, "the class an option of conf/scenario/ names")
        keys = {**{k: v for k, v in own.items() if k != TARGET}, **keys}
    kind = import_target(own[TARGET])
    fields = [f.name for f in dataclasses.fields(kind)]
    for key, value in keys.items():
        if key not in fields:
            raise ConfigError(
                f"scenario.{key}", value, f"a key of scenario={mode}: {', '.join(fields) or 'it has none'}"
            )
    cfg.scenario = OmegaConf.structured(kind)
    cfg.scenario.merge_with(keys)  # a wrong type: OmegaConf's error names scenario.<key>


def without_target(tree: Mapping[str, Any]) -> Dict[str, Any]:
    """A composed config as a plain tree (.hydra/config.yaml, a job whose config did not load) as its
    files and MLflow params show it: no `defaults`, no `_target_`, no `scenario` node holding no key."""
    plain: Dict[str, Any] = {}
    for key, value in tree.items():
        if key == "scenario":
            value = {k: v for k, v in (value or {}).items() if k != TARGET}
        if key != "defaults" and (key != "scenario" or value):
            plain[key] = value
    return plain
