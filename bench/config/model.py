"""The `model` group: which architecture, sized by the data group (interpolated)."""

from __future__ import annotations

from dataclasses import dataclass

from bench.config.fields import Checks, Choice, positive


class Norm(Choice):
    batch = "batch"  # the architecture's own BatchNorm layers
    none = "none"  # every BatchNorm replaced by identity (the no-BN study)


@dataclass
class ModelConfig(Checks):
    KEY = "model"
    # A torchvision classification model (torchvision.models.list_models()) or one of bench's
    # own (bench.runtime.models): checked against that registry before the run starts.
    arch: str = "resnet50"
    num_classes: int = positive("${data.num_classes}")
    image_size: int = positive("${data.image_size}")
    norm: Norm = Norm.batch
    # ResNets: zero-init the last BatchNorm of each residual block (each block starts as identity)
    zero_init_residual: bool = False

    def __post_init__(self) -> None:
        if not self.arch:
            self._fail("arch", "a model name such as resnet50")
        self.check_ranges()
