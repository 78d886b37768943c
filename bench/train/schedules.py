"""The scheduler group: learning-rate schedules stepped once per optimizer step, each with an
optional linear warm-up (scheduler.lr_warmup_steps). A registry: name -> builder."""

from __future__ import annotations

import math
from typing import Callable, Dict

import torch

from bench.config.scheduler import SchedulerConfig, SchedulerName

Factor = Callable[[int], float]  # optimizer step -> multiplier of the base lr


def _constant(cfg: SchedulerConfig, total_steps: int, base_lr: float) -> Factor:
    return lambda step: 1.0


def _multistep(cfg: SchedulerConfig, total_steps: int, base_lr: float) -> Factor:
    milestones = list(cfg.milestones)
    return lambda step: cfg.gamma ** sum(step >= m for m in milestones)


def _cosine(cfg: SchedulerConfig, total_steps: int, base_lr: float) -> Factor:
    floor = cfg.min_lr / base_lr if base_lr else 0.0
    warmup, span = cfg.lr_warmup_steps, max(1, total_steps - cfg.lr_warmup_steps)

    def factor(step: int) -> float:
        progress = min(1.0, (step - warmup) / span)
        return floor + (1.0 - floor) * 0.5 * (1.0 + math.cos(math.pi * progress))

    return factor


SHAPES: Dict[SchedulerName, Callable[[SchedulerConfig, int, float], Factor]] = {
    SchedulerName.constant: _constant,
    SchedulerName.multistep: _multistep,
    SchedulerName.cosine: _cosine,
}


def lr_factor_fn(cfg: SchedulerConfig, total_steps: int, base_lr: float) -> Factor:
    """A shape of SHAPES after the linear warm-up from warmup_start_factor to 1."""
    shape = SHAPES[cfg.name](cfg, total_steps, base_lr)
    warmup, start = cfg.lr_warmup_steps, cfg.warmup_start_factor

    def factor(step: int) -> float:
        return start + (1.0 - start) * step / warmup if step < warmup else shape(step)

    return factor


def _one_cycle(
    optimizer: torch.optim.Optimizer, cfg: SchedulerConfig, total_steps: int, base_lr: float
) -> torch.optim.lr_scheduler.LRScheduler:
    """torch's OneCycleLR; lr_warmup_steps > 0 sets the length of its rising phase."""
    pct = cfg.lr_warmup_steps / total_steps if cfg.lr_warmup_steps else cfg.pct_start
    # cycle momentum only where the optimizer has some: sgd with momentum=0 must stay at 0
    cycle_momentum = optimizer.defaults.get("momentum", 0) > 0 or "betas" in optimizer.defaults
    return torch.optim.lr_scheduler.OneCycleLR(
        optimizer,
        max_lr=base_lr,
        total_steps=total_steps + 1,
        pct_start=min(max(pct, 1e-3), 0.999),
        cycle_momentum=cycle_momentum,
    )


def _lambda(
    optimizer: torch.optim.Optimizer, cfg: SchedulerConfig, total_steps: int, base_lr: float
) -> torch.optim.lr_scheduler.LRScheduler:
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lr_factor_fn(cfg, total_steps, base_lr))


BUILDERS = {**{name: _lambda for name in SHAPES}, SchedulerName.onecycle: _one_cycle}


def build_scheduler(
    optimizer: torch.optim.Optimizer, cfg: SchedulerConfig, total_steps: int, base_lr: float
) -> torch.optim.lr_scheduler.LRScheduler:
    """A scheduler stepped once per optimizer step, over `total_steps` steps (warm-up steps included)."""
    return BUILDERS[cfg.name](optimizer, cfg, total_steps, base_lr)
