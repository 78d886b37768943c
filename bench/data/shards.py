"""data=shards: pre-resized JPEG shards (bench.data.shardformat) read whole, one GET per shard,
from a local directory or s3://bucket/prefix through bench.storage.base.open_store.

Each DataLoader worker of each rank is one consumer of an endless stream: every epoch the
shard order is reshuffled (the same permutation everywhere), and consumer c of C takes shards
c, c+C, ...; with fewer shards than consumers each consumer reads every shard and decodes
records c, c+C, ... of it. Workers build whole uint8 batches, across shard and epoch ends.
"""

from __future__ import annotations

import dataclasses
import itertools
import random
from typing import Any, Dict, Iterator, List, Optional, Tuple

import numpy as np
import torch
from torch.utils.data import IterableDataset, get_worker_info

from bench.config.data import DataConfig, Split
from bench.config.storage import StorageLocation
from bench.data.device_batches import DeviceBatches
from bench.data.layout import check_class_count
from bench.data.loader import Failure, HostBatch, empty_batch, make_loader, order_seed, resolve_workers
from bench.data.registry import Batch
from bench.data.shardformat import check_labels, check_listed, decode_shard_index, read_meta, val_label_map
from bench.data.transforms import CorruptImage, decode_crop, resize_into
from bench.storage.base import open_store

RecordFilter = Optional[Tuple[int, int]]  # (stride, first): the records whose dataset-wide index i % stride == first


def consumer_plan(
    shard_counts: List[int], epoch: int, seed: int, shuffle: bool, consumer: int, consumers: int
) -> List[Tuple[int, RecordFilter]]:
    """(shard number, record filter) pairs one consumer reads in one epoch; the filter
    (stride, first) keeps records whose dataset-wide index i has i % stride == first."""
    order = list(range(len(shard_counts)))
    if shuffle:
        random.Random(seed * 100_003 + epoch).shuffle(order)
    if len(order) >= consumers:
        return [(shard, None) for shard in order[consumer::consumers]]
    return [(shard, (consumers, consumer)) for shard in order]


