"""The optimizer group: a registry of torch optimizers and which config keys each one takes.

The scheduler group: learning-rate schedules stepped once per optimizer step, each with an
optional linear warm-up (scheduler.lr_warmup_steps). A registry: name -> builder.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Any, Callable, Dict, List

import torch
import torch.nn as nn

from bench.config.optimizer import OptimizerConfig, OptimizerName
from bench.config.schema import SchedulerConfig, SchedulerName

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
    params = [p for p in model.parameters() if p.requires_grad]
    if not exclude_bn_bias or weight_decay == 0:
        return [{"params": params, "weight_decay": weight_decay}]
    # 1-D tensors are biases and normalisation scales/shifts: decaying them hurts accuracy.
    decay, no_decay = [p for p in params if p.ndim > 1], [p for p in params if p.ndim <= 1]
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
    """torch's OneCycleLR; lr_warmup_steps > 0 sets the length of its rising phase. A rise longer
    than the run keeps its length (the cycle's peak lies past the run's end, and `unreached` says
    so): it used to be squeezed into 99.9% of the run, a schedule nobody asked for."""
    cycle = max(total_steps, cfg.lr_warmup_steps + 1)
    pct = cfg.lr_warmup_steps / cycle if cfg.lr_warmup_steps else cfg.pct_start
    # cycle momentum only where the optimizer has some: sgd with momentum=0 must stay at 0
    cycle_momentum = optimizer.defaults.get("momentum", 0) > 0 or "betas" in optimizer.defaults
    return torch.optim.lr_scheduler.OneCycleLR(
        optimizer, max_lr=base_lr, total_steps=cycle + 1, pct_start=max(pct, 1e-3), cycle_momentum=cycle_momentum
    )


def build_scheduler(
    optimizer: torch.optim.Optimizer, cfg: SchedulerConfig, total_steps: int, base_lr: float
) -> torch.optim.lr_scheduler.LRScheduler:
    """A scheduler stepped once per optimizer step, over `total_steps` steps (warm-up steps included):
    torch's OneCycleLR, or a shape of SHAPES through LambdaLR."""
    if cfg.name == SchedulerName.onecycle:
        return _one_cycle(optimizer, cfg, total_steps, base_lr)
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lr_factor_fn(cfg, total_steps, base_lr))


def unreached(asked: SchedulerConfig, placed: SchedulerConfig, trained: int, span: int) -> List[str]:
    """What of the schedule asked for this run does not reach, one warning each: a milestone past its
    end, a warm-up longer than the run, a decay cut short by benchmark.measure_steps. Warnings, not
    refusals: the run's steps can depend on the dataset and find_max_batch, and the multistep group's
    default milestones are in steps. The lr the run reports is the lr it applied (TrainStep.applied_lr).
    `placed`: `asked` with its milestones in optimizer steps; `trained`: the optimizer steps the run
    takes, its warm-up steps included; `span`: the steps the schedule is laid over."""
    lines = []
    past = [m for m, step in zip(asked.milestones, placed.milestones, strict=True) if step >= trained]
    if asked.name == SchedulerName.multistep and past:
        lines.append(
            f"scheduler.milestones {past} of {list(asked.milestones)} (in {asked.milestone_unit}) fall past this "
            f"run's end ({trained} optimizer steps, benchmark.warmup_steps included): the lr is never multiplied by "
            "scheduler.gamma there, and the lr reported is the lr applied"
        )
    if asked.lr_warmup_steps >= trained:
        lines.append(
            f"scheduler.lr_warmup_steps={asked.lr_warmup_steps} is past this run's end ({trained} optimizer steps, "
            "benchmark.warmup_steps included): the lr rises for the whole run and never reaches optimizer.lr"
        )
    elif asked.name in (SchedulerName.cosine, SchedulerName.onecycle) and trained < span:
        lines.append(
            f"scheduler={asked.name} is laid over {span} optimizer steps and this run stops after {trained} "
            "(benchmark.measure_steps): the lr follows the schedule's first part only"
        )
    return lines
