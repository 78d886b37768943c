"""The ladder's input-pipeline rung: the configured loader with no model, images/s and CPU
milliseconds per image (this process and its workers), and that CPU time split by stage: read,
decode, augment, collate, host-to-device.

The split is measured on a sample of the dataset's own images, one batch at a time on one
thread, through the functions the loader's workers call: a JPEG/PNG folder's files read, a shard
set's shard objects fetched from their store (local or S3) with their read shared by their
images, then decode_crop and resize_into; CIFAR-100's images picked from memory, cropped,
flipped and resized by Cifar100Batches' own steps (no decode: raw pixels); the batch; and
DeviceBatches' copy and normalise. What each stage costs per image, not a guess. A loader whose
stages are not known here says so."""

from __future__ import annotations

import itertools
import random
import time
from typing import Any, Callable, Dict, Iterator, Optional, Tuple, TypeVar, Union

import torch

from bench.config import BenchConfig
from bench.data.loader import empty_batch
from bench.data.transforms import decode_crop, normalize_into, resize_batch_into, resize_into
from bench.doctor.figures import LOADER, STAGES, LoaderFigures, Rung
from bench.machine.fitness import cpu_seconds_with_children

MIN_BATCHES = 3
T = TypeVar("T")
SPLIT_SAMPLES = 64  # images the stage split decodes (fewer when the window is short)


def device_of(config: BenchConfig) -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def loader_rung(config: BenchConfig, window_s: float) -> Rung:
    from bench.data.registry import build_batches

    if config.data.synthetic:
        return Rung(LOADER, skipped="synthetic data is made on the device: there is no input pipeline")
    started = time.perf_counter()
    memory_format = torch.channels_last if config.precision.channels_last else torch.contiguous_format
    batches = build_batches(config.data, device_of(config), memory_format, seed=config.seed)
    count, images, seconds, cpu = timed_batches(batches, warmup=1, least=MIN_BATCHES, window_s=window_s)
    facts = getattr(batches, "facts", {})
    split = stage_split(config, max(0.5, window_s / 2))
    figures = LoaderFigures(
        cpu_ms_per_image=cpu * 1000 / images,
        batches=count,
        workers=facts.get("data_workers"),
        dataset_size=facts.get("dataset_size"),
        stage_cpu_ms=split or None,
        stage_note=None if split else f"the stages of data={config.data.name} are not split by the doctor",
    )
    return Rung(LOADER, images / seconds, time.perf_counter() - started, figures=figures)


def timed_batches(
    batches: Iterator[Any], warmup: int, least: int, window_s: float = 0.0
) -> Tuple[int, int, float, float]:
    """A loader's timing, its iterator closed after (its workers stopped): `warmup` batches discarded (the
    workers' start, the first decode), then at least `least` and until `window_s` has passed: (batches,
    images, seconds, CPU seconds of this process and its workers). bench-loader times its loaders so too."""
    try:
        for _ in range(warmup):
            next(batches)
        cpu, clock, count, images = cpu_seconds_with_children(), time.perf_counter(), 0, 0
        while count < least or time.perf_counter() - clock < window_s:
            pixels, _labels = next(batches)
            count, images = count + 1, images + int(pixels.shape[0])
        if pixels.is_cuda:
            torch.cuda.synchronize()
        return count, images, time.perf_counter() - clock, cpu_seconds_with_children() - cpu
    finally:
        batches.close()  # type: ignore[attr-defined]


Source = Iterator[Tuple[Union[bytes, memoryview], float]]  # (an encoded image, CPU seconds its read cost)


def folder_images(config: BenchConfig, rng: random.Random) -> Source:
    """A sample of a JPEG/PNG folder's images, each file read as bench.data.imagefolder reads it."""
    from bench.data.layout import imagefolder_base, scan_image_folder

    data = config.data
    _classes, paths, _labels = scan_image_folder(imagefolder_base(data.dataset_root, data.split))
    for path in rng.sample(paths, min(SPLIT_SAMPLES, len(paths))):
        mark = time.process_time()
        with open(path, "rb") as fh:
            raw = fh.read()
        yield raw, time.process_time() - mark


def shard_images(config: BenchConfig, rng: random.Random) -> Source:
    """A sample of a shard set's images, shards in random order, as bench.data.shards reads them: a
    whole shard object fetched from its store (local or S3) and its index checked; that read's CPU
    is shared by every image of the shard (an epoch decodes them all)."""
    from bench.data.shardformat import check_labels, decode_shard_index, read_meta
    from bench.storage.base import open_store

    data = config.data
    store = open_store(data.dataset_root, config.storage)
    meta = read_meta(store, str(data.split))
    shards = [str(s["key"]) for s in meta["shards"]]
    taken = 0
    for key in rng.sample(shards, len(shards)):
        mark = time.process_time()
        blob = store.get(key)
        index = decode_shard_index(blob, key)
        check_labels(index, len(meta["classes"]), key)
        per_image = (time.process_time() - mark) / max(1, len(index))
        view = memoryview(blob)
        for offset, length, _label in rng.sample(index.tolist(), len(index)):
            yield view[offset : offset + length], per_image
            taken += 1
            if taken == SPLIT_SAMPLES:
                return


