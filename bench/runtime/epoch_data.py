"""The training batches, epoch by epoch: how many steps an epoch has (train.steps_per_epoch, or
one pass over this rank's share of a real dataset), which pass it reads (DistributedSampler
order of that epoch), and, with data.progressive, the image and batch size of its phase."""

from __future__ import annotations

import dataclasses
import logging
from typing import Any, Callable, Iterator, Optional, Tuple

import torch

from bench.config import BenchConfig
from bench.config.data import Phase, parse_progressive, phase_at
from bench.data.registry import build_batches
from bench.errors import DataError
from bench.rank_context import RankContext

log = logging.getLogger(__name__)


class EpochData:
    def __init__(
        self,
        config: BenchConfig,
        device: torch.device,
        memory_format: torch.memory_format,
        ctx: RankContext,
        start_epoch: int = 0,
    ):
        self.config, self.device, self.memory_format, self.ctx = config, device, memory_format, ctx
        self.phases = parse_progressive(config.data.progressive) if config.data.progressive else None
        self.on_batch_change: Optional[Callable[[int, int], None]] = None  # (old, new) per-rank batch
        self.batches: Any = None
        self._entered = False
        self._open(*self._phase(start_epoch))
        self.dataset_size = int(getattr(self.batches, "facts", {}).get("dataset_size", 0))

    @property
    def progressive(self) -> bool:
        return self.phases is not None

    def _phase(self, epoch: int) -> Tuple[Phase, int]:
        """Epoch `epoch`'s phase, and its batch per process."""
        data = self.config.data
        phase = phase_at(self.phases, epoch) if self.phases else Phase(0, data.image_size, data.batch_size)
        return phase, self.config.distributed.per_process(phase.batch_size, self.ctx.world_size)

    def _open(self, phase: Phase, batch: int) -> None:
        if self.batches is not None and hasattr(self.batches, "close"):
            self.batches.close()
        self.batches = build_batches(
            dataclasses.replace(self.config.data, image_size=phase.image_size, batch_size=batch),
            self.device,
            self.memory_format,
            self.config.seed + self.ctx.rank,
            rank=self.ctx.rank,
            world_size=self.ctx.world_size,
            storage=self.config.storage,
        )
        self.image_size, self.batch_size = phase.image_size, batch

    def steps(self, epoch: int) -> int:
        if self.config.train.steps_per_epoch:
            return self.config.train.steps_per_epoch
        batch = self._phase(epoch)[1]
        # DistributedSampler, full batches only
        if (steps := self.dataset_size // self.ctx.world_size // batch) < 1:
            raise DataError(
                f"train.steps_per_epoch=null: the dataset's {self.dataset_size} images make no full "
                f"batch of {batch} per process ({self.ctx.world_size} processes)"
            )
        return steps

    def planned(self, first: int, skip: int = 0) -> int:
        """Steps from epoch `first` (minus `skip` already done) to the last epoch: in closed form (an
        epoch's steps change only where a progressive phase starts), so train.epochs=1000000000 costs nothing."""
        last = self.config.train.epochs
        starts = sorted({first, *(p.epoch for p in self.phases or () if first < p.epoch < last)})
        return sum(self.steps(a) * (b - a) for a, b in zip(starts, [*starts[1:], last], strict=True) if a < b) - skip

    def enter(self, epoch: int, skip: int = 0) -> Iterator:
        """The batches of epoch `epoch` (from 0), `skip` of them already trained (a resumed run)."""
        phase, batch = self._phase(epoch)
        if self.phases and (phase.image_size, batch) != (self.image_size, self.batch_size):
            old = self.batch_size
            log.info("epoch %d: progressive resizing to %d px, batch %d", epoch + 1, phase.image_size, phase.batch_size)
            self._open(phase, batch)
            if self.on_batch_change is not None:
                self.on_batch_change(old, self.batch_size)
        # epochs that are passes start their pass here (after the warm-up's batches, and after a
        # resize); epochs of fixed steps keep reading the endless stream, as bench always has,
        # except where a resumed run starts
        passes = self.config.train.steps_per_epoch is None or (not self._entered and epoch > 0)
        if passes and getattr(self.batches, "restartable", False):
            self.batches.restart(epoch)
        self._entered = True
        for _ in range(skip):
            next(self.batches)  # the order an uninterrupted run read
        return self.batches
