"""data.progressive: the fast-ImageNet schedule of image size and batch size by epoch.

"0,128,512;5,160,384;10,192,320;15,224,256" = from epoch 0 train at 128 px with batches of 512,
from epoch 5 at 160 px / 384, ... (epochs count from 0). Torch-free: parsed while the config
is checked, so a bad string is one line naming data.progressive.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import List

from bench.errors import ConfigError

ACCEPTED = (
    '"epoch,size,batch;..." with increasing epochs starting at 0 and positive sizes and batches, '
    'e.g. "0,128,512;5,160,384;10,192,320;15,224,256"'
)


@dataclass(frozen=True)
class Phase:
    epoch: int  # the first epoch (from 0) of this phase
    image_size: int
    batch_size: int


def parse_progressive(text: str) -> List[Phase]:
    phases: List[Phase] = []
    try:
        for part in str(text).replace(" ", "").strip(";").split(";"):
            epoch, size, batch = (int(f) for f in part.split(","))  # ValueError: not three whole numbers
            if epoch < 0 or size <= 0 or batch <= 0 or (phases and epoch <= phases[-1].epoch):
                raise ValueError(part)
            phases.append(Phase(epoch, size, batch))
        if not phases or phases[0].epoch != 0:
            raise ValueError(text)
    except ValueError:
        raise ConfigError("data.progressive", text, ACCEPTED) from None
    return phases


def phase_at(phases: List[Phase], epoch: int) -> Phase:
    """The phase epoch `epoch` (from 0) trains in."""
    return [p for p in phases if p.epoch <= epoch][-1]
