"""The data options, by `data.name`, from the one table (bench.registries.DATA) or a user's own
batches builder (`data.name=mypkg.data:my_batches`).

Each option has a builder that returns an endless iterator of (images, labels) batches on the
device, and (real datasets) a torch-free check of `data.root` that runs before anything else.
Adding a format: a module with its builder (the signature of `build_batches` below), one line in
bench.registries.DATA (and conf/data/<name>.yaml for defaults of its own).
"""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Any, Iterator, Optional, Protocol, Tuple

from bench.config.data import DataConfig
from bench.config.storage import StorageLocation
from bench.data.layout import check_separate_val
from bench.errors import ConfigError, DataError
from bench.registries import DATA, DataOption, load, load_own

if TYPE_CHECKING:
    import torch

Batch = Tuple["torch.Tensor", "torch.Tensor"]  # forward references: importing this needs no torch


class Batches(Protocol):
    """What a builder returns: an endless iterator of batches (a generator or DeviceBatches) that
    close() stops, its loader's workers with it."""

    def __iter__(self) -> Iterator[Batch]: ...

    def __next__(self) -> Batch: ...

    def close(self) -> None: ...


BUILDER_PARAMETERS = ("data", "device", "memory_format", "seed", "rank", "world_size", "storage")


def _option(data: DataConfig) -> DataOption:
    """The registered option, or a user's own module:attr: a DataOption, or a builder that takes
    build_batches' arguments by name (no check, no val split). Anything else (`builtins:print`
    takes *args: a signature check alone would pass it) is one line naming data.name."""
    if data.name in DATA:
        return DATA[data.name]
    own = load_own("data.name", data.name)
    if isinstance(own, DataOption):
        return own
    try:
        names = tuple(inspect.signature(own).parameters)[: len(BUILDER_PARAMETERS)]
    except (TypeError, ValueError):  # not callable, or no signature Python can read
        names = ()
    if names != BUILDER_PARAMETERS:
        accepted = f"a bench.registries.DataOption or a batches builder taking ({', '.join(BUILDER_PARAMETERS)})"
        raise ConfigError("data.name", data.name, accepted)
    return DataOption(data.name)


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
    return load(_option(data).batches)(
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
    if (target := _option(data).val) is None:
        *others, last = [name for name, option in DATA.items() if option.val]
        raise DataError(
            f"data={data.name} has no validation split reader: train.eval_every and "
            f"train.target_accuracy need data={', '.join(others)} or {last}"
        )
    extra = {"storage": storage} if data.name == "shards" else {}  # shards may live on S3
    return load(target)(data, device, memory_format, rank, world_size, **extra)


def check_location(data: DataConfig, validation: bool = False) -> None:
    """Raise DataError when data.root does not hold the option's dataset (cheap: listings only);
    validation=True: its val split, which must be a split of its own (not the training images)."""
    check = _option(data).check
    try:
        if validation and data.name == "imagefolder":  # val/ takes train/'s classes: checked before its count
            check_separate_val(data.dataset_root)
        if check:
            load(check)(data)
    except PermissionError as exc:  # a folder this user may not list or enter: the data key's, not the run dir's
        raise DataError(f"data.root={data.root!r} cannot be read: {exc.filename}: {exc.strerror}") from None
