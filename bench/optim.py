"""The optimizer and scheduler groups: torch optimizers, and per-step lr schedules with warm-up."""

from __future__ import annotations

import logging
import math
from typing import Any, Callable, Mapping

import torch
import torch.nn as nn

log = logging.getLogger(__name__)

def effective_lr(optimizer_cfg: Mapping[str, Any], scheduler_cfg: Mapping[str, Any], global_batch: int) -> float:
    """The base lr, after the linear scaling rule (lr x global_batch / 256) when asked for."""
    lr = float(optimizer_cfg["lr"])
    return lr * global_batch / 256 if scheduler_cfg["scale_lr"] else lr


def _param_groups(model: nn.Module, weight_decay: float, exclude_bn_bias: bool) -> list:
    if not exclude_bn_bias or weight_decay == 0:
        return [{"params": [p for p in model.parameters() if p.requires_grad], "weight_decay": weight_decay}]
    decay, no_decay = [], []
    for param in model.parameters():
        if param.requires_grad:
            # 1-D tensors are biases and normalisation scales/shifts: decaying them hurts accuracy.
            (no_decay if param.ndim <= 1 else decay).append(param)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def build_optimizer(model: nn.Module, cfg: Mapping[str, Any], lr: float, device: torch.device) -> torch.optim.Optimizer:
    groups = _param_groups(model, cfg["weight_decay"], cfg["exclude_bn_bias_from_wd"])
    name = cfg["name"]
    fused = cfg["fused"]
    if fused is None:
        fused = device.type == "cuda" and name in ("sgd", "adam", "adamw")
    if fused and name in ("sgd", "adam", "adamw"):
        try:
            return _build(name, groups, lr, cfg, {"fused": True})
        except (TypeError, RuntimeError) as exc:  # an older torch, or params it cannot fuse
            log.info("fused %s unavailable (%s); using the default kernels", name, exc)
    return _build(name, groups, lr, cfg, {})


def _build(name: str, groups: list, lr: float, cfg: Mapping[str, Any], speed: dict) -> torch.optim.Optimizer:
    if name == "sgd":
        return torch.optim.SGD(groups, lr=lr, momentum=cfg["momentum"], nesterov=cfg["nesterov"], **speed)
    if name == "adam":
        return torch.optim.Adam(groups, lr=lr, betas=tuple(cfg["betas"]), eps=cfg["eps"], **speed)
    if name == "adamw":
        return torch.optim.AdamW(groups, lr=lr, betas=tuple(cfg["betas"]), eps=cfg["eps"], **speed)
    if name == "adagrad":
        return torch.optim.Adagrad(groups, lr=lr, eps=cfg["eps"])
    if name == "adadelta":
        return torch.optim.Adadelta(groups, lr=lr, eps=cfg["eps"])
    raise ValueError(f"unknown optimizer {name!r}")  # bench.validate rejects this first


def lr_factor_fn(cfg: Mapping[str, Any], total_steps: int, base_lr: float) -> Callable[[int], float]:
    """step -> multiplier of the base lr for constant / multistep / cosine, with linear warm-up."""
    warmup = cfg["warmup_steps"]
    start = cfg["warmup_start_factor"]
    name = cfg["name"]
    milestones = list(cfg["milestones"])
    floor = cfg["min_lr"] / base_lr if base_lr else 0.0

    def factor(step: int) -> float:
        if step < warmup:
            return start + (1.0 - start) * step / warmup
        if name == "multistep":
            return cfg["gamma"] ** sum(step >= m for m in milestones)
        if name == "cosine":
            span = max(1, total_steps - warmup)
            progress = min(1.0, (step - warmup) / span)
            return floor + (1.0 - floor) * 0.5 * (1.0 + math.cos(math.pi * progress))
        return 1.0

    return factor


def build_scheduler(optimizer: torch.optim.Optimizer, cfg: Mapping[str, Any], total_steps: int,
                    base_lr: float) -> torch.optim.lr_scheduler.LRScheduler:
    """A scheduler stepped once per optimizer step, over `total_steps` steps (warm-up steps included)."""
    if cfg["name"] == "onecycle":
        pct = cfg["warmup_steps"] / total_steps if cfg["warmup_steps"] else cfg["pct_start"]
        # cycle momentum only where the optimizer has some: sgd with momentum=0 must stay at 0
        cycle_momentum = optimizer.defaults.get("momentum", 0) > 0 or "betas" in optimizer.defaults
        return torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=base_lr, total_steps=total_steps + 1,
                                                   pct_start=min(max(pct, 1e-3), 0.999),
                                                   cycle_momentum=cycle_momentum)
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lr_factor_fn(cfg, total_steps, base_lr))
