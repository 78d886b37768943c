"""The model group: any torchvision classification model by name (torchvision.models.get_model)
plus bench's own, with random init, sized by the data group.

A new torchvision model needs no code: `model.arch=convnext_tiny`, or a conf/model/<name>.yaml
holding `arch: <name>`. bench's own models are the builders decorated @own below (OWN).
"""

from __future__ import annotations

import logging
import sys
from typing import Any, Callable, Dict, List, Optional, Tuple, cast

import torch
import torch.nn as nn

from bench.config.schema import ModelConfig, Norm
from bench.runtime.model_names import check_arch, vit_patch

log = logging.getLogger(__name__)
OWN: Dict[str, Callable[[ModelConfig], nn.Module]] = {}


def own(builder: Callable[[ModelConfig], nn.Module]) -> Callable[[ModelConfig], nn.Module]:
    """A model of bench's own, `model.arch=<its name>` (bench.runtime.model_names reads the names torch-free)."""
    return OWN.setdefault(builder.__name__, builder)


@own
def cifar_resnet18(cfg: ModelConfig) -> nn.Module:
    """The usual CIFAR variant: a 3x3 stride-1 stem and no max-pool keep 32x32 inputs from
    shrinking to 1x1 before the last stage."""
    import torchvision

    model = torchvision.models.resnet18(weights=None, num_classes=cfg.num_classes)
    model.conv1 = nn.Conv2d(3, 64, kernel_size=3, stride=1, padding=1, bias=False)
    model.maxpool = nn.Identity()
    return model


@own
def small_cnn(cfg: ModelConfig) -> nn.Module:
    """Four 3x3 conv-BN-ReLU layers (32-64-128-256, halving the size after the 2nd, 3rd and 4th)
    and a linear head: ~0.4 M parameters, a few ms per image on a CPU core. The model that takes
    the digits preset to its target accuracy in about a minute on a laptop."""

    def block(cin: int, cout: int, pool: bool) -> List[nn.Module]:
        layers = [nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True)]
        return layers + ([nn.MaxPool2d(2)] if pool else [])

    return nn.Sequential(
        *block(3, 32, False),
        *block(32, 64, True),
        *block(64, 128, True),
        *block(128, 256, True),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(256, cfg.num_classes),
    )


# torchvision is imported where a model needs it, not with this module: its import (~1.5 CPU-s,
# torch._dynamo with it) would otherwise be paid by every DDP worker server of a bench-own model.
def uses_torchvision(cfg: ModelConfig) -> bool:
    return cfg.arch not in OWN or cfg.arch == "cifar_resnet18"


def torchvision_models() -> List[str]:
    import torchvision

    return torchvision.models.list_models(module=torchvision.models)  # classification models only


def check_model(cfg: ModelConfig) -> None:
    """The arch exists here (torchvision's own list, as the model is built from it) and the input
    size suits it; one ConfigError otherwise. The config check did the same from torchvision's source."""
    check_arch(cfg, known=[] if cfg.arch in OWN else torchvision_models())


def build_model(cfg: ModelConfig) -> nn.Module:
    if cfg.arch in OWN:
        model = OWN[cfg.arch](cfg)
    else:
        import torchvision

        sized = {"image_size": cfg.image_size} if vit_patch(cfg.arch) else {}
        model = torchvision.models.get_model(cfg.arch, weights=None, num_classes=cfg.num_classes, **sized)
    if cfg.zero_init_residual:
        zero_init_residuals(model, convs=cfg.norm == Norm.none)
    if cfg.norm == Norm.none:
        model = without_batchnorm(model)
    return model


def zero_init_residuals(model: nn.Module, convs: bool = False) -> None:
    """Zero the scale of the last BatchNorm in each ResNet block (bn2 of a BasicBlock, bn3 of a
    Bottleneck): every residual branch starts at zero, so each block starts as the identity.
    convs=True (model.norm=none, no BN scale to zero): the branch's last conv instead."""
    if (resnet := sys.modules.get("torchvision.models.resnet")) is None:
        return  # torchvision not imported: the model has no torchvision ResNet blocks
    last = {resnet.BasicBlock: "2", resnet.Bottleneck: "3"}
    for module in model.modules():
        if (index := last.get(type(module))) is not None:
            nn.init.zeros_(getattr(module, ("conv" if convs else "bn") + index).weight)


def without_batchnorm(model: nn.Module) -> nn.Module:
    """model.norm=none: every BatchNorm replaced by identity (the no-BN variant of the DDP study)."""
    for name, child in model.named_children():
        if isinstance(child, nn.modules.batchnorm._BatchNorm):
            setattr(model, name, nn.Identity())
        else:
            without_batchnorm(child)
    return model


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


# modes whose point is the GPU: CUDA graphs (reduce-overhead, max-autotune) and autotuned GPU kernels
CUDA_COMPILE_MODES = ("reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")


def maybe_compile(
    model: nn.Module, enabled: bool, mode: Optional[str], device: Optional[torch.device] = None
) -> Tuple[nn.Module, Dict[str, Any]]:
    """torch.compile when asked; a failure here means: run eager, and say so (it may also fail later, at
    the first call: the caller tries one step outside the measurement). A GPU-only mode on another
    device compiles with the default mode instead, said in one line."""
    if not enabled:
        return model, {"requested": False, "active": False}
    if mode in CUDA_COMPILE_MODES and device is not None and device.type != "cuda":
        log.warning(
            "compile_mode=%s needs CUDA (CUDA graphs, GPU autotuning); compiling with the default mode on %s",
            mode,
            device.type,
        )
        mode = None
    try:
        compiled = cast(nn.Module, torch.compile(model, mode=mode))  # an OptimizedModule: the stub says Callable
        return compiled, {"requested": True, "active": True, "mode": mode or "default"}
    except Exception as exc:  # any failure means: run eager, and say so
        log.warning("torch.compile failed (%s: %s); running eager", type(exc).__name__, exc)
        return model, {"requested": True, "active": False, "fallback_reason": f"{type(exc).__name__}: {exc}"}
