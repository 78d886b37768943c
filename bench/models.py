"""The model group: torchvision architectures with random init, sized by the data group."""

from __future__ import annotations

from typing import Any, Mapping

import torch.nn as nn
import torchvision


def build_model(cfg: Mapping[str, Any]) -> nn.Module:
    arch, num_classes = cfg["arch"], cfg["num_classes"]
    if arch == "cifar_resnet18":
        # The usual CIFAR variant: a 3x3 stride-1 stem and no max-pool keep 32x32 inputs
        # from shrinking to 1x1 before the last stage.
        model = torchvision.models.resnet18(weights=None, num_classes=num_classes)
        model.conv1 = nn.Conv2d(3, 64, kernel_size=3, stride=1, padding=1, bias=False)
        model.maxpool = nn.Identity()
        return model
    if arch == "vit_b_16":
        return torchvision.models.vit_b_16(weights=None, num_classes=num_classes, image_size=cfg["image_size"])
    return getattr(torchvision.models, arch)(weights=None, num_classes=num_classes)


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
