"""The model group: any torchvision classification model by name (torchvision.models.get_model)
plus bench's own, with random init, sized by the data group.

A new torchvision model needs no code: `model.arch=convnext_tiny`, or a conf/model/<name>.yaml
holding `arch: <name>`. bench's own models are the OWN registry below.
"""

from __future__ import annotations

import difflib
from typing import Callable, Dict, List, Optional

import torch.nn as nn
import torchvision

from bench.config.model import ModelConfig
from bench.errors import ConfigError


def cifar_resnet18(cfg: ModelConfig) -> nn.Module:
    """The usual CIFAR variant: a 3x3 stride-1 stem and no max-pool keep 32x32 inputs from
    shrinking to 1x1 before the last stage."""
    model = torchvision.models.resnet18(weights=None, num_classes=cfg.num_classes)
    model.conv1 = nn.Conv2d(3, 64, kernel_size=3, stride=1, padding=1, bias=False)
    model.maxpool = nn.Identity()
    return model


OWN: Dict[str, Callable[[ModelConfig], nn.Module]] = {"cifar_resnet18": cifar_resnet18}


def torchvision_models() -> List[str]:
    return torchvision.models.list_models(module=torchvision.models)  # classification models only


def _vit_patch(arch: str) -> Optional[int]:
    """torchvision's ViTs are built for one input size, a multiple of the patch (vit_b_16: 16)."""
    tail = arch.rsplit("_", 1)[-1]
    return int(tail) if arch.startswith("vit_") and tail.isdigit() else None


def check_model(cfg: ModelConfig) -> None:
    """The arch exists here and the input size suits it; one ConfigError otherwise."""
    known = torchvision_models()
    if cfg.arch not in OWN and cfg.arch not in known:
        close = difflib.get_close_matches(cfg.arch, [*OWN, *known], n=1)
        raise ConfigError("model.arch", cfg.arch,
                          "a torchvision classification model (e.g. resnet50, resnet18, vit_b_16, efficientnet_b0, "
                          "convnext_tiny; all: torchvision.models.list_models()) or bench's own "
                          + ", ".join(OWN) + (f" (did you mean {close[0]}?)" if close else ""))
    patch = _vit_patch(cfg.arch)
    if patch and cfg.image_size % patch:
        raise ConfigError("data.image_size", cfg.image_size, f"a multiple of {patch} for model={cfg.arch} (its patch size)")


def build_model(cfg: ModelConfig) -> nn.Module:
    if cfg.arch in OWN:
        return OWN[cfg.arch](cfg)
    sized = {"image_size": cfg.image_size} if _vit_patch(cfg.arch) else {}
    return torchvision.models.get_model(cfg.arch, weights=None, num_classes=cfg.num_classes, **sized)


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
