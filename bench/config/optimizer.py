"""The `optimizer` group: which torch optimizer and its hyper-parameters (bench.train.optim)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import List, Optional

from bench.config.fields import Checks, Choice, non_negative, positive


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

    def __post_init__(self) -> None:
        self.check_ranges()
        if len(self.betas) != 2:
            self._fail("betas", "a list of two numbers, e.g. [0.9, 0.999]", list(self.betas))
        # torch refuses these only at the first step (nan and inf: bench.config.preflight names them)
        if not all(0 <= beta < 1 for beta in self.betas if math.isfinite(beta)):
            self._fail("betas", "two numbers in [0, 1), e.g. [0.9, 0.999]", list(self.betas))
