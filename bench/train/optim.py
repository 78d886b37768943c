"""The optimizer group: a registry of torch optimizers and which config keys each one takes."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Callable, Dict, List

import torch
import torch.nn as nn

from bench.config.optimizer import OptimizerConfig, OptimizerName
from bench.config.scheduler import SchedulerConfig

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class OptimizerSpec:
    cls: str  # a class in torch.optim
    hyper: Callable[[OptimizerConfig], Dict[str, Any]]  # its keyword arguments besides params and lr
    fusable: bool = False  # torch has a fused (single-kernel) CUDA implementation


def _adam_like(cfg: OptimizerConfig) -> Dict[str, Any]:
    return {"betas": tuple(cfg.betas), "eps": cfg.eps}


OPTIMIZERS: Dict[OptimizerName, OptimizerSpec] = {
    OptimizerName.sgd: OptimizerSpec("SGD", lambda c: {"momentum": c.momentum, "nesterov": c.nesterov}, fusable=True),
    OptimizerName.adam: OptimizerSpec("Adam", _adam_like, fusable=True),
    OptimizerName.adamw: OptimizerSpec("AdamW", _adam_like, fusable=True),
    OptimizerName.adagrad: OptimizerSpec("Adagrad", lambda c: {"eps": c.eps}),
    OptimizerName.adadelta: OptimizerSpec("Adadelta", lambda c: {"eps": c.eps}),
}


def effective_lr(optimizer: OptimizerConfig, scheduler: SchedulerConfig, global_batch: int) -> float:
    """The base lr, after the linear scaling rule (lr x global_batch / 256) when asked for."""
    return optimizer.lr * global_batch / 256 if scheduler.scale_lr else float(optimizer.lr)


def _param_groups(model: nn.Module, weight_decay: float, exclude_bn_bias: bool) -> list:
    if not exclude_bn_bias or weight_decay == 0:
        return [{"params": [p for p in model.parameters() if p.requires_grad], "weight_decay": weight_decay}]
    decay: List[nn.Parameter] = []
    no_decay: List[nn.Parameter] = []
    for param in model.parameters():
        if param.requires_grad:
            # 1-D tensors are biases and normalisation scales/shifts: decaying them hurts accuracy.
            (no_decay if param.ndim <= 1 else decay).append(param)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def build_optimizer(model: nn.Module, cfg: OptimizerConfig, lr: float, device: torch.device) -> torch.optim.Optimizer:
    spec = OPTIMIZERS[cfg.name]
    cls = getattr(torch.optim, spec.cls)
    groups = _param_groups(model, cfg.weight_decay, cfg.exclude_bn_bias_from_wd)
    fused = cfg.fused if cfg.fused is not None else device.type == "cuda"
    if fused and spec.fusable:
        try:
            return cls(groups, lr=lr, fused=True, **spec.hyper(cfg))
        except (TypeError, RuntimeError) as exc:  # an older torch, or params it cannot fuse
            log.info("fused %s unavailable (%s); using the default kernels", cfg.name, exc)
    return cls(groups, lr=lr, **spec.hyper(cfg))
