"""The ladder's input-pipeline rung: the configured loader with no model, images/s and CPU
milliseconds per image (this process and its workers), and for a JPEG/PNG folder that CPU time
split by stage: read, decode, augment, collate, host-to-device.

The split is measured on a sample of the dataset's own images, one at a time on one thread,
through the functions the loader's workers call (bench.data.imagefolder's load: read the file,
decode_crop, resize_into; the batch; DeviceBatches' copy and normalise): what each stage costs
per image, not a guess. A loader whose stages are not split here says so (shards, cifar100)."""

from __future__ import annotations

import random
import time
from typing import Dict, Optional

import torch

from bench.config import BenchConfig
from bench.doctor.figures import LOADER, Rung
from bench.tools.loader_benchmark import cpu_seconds_with_children

MIN_BATCHES = 3
SPLIT_SAMPLES = 64  # images the stage split decodes (fewer when the window is short)


def device_of(config: BenchConfig) -> torch.device:
    return torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")


def memory_format_of(config: BenchConfig) -> torch.memory_format:
    return torch.channels_last if config.precision.channels_last else torch.contiguous_format


def loader_rung(config: BenchConfig, window_s: float) -> Rung:
    from bench.data.registry import build_batches

    rung = Rung(name=LOADER)
    if config.data.synthetic:
        rung.skipped = "synthetic data is made on the device: there is no input pipeline"
        return rung
    started = time.perf_counter()
    device = device_of(config)
    batches = build_batches(config.data, device, memory_format_of(config), seed=config.seed)
    try:
        next(batches)  # the workers' start and first decode are not the loader's rate
        cpu, clock, count, images = cpu_seconds_with_children(), time.perf_counter(), 0, 0
        while count < MIN_BATCHES or time.perf_counter() - clock < window_s:
            pixels, _labels = next(batches)
            count, images = count + 1, images + int(pixels.shape[0])
        if device.type == "cuda":
            torch.cuda.synchronize()
        seconds, cpu = time.perf_counter() - clock, cpu_seconds_with_children() - cpu
    finally:
        batches.close()
    rung.images_per_second = images / seconds
    facts = getattr(batches, "facts", {})
    rung.figures = {
        "cpu_ms_per_image": cpu * 1000 / images,
        "batches": count,
        "workers": facts.get("data_workers"),
        "dataset_size": facts.get("dataset_size"),
    }
    split = stage_split(config, max(0.5, window_s / 2))
    if split:
        rung.figures["stage_cpu_ms"] = split
    else:
        rung.figures["stage_note"] = f"the stages of data={config.data.name} are not split by the doctor"
    rung.seconds = time.perf_counter() - started
    return rung


def stage_split(config: BenchConfig, budget_s: float) -> Optional[Dict[str, float]]:
    """CPU milliseconds per image of each stage of a JPEG/PNG folder's loader, or None for others."""
    if config.data.name != "imagefolder":
        return None
    from bench.data.layout import imagefolder_base, scan_image_folder
    from bench.data.loader import empty_batch
    from bench.data.transforms import decode_crop, normalize_into, resize_into

    data = config.data
    _classes, paths, _labels = scan_image_folder(imagefolder_base(data.dataset_root, data.split))
    rng = random.Random(config.seed)
    sample = rng.sample(paths, min(SPLIT_SAMPLES, len(paths)))
    train = data.split == "train" and data.augment
    size, device = data.image_size, device_of(config)
    spent = dict.fromkeys(("read", "decode", "augment", "collate", "host_to_device"), 0.0)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # process CPU time is this thread's: one stage at a time
    deadline, done = time.perf_counter() + budget_s, 0
    try:
        for start in range(0, len(sample), data.batch_size):
            chunk = sample[start : start + data.batch_size]
            mark = time.process_time()
            images, labels, _release = empty_batch(len(chunk), size)
            slots = images.numpy()
            spent["collate"] += time.process_time() - mark
            for slot, path in zip(slots, chunk, strict=True):
                mark = time.process_time()
                with open(path, "rb") as fh:
                    raw = fh.read()
                after_read = time.process_time()
                crop = decode_crop(raw, train, size, rng, data.decoder)
                after_decode = time.process_time()
                resize_into(slot, crop, flip=train and rng.random() < 0.5)
                spent["read"] += after_read - mark
                spent["decode"] += after_decode - after_read
                spent["augment"] += time.process_time() - after_decode
            mark = time.process_time()
            out = torch.empty((len(chunk), 3, size, size), dtype=torch.float32, device=device)
            normalize_into(out, images.to(device))
            labels.to(device)
            if device.type == "cuda":
                torch.cuda.synchronize()
            spent["host_to_device"] += time.process_time() - mark
            done += len(chunk)
            if time.perf_counter() > deadline:
                break
    finally:
        torch.set_num_threads(threads)
    return {stage: seconds * 1000 / done for stage, seconds in spent.items()} if done else None