class ShardStream(IterableDataset):
    one_pass = False  # validation: one pass, the last batch partial (every record read once)

    def __init__(
        self, cfg: DataConfig, storage: StorageLocation, meta: Dict[str, Any], seed: int, rank: int, world_size: int
    ):
        self.labels = list(range(len(meta["classes"])))  # val/: train/'s label of each of its classes (val_label_map)
        self.shards, self.writer = meta["shards"], meta.get("writer")
        self.location, self.storage = cfg.dataset_root, storage
        self.keys = [s["key"] for s in meta["shards"]]
        self.classes = len(meta["classes"])
        self.counts = [int(s["count"]) for s in meta["shards"]]
        self.starts = np.concatenate([[0], np.cumsum(self.counts)[:-1]]).astype(int).tolist()
        self.size, self.batch_size, self.decoder = cfg.image_size, cfg.batch_size, cfg.decoder
        self.train = cfg.split == "train"
        self.seed, self.rank, self.world_size = seed, rank, world_size
        self.order_seed = order_seed(cfg)

    def __iter__(self) -> Iterator[HostBatch]:
        info = get_worker_info()
        worker, workers = (info.id, info.num_workers) if info else (0, 1)
        consumer, consumers = self.rank * workers + worker, self.world_size * workers
        rng = random.Random((info.seed if info else self.seed) + 7919 * consumer)
        store = open_store(self.location, self.storage)  # opened in the worker: S3 clients do not survive fork
        images, labels, release = empty_batch(self.batch_size, self.size)
        filled = 0
        failures: List[Failure] = []
        for epoch in range(1) if self.one_pass else itertools.count():
            seen = decoded = 0
            plan = consumer_plan(self.counts, epoch, self.order_seed, self.train, consumer, consumers)
            for shard, record_filter in plan:
                for data, label, where in self._records(store, shard, record_filter, rng, failures):
                    seen += 1
                    try:
                        crop = decode_crop(data, self.train, self.size, rng, self.decoder)
                    except CorruptImage as exc:
                        failures.append((where, str(exc), False))
                        continue
                    decoded += 1
                    resize_into(images.numpy()[filled], crop, flip=self.train and rng.random() < 0.5)
                    labels[filled] = label
                    filled += 1
                    if filled == self.batch_size:
                        yield images, labels, failures, release
                        images, labels, release = empty_batch(self.batch_size, self.size)
                        filled, failures = 0, []
                if failures and failures[-1][2]:  # unreadable shard: hand it to the main process now
                    yield images, labels, failures, release
                    return
            if seen and not decoded:
                failures.append((self.location, f"none of the {seen} images this worker read could be decoded", True))
            # the one pass is over; or nothing to read (more consumers than records), or nothing decodes: every
            # epoch reads the same records, so the next would not either
            if self.one_pass or not decoded:
                if filled or failures:
                    yield images[:filled], labels[:filled], failures, release
                return

    def _records(
        self, store: Any, shard: int, record_filter: RecordFilter, rng: random.Random, failures: List[Failure]
    ) -> Iterator[Tuple[memoryview, int, str]]:
        where = f"{store.url.rstrip('/')}/{self.keys[shard]}"
        try:
            blob = store.get(self.keys[shard])
            index = decode_shard_index(blob, where)
            check_listed(self.shards[shard], {"count": len(index), "bytes": len(blob)}, where, self.writer)
            check_labels(index, self.classes, where)  # s3:// roots: preflight does not read their shards
        except Exception as exc:  # any backend's read error: name the shard, stop the run
            failures.append((where, getattr(exc, "strerror", None) or f"{type(exc).__name__}: {exc}", True))
            return
        rows = list(range(len(index)))
        if record_filter is not None:
            stride, first = record_filter
            rows = [r for r in rows if (self.starts[shard] + r) % stride == first]
        if self.train:
            rng.shuffle(rows)
        view = memoryview(blob)
        for row in rows:
            offset, length, label = index[row]
            yield view[offset : offset + length], int(self.labels[label]), f"{where}#{row}"


def shard_batches(
    cfg: DataConfig,
    device: torch.device,
    memory_format: torch.memory_format,
    seed: int,
    rank: int = 0,
    world_size: int = 1,
    storage: StorageLocation | None = None,
) -> Iterator[Batch]:
    storage = storage or StorageLocation()
    store = open_store(cfg.dataset_root, storage)
    meta = read_meta(store, cfg.split)
    check_class_count(len(meta["classes"]), f"{store.url}/{cfg.split}", cfg.num_classes)
    stream = ShardStream(cfg, storage, meta, seed, rank, world_size)
    loader = make_loader(stream, cfg, device)
    facts = {
        "dataset_size": int(meta["count"]),
        "dataset_classes": len(meta["classes"]),
        "dataset_shards": len(meta["shards"]),
        "shard_image_size": int(meta["size"]),
        "data_workers": resolve_workers(cfg),
    }
    batches = DeviceBatches(lambda _epoch: loader, facts, cfg, device, memory_format)
    batches.restartable = False  # the stream counts its own epochs: a new iterator would start again at 0
    return batches


def shard_val_batches(
    cfg: DataConfig,
    device: torch.device,
    memory_format: torch.memory_format,
    rank: int = 0,
    world_size: int = 1,
    storage: StorageLocation | None = None,
) -> DeviceBatches:
    """The val shards, unaugmented and in order: each rank x worker reads its own shards (or
    records), once per pass, the last batch partial."""
    storage = storage or StorageLocation()
    val = dataclasses.replace(cfg, split=Split.val)
    meta = read_meta(store := open_store(val.dataset_root, storage), "val")
    stream = ShardStream(val, storage, meta, 0, rank, world_size)
    stream.one_pass, stream.labels = True, val_label_map(store) or stream.labels
    loader = make_loader(stream, val, device)
    return DeviceBatches(lambda _epoch: loader, {"val_dataset_size": int(meta["count"])}, val, device, memory_format)
