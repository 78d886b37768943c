"""What-ifs the doctor measures, not guesses: each a change to the user's overrides, run as the
full training run for a short window, its images/s against the full run's (its gain). On the
input side: as many loader workers as usable cores (on the CPU: twice the workers, their cores
taken from the model's threads), shards instead of a JPEG folder (made from a
sample of it); on the compute side: channels_last, bf16, twice the batch. The side the verdict
points at goes first, and the budget decides how many run."""

from __future__ import annotations

import os
from pathlib import Path
from typing import List, Sequence

from bench.config import BenchConfig
from bench.doctor.figures import FULL, WhatIf
from bench.doctor.training import replace

SHARD_SAMPLE = 1024  # images of a JPEG folder made into shards for the shards what-if


def candidates(
    config: BenchConfig, overrides: Sequence[str], cores: float, input_first: bool, on_cpu: bool = False
) -> List[WhatIf]:
    """`config`: the run as it runs (on the CPU, with the threads and workers bench.runtime.device.fit_cpu chose)."""
    data, precision = config.data, config.precision
    inputs: List[WhatIf] = []
    if not data.synthetic:
        inputs += _more_workers(config, overrides, cores, on_cpu)
        if data.name == "imagefolder":
            inputs.append(WhatIf("data=shards", [], FULL))  # its overrides are known once the shards are made
    compute: List[WhatIf] = []
    if not precision.channels_last:
        compute.append(WhatIf("channels_last", replace(overrides, "precision.channels_last", "true"), FULL))
    if precision.autocast_dtype is None:
        compute.append(WhatIf("precision=bf16", replace(overrides, "precision", "bf16"), FULL))
    doubled = data.batch_size * 2
    compute.append(WhatIf(f"data.batch_size={doubled}", replace(overrides, "data.batch_size", str(doubled)), FULL))
    return inputs + compute if input_first else compute + inputs


def _more_workers(config: BenchConfig, overrides: Sequence[str], cores: float, on_cpu: bool) -> List[WhatIf]:
    """On a GPU: as many loader workers as usable cores. On the CPU the workers take cores from the
    model's threads: twice the workers (at least one), the threads what is left of each rank's share."""
    from bench.data.loader import resolve_workers

    now = resolve_workers(config.data)
    if not on_cpu:
        workers = max(1, int(cores))
        more = replace(overrides, "data.num_workers", str(workers))
        return [WhatIf(f"data.num_workers={workers}", more, FULL)] if now < workers else []
    share = max(1, int(cores // config.distributed.nproc_per_node))
    workers = min(max(1, 2 * now), share - 1)
    if workers <= now:
        return []  # no core to give the loader: the model's last thread
    name = f"data.num_workers={workers} cpu_threads={share - workers}"
    more = replace(replace(overrides, "data.num_workers", str(workers)), "cpu_threads", str(share - workers))
    return [WhatIf(name, more, FULL)]


def make_shards(config: BenchConfig, overrides: Sequence[str], out_dir: Path) -> tuple[List[str], str]:
    """(the overrides reading shards made from a sample of the JPEG folder, "") or ([], why not)."""
    from bench.data.layout import imagefolder_base, scan_image_folder
    from bench.data.prepare import prepare
    from bench.errors import BenchError
    from bench.iobench.freespace import shortfall

    data = config.data
    classes, paths, labels = scan_image_folder(imagefolder_base(data.dataset_root, data.split))
    sample = list(zip(paths, labels, strict=True))[:: max(1, len(paths) // SHARD_SAMPLE)][:SHARD_SAMPLE]
    size = max(data.image_size, round(data.image_size * 256 / 224))  # the short side a crop is taken from
    source, shards = out_dir / "shards-source", out_dir / "shards"
    need = len(sample) * size * size * 3 // 4 + (1 << 20)  # at most a quarter of raw pixels a JPEG
    if problem := shortfall("the shards what-if", need, out_dir):
        return [], problem
    for path, label in sample:  # links, not copies: the sample costs no space
        folder = source / "train" / classes[label]
        folder.mkdir(parents=True, exist_ok=True)
        link = folder / os.path.basename(path)
        if not link.exists():
            link.symlink_to(os.path.abspath(path))
    try:
        prepare(str(source), str(shards), size=size, shard_size=max(64, len(sample) // 8), progress=False)
    except BenchError as exc:
        return [], f"could not make shards: {exc}"
    return reading_shards(overrides, shards), ""


def reading_shards(overrides: Sequence[str], shards: Path) -> List[str]:
    """The shards what-if's overrides: the user's, reading the shard set at `shards`."""
    return replace(replace(overrides, "data", "shards"), "data.root", str(shards))
