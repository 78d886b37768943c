"""One optimizer step, as the phases bench.train.loop times one by one: clear the gradients,
forward (under autocast, with the loss), backward (scaled for fp16), update (gradient clipping on
unscaled gradients, the optimizer step, the lr schedule). Calling a `TrainStep` runs the phases
back to back with nothing in between: it is what the measured window runs."""

from __future__ import annotations

import copy
from typing import Any, Callable, Optional

import torch
import torch.nn as nn

from bench.runtime.precision import PrecisionPolicy


class TrainStep:
    def __init__(
        self,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        scheduler: Any,
        policy: PrecisionPolicy,
        after: Optional[Callable[[], None]] = None,
        label_smoothing: float = 0.0,
        clip_norm: Optional[float] = None,
    ):
        """`after()` runs at the end of every step (the launched workers' hang watchdog)."""
        self.model, self.optimizer, self.scheduler, self.policy = model, optimizer, scheduler, policy
        self.after, self.clip_norm = after, clip_norm
        self.criterion = nn.CrossEntropyLoss(label_smoothing=label_smoothing)
        self.scaler = policy.scaler
        self.params = [p for group in optimizer.param_groups for p in group["params"]]
        # the lr the last update applied: the schedule steps after it, so the optimizer's lr is the next step's
        self.applied_lr = float(optimizer.param_groups[0]["lr"])

    def zero_grad(self) -> None:
        self.optimizer.zero_grad(set_to_none=True)

    def forward(self, images: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        with self.policy.autocast():
            return self.criterion(self.model(images), labels)

    def backward(self, loss: torch.Tensor) -> None:
        (self.scaler.scale(loss) if self.scaler is not None else loss).backward()

    def update(self) -> None:
        scaler, clip_norm = self.scaler, self.clip_norm
        if scaler is not None:
            if clip_norm is not None:
                scaler.unscale_(self.optimizer)  # clip the true gradients, not the loss-scaled ones
                torch.nn.utils.clip_grad_norm_(self.params, clip_norm)
            scaler.step(self.optimizer)
            scaler.update()
        else:
            if clip_norm is not None:
                torch.nn.utils.clip_grad_norm_(self.params, clip_norm)
            self.optimizer.step()
        self.applied_lr = self.optimizer.param_groups[0]["lr"]
        self.scheduler.step()

    def __call__(self, images: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        self.zero_grad()
        loss = self.forward(images, labels)
        self.backward(loss)
        self.update()
        if self.after is not None:
            self.after()
        return loss.detach()

    def with_model(self, model: nn.Module) -> "TrainStep":
        """The same step on another model object (the eager one, after torch.compile failed)."""
        twin = copy.copy(self)
        twin.model = model
        return twin
