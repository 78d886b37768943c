"""The `scheduler` group: the learning-rate schedule, stepped once per optimizer step
(bench.train.optim)."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import List, Optional

from bench.config.fields import Checks, Choice, non_negative, positive


class SchedulerName(Choice):
    constant = "constant"
    multistep = "multistep"  # x gamma at each milestone
    cosine = "cosine"  # cosine decay to min_lr
    onecycle = "onecycle"  # torch OneCycleLR


class MilestoneUnit(Choice):
    steps = "steps"  # optimizer steps, counted from the first (warm-up included)
    epochs = "epochs"  # epoch boundaries (the ImageNet recipes: 30, 60, 80), whatever the batch and GPU count


@dataclass
class SchedulerConfig(Checks):
    KEY = "scheduler"
    name: SchedulerName = SchedulerName.constant
    lr_warmup_steps: int = non_negative(0)  # linear warm-up from warmup_start_factor x lr, in optimizer steps
    warmup_start_factor: float = 0.01
    milestones: List[int] = field(default_factory=list)  # multistep, in milestone_unit
    milestone_unit: MilestoneUnit = MilestoneUnit.steps
    gamma: float = positive(0.1)  # multistep
    min_lr: float = non_negative(0.0)  # cosine floor
    pct_start: float = 0.3  # onecycle: share of the run spent rising
    scale_lr: bool = False  # the linear scaling rule: lr x global_batch / 256
    # Deprecated spelling of lr_warmup_steps (it read like benchmark.warmup_steps); kept one release.
    warmup_steps: Optional[int] = None

    def __post_init__(self) -> None:
        self.renamed(
            "warmup_steps", "lr_warmup_steps", "; benchmark.warmup_steps is the unmeasured steps before the window"
        )
        self.check_ranges()
        self.between("warmup_start_factor", 0, 1, "a number in [0, 1]", "[]")
        if self.name == SchedulerName.multistep:
            milestones = list(self.milestones)
            # increasing from a positive first: all positive
            if not milestones or milestones[0] <= 0 or any(a >= b for a, b in itertools.pairwise(milestones)):
                self._fail("milestones", "a non-empty increasing list of positive step numbers", milestones)
        if self.name == SchedulerName.onecycle:
            self.between("pct_start", 0, 1, "a number between 0 and 1")