ENCODED = {"imagefolder": folder_images, "shards": shard_images}


def stage_split(config: BenchConfig, budget_s: float) -> Optional[Dict[str, float]]:
    """CPU milliseconds per image of each stage of the configured loader (a JPEG/PNG folder,
    shards, CIFAR-100), or None for a loader whose stages are not known here."""
    name = config.data.name
    split = cifar_split if name == "cifar100" else encoded_split if name in ENCODED else None
    if split is None:
        return None
    spent = dict.fromkeys(STAGES, 0.0)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # process CPU time is this thread's: one stage at a time
    try:
        done = split(config, budget_s, spent)
    finally:
        torch.set_num_threads(threads)
    return {stage: seconds * 1000 / done for stage, seconds in spent.items()} if done else None


def encoded_split(config: BenchConfig, budget_s: float, spent: Dict[str, float]) -> int:
    """A JPEG/PNG folder's or a shard set's images by stage, through the loader's decode_crop and
    resize_into (CPU seconds added to `spent`); the images done."""
    data = config.data
    rng = random.Random(config.seed)
    images_of = ENCODED[config.data.name](config, rng)
    train = data.split == "train" and data.augment
    size = data.image_size
    deadline, done = time.perf_counter() + budget_s, 0
    while time.perf_counter() <= deadline:
        if not (chunk := list(itertools.islice(images_of, data.batch_size))):
            break
        images, labels, _release = _timed(spent, "collate", empty_batch, len(chunk), size)
        for slot, (raw, read_s) in zip(_timed(spent, "collate", images.numpy), chunk, strict=True):
            spent["read"] += read_s
            crop = _timed(spent, "decode", decode_crop, raw, train, size, rng, data.decoder)
            _timed(spent, "augment", resize_into, slot, crop, flip=train and rng.random() < 0.5)
        spent["host_to_device"] += to_device(config, images, labels)
        done += len(chunk)
    return done


def cifar_split(config: BenchConfig, budget_s: float, spent: Dict[str, float]) -> int:
    """CIFAR-100's loader by stage, through Cifar100Batches' own steps: read (its images picked
    from the arrays it holds in memory; the files are read once, at the start), no decode (raw
    pixels), augment (pad-crop-flip, then the resize to data.image_size), collate (the batch and
    its labels), host-to-device. CPU seconds added to `spent`; the images done."""
    from bench.data.cifar100 import Cifar100Batches, load_cifar100

    data = config.data
    pixels, labels, _names = load_cifar100(data.dataset_root, str(data.split))
    dataset = Cifar100Batches(pixels, labels, data.image_size, data.split == "train" and data.augment, config.seed, 0)
    order = random.Random(config.seed).sample(range(len(pixels)), min(SPLIT_SAMPLES, len(pixels)))
    deadline, done = time.perf_counter() + budget_s, 0
    for start in range(0, len(order), data.batch_size):
        indices = order[start : start + data.batch_size]
        picked = _timed(spent, "read", pixels.__getitem__, indices)
        _timed(spent, "augment", dataset.crop_and_flip, picked)
        images, batch_labels, _release = _timed(spent, "collate", empty_batch, len(indices), data.image_size)
        _timed(spent, "augment", resize_batch_into, images, torch.from_numpy(picked))
        _timed(spent, "collate", batch_labels.copy_, torch.from_numpy(labels[indices]))
        spent["host_to_device"] += to_device(config, images, batch_labels)
        done += len(indices)
        if time.perf_counter() > deadline:
            break
    return done


def _timed(spent: Dict[str, float], stage: str, step: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """`step(*args, **kwargs)`, its CPU seconds (this process's, on one thread) added to `spent[stage]`."""
    mark = time.process_time()
    out = step(*args, **kwargs)
    spent[stage] += time.process_time() - mark
    return out


def to_device(config: BenchConfig, images: torch.Tensor, labels: torch.Tensor) -> float:
    """CPU seconds of DeviceBatches' step: the batch normalised to float32 on the device."""
    device, size = device_of(config), config.data.image_size
    mark = time.process_time()
    out = torch.empty((len(images), 3, size, size), dtype=torch.float32, device=device)
    normalize_into(out, images.to(device))
    labels.to(device)
    if device.type == "cuda":
        torch.cuda.synchronize()
    return time.process_time() - mark
