"""The order an epoch reads in: `storage.workload.shuffle` none | file | sample, seeded.

- none: files in order, each file's samples in order;
- file: the file order shuffled (seeded per client and epoch, or per client only with
  seed_change_epoch=false);
- sample: the file order shuffled, then the stream of samples passed through a shuffle buffer
  of `shuffle_buffer` samples, as tf.data's shuffle does (fill the buffer, then emit a random
  element and put the next one in its place; drain in random order at the end). A buffer as
  large as the epoch (null) is a full permutation.

With read_mode=sample the samples are read in that order (one seek and read each); with
whole-file reads the files are read whole in the file order, and the sample order only decides
which samples form a batch (no I/O of its own).
The run index (storage.runs) changes the seed too: MLPerf wants a new seed every run.
"""

from __future__ import annotations

import random
from typing import Iterable, Iterator, List, Optional, Sequence, Tuple, TypeVar

from bench.config.storage import Shuffle, StorageWorkloadConfig
from bench.iobench.formats.base import FileSpec

T = TypeVar("T")


def _rng(workload: StorageWorkloadConfig, client: int, epoch: int, run: int, what: str) -> random.Random:
    epoch_part = epoch if workload.seed_change_epoch else 1
    run_part = f"-run{run}" if run else ""  # run 0 keeps the seeds runs had before storage.runs existed
    return random.Random(f"{workload.seed}-{client}-{epoch_part}{run_part}{what}")


def file_order(
    files: Sequence[FileSpec], workload: StorageWorkloadConfig, client: int, epoch: int, run: int = 0
) -> List[FileSpec]:
    order = list(files)
    if workload.shuffle_mode != Shuffle.none:
        _rng(workload, client, epoch, run, "").shuffle(order)
    return order


def buffered_shuffle(items: Iterable[T], buffer_size: Optional[int], rng: random.Random) -> Iterator[T]:
    """tf.data's shuffle(buffer_size): every item exactly once, each at most buffer_size - 1
    places earlier than it came in. None: a full permutation."""
    if buffer_size is None:
        everything = list(items)
        rng.shuffle(everything)
        yield from everything
        return
    buffer: List[T] = []
    for item in items:
        if len(buffer) < buffer_size:
            buffer.append(item)
            continue
        pick = rng.randrange(buffer_size)
        yield buffer[pick]
        buffer[pick] = item
    rng.shuffle(buffer)
    yield from buffer


def sample_order(
    files: Sequence[FileSpec], workload: StorageWorkloadConfig, client: int, epoch: int, run: int = 0
) -> List[Tuple[FileSpec, int]]:
    """(file, sample index) in the order an epoch reads them one by one."""
    stream = (
        (spec, index) for spec in file_order(files, workload, client, epoch, run) for index in range(spec.samples)
    )
    if workload.shuffle_mode != Shuffle.sample:
        return list(stream)
    return list(buffered_shuffle(stream, workload.shuffle_buffer, _rng(workload, client, epoch, run, "-samples")))
