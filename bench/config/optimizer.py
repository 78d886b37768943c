"""The `optimizer` group: which torch optimizer and its hyper-parameters (bench.train.optim)."""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from bench.config.fields import Checks, Choice, non_negative, positive

log = logging.getLogger("bench")


class OptimizerName(Choice):
    sgd = "sgd"
    adam = "adam"
    adamw = "adamw"
    adagrad = "adagrad"
    adadelta = "adadelta"


@dataclass
class OptimizerConfig(Checks):
    KEY = "optimizer"
    name: OptimizerName = OptimizerName.sgd
    lr: float = positive(0.1)
    weight_decay: float = non_negative(1e-4)
    momentum: float = non_negative(0.9)  # sgd
    nesterov: bool = False  # sgd
    betas: List[float] = field(default_factory=lambda: [0.9, 0.999])  # adam, adamw
    eps: float = positive(1e-8)
    # no weight decay on 1-D parameters (biases, normalisation scales and shifts)
    exclude_bn_bias_from_wd: bool = False
    # fused/foreach kernels: null lets bench pick (fused on CUDA where torch has them)
    fused: Optional[bool] = None
    # clip the gradients' global L2 norm to this before each step (after unscaling fp16 gradients)
    grad_clip_norm: Optional[float] = positive(None)

    def __post_init__(self) -> None:
        self.check_ranges()
        if len(self.betas) != 2:
            self._fail("betas", "a list of two numbers, e.g. [0.9, 0.999]", list(self.betas))
        # torch refuses these only at the first step (nan and inf: bench.config.preflight names them)
        if not all(0 <= beta < 1 for beta in self.betas if math.isfinite(beta)):
            self._fail("betas", "two numbers in [0, 1), e.g. [0.9, 0.999]", list(self.betas))


# An optimizer's own values: a preset's belong to the optimizer it names (issue 40.3)
OWN_KEYS = ("lr", "momentum", "nesterov", "betas", "eps", "weight_decay")


def _preset(name: str, conf: Path) -> Tuple[Optional[str], Dict[str, Any]]:
    """(the optimizer conf/experiment/<name>.yaml names, its optimizer values), its base presets' first."""
    import yaml

    path = conf / "experiment" / f"{name}.yaml"
    raw = (yaml.safe_load(path.read_text()) if path.is_file() else None) or {}
    chosen: Optional[str] = None
    values: Dict[str, Any] = {}
    for entry in raw.get("defaults", []):
        if isinstance(entry, str) and entry != "_self_":
            chosen, values = _preset(entry.rsplit("/", 1)[-1], conf)
        elif isinstance(entry, dict):
            chosen = entry.get("override /optimizer", chosen)
    values.update({k: v for k, v in (raw.get("optimizer") or {}).items() if k in OWN_KEYS})
    return chosen, values


def chosen_optimizers_values(cfg: Any, overrides: Sequence[str]) -> None:
    """An `optimizer=NAME` on the command line over a preset naming another optimizer: NAME's own
    values (conf/optimizer/NAME.yaml, else the schema's) for the OWN_KEYS the preset set and the
    command line does not, in `cfg` (a composed DictConfig); the recipe's keys stay the preset's."""
    from omegaconf import OmegaConf

    from bench import config_dir

    keys = [o.lstrip("+~").partition("=") for o in overrides]
    chosen, presets = ([v for k, _, v in keys if k == key] for key in ("optimizer", "experiment"))
    if not chosen or not presets:
        return
    conf = Path(config_dir())
    named, values = _preset(presets[-1], conf)
    told = {key.split(".", 1)[1] for key, _, _ in keys if key.startswith("optimizer.")}
    moved = [key for key in OWN_KEYS if key in values and key not in told]
    if chosen[-1] == (named or "sgd") or not moved:  # sgd: conf/config.yaml's
        return
    group = conf / "optimizer" / f"{chosen[-1]}.yaml"
    own = OmegaConf.to_container(OmegaConf.merge(OptimizerConfig, OmegaConf.load(group) if group.is_file() else {}))
    assert isinstance(own, dict)
    for key in moved:
        cfg.optimizer[key] = own[key]
    log.info(
        "optimizer=%s: %s, its own (the preset's %s were for %s); the recipe's grad_clip_norm, "
        "exclude_bn_bias_from_wd and lr scaling stay the preset's",
        chosen[-1],
        ", ".join(f"{key} {own[key]}" for key in moved),
        ", ".join(f"{key} {values[key]}" for key in moved),
        named or "sgd",
    )
