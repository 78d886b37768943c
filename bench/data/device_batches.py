"""The endless device-side iterator the trainer times: passes over a dataset's DataLoader,
each uint8 batch copied to the device and normalised there, the dataset's facts kept, and a
worker's failures turned into one-sentence DataErrors (bench.data.loader builds the rest);
map_style_batches: a map-style dataset's, for training or for one validation pass; synthetic_batches:
data=synthetic's, one batch made once on the device and served forever."""

from __future__ import annotations

import itertools
import logging
from typing import Any, Callable, Dict, Generator, Iterable, Iterator, List, Optional, Tuple

import torch

from bench.config.data import DataConfig
from bench.config.storage import StorageLocation
from bench.data.loader import (
    MAX_WARNINGS,
    OUTPUT_RING,
    BatchDataset,
    Failure,
    HostBatch,
    epoch_batch_sampler,
    eval_batch_sampler,
    make_loader,
    release_batch,
    resolve_workers,
)
from bench.data.transforms import normalize_into
from bench.errors import DataError

log = logging.getLogger("bench.data.loader")


def _storage_users(tensor: torch.Tensor) -> int:
    """Tensors sharing `tensor`'s storage, itself included (the temporary storage handle is not counted)."""
    count = getattr(torch._C, "_storage_Use_Count", None)  # private: without it, never reuse
    return count(tensor.untyped_storage()._cdata) - 1 if count else 2


def _cycle(passes: Callable[[int], Iterable[HostBatch]], start: int = 0) -> Generator[HostBatch, None, None]:
    for epoch in itertools.count(start):
        batches = 0
        for batch in passes(epoch):
            batches += 1
            yield batch
        if not batches:
            raise DataError(
                "the dataset yielded no batch in a whole pass: too few images for "
                "data.batch_size, data.num_workers and the number of processes"
            )


class DeviceBatches(Iterator):
    """Endless (images, labels) on the device: cycles passes over the dataset, copies each
    uint8 batch to the device and normalises it there, and keeps the dataset's facts."""

    restartable = True  # passes(epoch) gives that epoch's order (map-style datasets)

    def __init__(
        self,
        passes: Callable[[int], Iterable[HostBatch]],
        facts: Dict[str, Any],
        cfg: DataConfig,
        device: torch.device,
        memory_format: torch.memory_format,
    ):
        self.facts = {**facts, "corrupt_skipped": 0}  # the trainer reports these with the run
        self._strict = bool(cfg.strict)
        self._device, self._memory_format = device, memory_format
        self._non_blocking = bool(cfg.pin_memory) and device.type == "cuda"
        self._skipped: set = set()
        self._buffers: List[torch.Tensor] = []
        self._passes = passes
        self._host = _cycle(passes)  # holds no reference to self: dropping the iterator stops its workers

    def close(self) -> None:
        """Stop the workers now (they also stop when the iterator is garbage-collected)."""
        self._host.close()

    def restart(self, epoch: int) -> None:
        """Begin pass `epoch` now (its sampler order: DistributedSampler.set_epoch(epoch)), dropping
        what is left of the current pass: training epochs line up with passes over the dataset,
        and a resumed run reads epoch N in the order an uninterrupted run would have."""
        self._host.close()
        self._host = _cycle(self._passes, start=epoch)

    def one_pass(self) -> Iterator[Tuple[torch.Tensor, torch.Tensor]]:
        """One pass over the dataset (validation), as device batches."""
        for host in self._passes(0):
            yield self._to_device(host)

    def __next__(self) -> Tuple[torch.Tensor, torch.Tensor]:
        try:
            host = next(self._host)
        except DataError:
            raise
        except Exception as exc:  # a worker's wrapped traceback: keep its last line, the error itself
            lines = [line for line in str(exc).strip().splitlines() if line.strip()]
            raise DataError(f"the data loader failed: {lines[-1] if lines else type(exc).__name__}") from exc
        return self._to_device(host)

    def _to_device(self, host: HostBatch) -> Tuple[torch.Tensor, torch.Tensor]:
        images, labels, failures, release = host
        if failures:
            self._note(failures)
        pixels = images.to(self._device, non_blocking=self._non_blocking)
        normalized = normalize_into(self._output(pixels.shape), pixels)
        # The worker's slot has been read by now, so it may refill it: on the CPU normalize_into read
        # it synchronously; a blocking copy to the GPU has finished; with pin_memory the DataLoader
        # had already copied it to pinned memory before handing it over.
        release_batch(release)
        return normalized, labels.to(self._device, non_blocking=self._non_blocking)

    def _output(self, nhwc: torch.Size) -> torch.Tensor:
        """A float32 batch to normalise into. On the CPU a freed one is reused: a fresh 38 MB
        tensor costs more in page faults than the normalisation itself. A buffer counts as freed
        when nothing outside this ring holds its storage (not the trainer, not autograd)."""
        n, h, w, c = nhwc
        shape = (n, c, h, w)
        if self._device.type != "cpu":  # the caching allocator already reuses device memory
            return torch.empty(shape, dtype=torch.float32, device=self._device, memory_format=self._memory_format)
        for buffer in self._buffers:
            if buffer.shape == shape and _storage_users(buffer) == 1:
                return buffer
        buffer = torch.empty(shape, dtype=torch.float32, memory_format=self._memory_format)
        if len(self._buffers) < OUTPUT_RING:
            self._buffers.append(buffer)
        return buffer

    def _note(self, failures: List[Failure]) -> None:
        for path, reason, fatal in failures:
            if fatal:
                raise DataError(f"cannot read {path}: {reason}")
            if self._strict:
                raise DataError(f"corrupt image {path} ({reason}); data.strict=true stops at the first one")
            if path not in self._skipped:
                self._skipped.add(path)
                if len(self._skipped) <= MAX_WARNINGS:
                    log.warning("skipped corrupt image %s (%s)", path, reason)
        self.facts["corrupt_skipped"] = len(self._skipped)


