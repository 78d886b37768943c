"""The `optimizer` group: which torch optimizer and its hyper-parameters (bench.train.optim)."""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, List, Optional, Sequence

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

    def rules(self) -> None:
        if len(self.betas) != 2:
            self._fail("betas", "a list of two numbers, e.g. [0.9, 0.999]", list(self.betas))
        # torch refuses these only at the first step (nan and inf: bench.config.hydra_errors names them)
        if not all(0 <= beta < 1 for beta in self.betas if math.isfinite(beta)):
            self._fail("betas", "two numbers in [0, 1), e.g. [0.9, 0.999]", list(self.betas))


# An optimizer's own values: a preset's belong to the optimizer it names (issue 40.3)
OWN_KEYS = ("lr", "momentum", "nesterov", "betas", "eps", "weight_decay")


def _named(preset: str, conf: Path) -> Optional[str]:
    """The optimizer conf/experiment/<preset>.yaml names (or a preset it is built on), if any."""
    import yaml

    path, named = conf / "experiment" / f"{preset.rsplit('/', 1)[-1]}.yaml", None
    for entry in ((yaml.safe_load(path.read_text()) if path.is_file() else None) or {}).get("defaults", []):
        base = _named(entry, conf) if isinstance(entry, str) and entry != "_self_" else None
        named = entry.get("override /optimizer", named) if isinstance(entry, dict) else base or named
    return named


def chosen_optimizers_values(cfg: Any, overrides: Sequence[str]) -> None:
    """An `optimizer=NAME` on the command line over a preset naming another optimizer: NAME's own
    values (conf/optimizer/NAME.yaml, else the schema's) for the OWN_KEYS the command line does not
    set, in `cfg` (a composed DictConfig); the recipe's keys stay the preset's."""
    from omegaconf import OmegaConf

    from bench import config_dir

    keys = [o.lstrip("+~").partition("=") for o in overrides]
    chosen, presets = ([v for k, _, v in keys if k == key] for key in ("optimizer", "experiment"))
    named = (presets and _named(presets[-1], Path(config_dir()))) or "sgd"  # sgd: conf/config.yaml's
    if not chosen or not presets or chosen[-1] == named:
        return
    group = Path(config_dir()) / "optimizer" / f"{chosen[-1]}.yaml"
    own = OmegaConf.to_container(OmegaConf.merge(OptimizerConfig, OmegaConf.load(group) if group.is_file() else {}))
    assert isinstance(own, dict)
    told = {key.split(".", 1)[1] for key, _, _ in keys if key.startswith("optimizer.")}
    moved = [key for key in OWN_KEYS if key not in told and cfg.optimizer[key] != own[key]]
    said, were = (", ".join(f"{key} {source[key]}" for key in moved) for source in (own, cfg.optimizer))
    for key in moved:
        cfg.optimizer[key] = own[key]
    if moved:
        log.info(
            f"optimizer={chosen[-1]}: {said}, its own (the preset's {were} were for {named}); the recipe's "
            "grad_clip_norm, exclude_bn_bias_from_wd and lr scaling stay the preset's"
        )
