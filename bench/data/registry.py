"""The data options, by `data.name`: the one place that maps an option to its code.

Each option has a builder that returns an endless iterator of (images, labels) batches on the
device, and (real datasets) a torch-free check of `data.root` that runs before anything else.
Adding a format: a module with its builder (the signature of `build_batches` below), one line
here, a DataName member (bench.config.data) and conf/data/<name>.yaml.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterator, Optional, Protocol, Tuple

from bench.config.data import DataConfig, DataName
from bench.config.storage import StorageLocation
from bench.data.layout import check_separate_val
from bench.errors import DataError

if TYPE_CHECKING:
    import torch

Batch = Tuple["torch.Tensor", "torch.Tensor"]  # forward references: importing this needs no torch


class Batches(Protocol):
    """What a builder returns: an endless iterator of batches (a generator or DeviceBatches) that
    close() stops, its loader's workers with it."""

    def __iter__(self) -> Iterator[Batch]: ...

    def __next__(self) -> Batch: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class DataOption:
    batches: str  # "module:function" building the batch iterator
    check: Optional[str] = None  # "module:function(data)": data.root holds this dataset (lists, never reads)
    val: Optional[str] = None  # "module:function" building one rank's validation pass (train.eval_every)


OPTIONS: Dict[DataName, DataOption] = {
    DataName.synthetic: DataOption("bench.data.synthetic:synthetic_batches"),
    DataName.imagefolder: DataOption(
        "bench.data.imagefolder:imagefolder_batches",
        "bench.data.layout:check_imagefolder",
        "bench.data.imagefolder:imagefolder_val_batches",
    ),
    DataName.cifar100: DataOption(
        "bench.data.cifar100:cifar100_batches",
        "bench.data.layout:check_cifar100",
        "bench.data.cifar100:cifar100_val_batches",
    ),
    DataName.shards: DataOption(
        "bench.data.shards:shard_batches",
        "bench.data.shardformat:check_shard_dataset",
        "bench.data.shards:shard_val_batches",
    ),
}


def _load(target: str) -> Callable[..., Any]:
    module, _, name = target.partition(":")
    return getattr(importlib.import_module(module), name)


def build_batches(
    data: DataConfig,
    device: "torch.device",
    memory_format: "torch.memory_format",
    seed: int,
    rank: int = 0,
    world_size: int = 1,
    storage: Optional[StorageLocation] = None,
) -> Batches:
    """`rank`/`world_size` shard real datasets; `storage` opens datasets read through it (s3:// roots)."""
    return _load(OPTIONS[data.name].batches)(
        data, device, memory_format, seed, rank, world_size, storage or StorageLocation()
    )


def build_val_batches(
    data: DataConfig,
    device: "torch.device",
    memory_format: "torch.memory_format",
    rank: int = 0,
    world_size: int = 1,
    storage: Optional[StorageLocation] = None,
) -> Any:
    """This rank's share of the validation split (every sample read by one rank, once): an object
    whose one_pass() yields device batches; DataError when the option or data.root has none."""
    target = OPTIONS[data.name].val
    if target is None:
        raise DataError(
            f"data={data.name} has no validation split reader: train.eval_every and "
            "train.target_accuracy need data=imagefolder, cifar100 or shards"
        )
    extra = {"storage": storage} if data.name == DataName.shards else {}  # shards may live on S3
    return _load(target)(data, device, memory_format, rank, world_size, **extra)


def check_location(data: DataConfig, validation: bool = False) -> None:
    """Raise DataError when data.root does not hold the option's dataset (cheap: listings only);
    validation=True: its val split, which must be a split of its own (not the training images)."""
    check = OPTIONS[data.name].check
    if check:
        _load(check)(data)
    if validation and data.name == DataName.imagefolder:
        check_separate_val(data.dataset_root)