MapStyleSplit = Tuple[BatchDataset, str, int]  # the split's dataset, its folder or file, its class count


def map_style_builders(split: Callable[[DataConfig, bool, int, int], MapStyleSplit]) -> Tuple[Callable, Callable]:
    """A map-style option's two builders (DataOption's batches and val), from `split(cfg, val, seed, rank)`.
    Training: endless passes of full batches, this rank's share, reshuffled each epoch on the train split
    (DistributedSampler.set_epoch), `where` named when it holds less than a batch per process; validation:
    one pass in which each sample is read by one rank, the last batch partial."""

    def batches(
        cfg: DataConfig,
        device: torch.device,
        memory_format: torch.memory_format,
        seed: int,
        rank: int = 0,
        world_size: int = 1,
        storage: Optional[StorageLocation] = None,
    ) -> DeviceBatches:
        dataset, where, classes = split(cfg, False, seed, rank)
        sampler = epoch_batch_sampler(len(dataset), cfg, cfg.split == "train", rank, world_size, where)
        loader = make_loader(dataset, cfg, device, sampler)

        def one_pass(epoch: int) -> Iterable[HostBatch]:
            sampler.sampler.set_epoch(epoch)  # type: ignore[union-attr]  # epoch_batch_sampler's DistributedSampler
            return loader

        facts = {"dataset_size": len(dataset), "dataset_classes": classes, "data_workers": resolve_workers(cfg)}
        return DeviceBatches(one_pass, facts, cfg, device, memory_format)

    def val_batches(
        cfg: DataConfig, device: torch.device, memory_format: torch.memory_format, rank: int = 0, world_size: int = 1
    ) -> DeviceBatches:
        dataset = split(cfg, True, 0, rank)[0]
        loader = make_loader(dataset, cfg, device, eval_batch_sampler(len(dataset), cfg.batch_size, rank, world_size))
        return DeviceBatches(lambda _epoch: loader, {"val_dataset_size": len(dataset)}, cfg, device, memory_format)

    return batches, val_batches


def synthetic_batches(
    cfg: DataConfig,
    device: torch.device,
    memory_format: torch.memory_format,
    seed: int,
    rank: int = 0,
    world_size: int = 1,
    storage: StorageLocation | None = None,
) -> Iterator[Tuple[torch.Tensor, torch.Tensor]]:
    """Synthetic ImageNet-like data: it measures what the model and device can do with no input pipeline
    at all; real data options report how far short of that a pipeline falls."""
    gen = torch.Generator(device="cpu").manual_seed(seed)
    shape = (cfg.batch_size, 3, cfg.image_size, cfg.image_size)
    images = torch.randn(shape, generator=gen).to(device).contiguous(memory_format=memory_format)
    labels = torch.randint(0, cfg.num_classes, (cfg.batch_size,), generator=gen).to(device)
    while True:
        yield images, labels
