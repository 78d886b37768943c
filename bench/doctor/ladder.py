"""The ladder, in order and within the budget: compute ceiling, loader alone, storage alone, full
run, all-reduce; the verdict; then the what-ifs while the budget lasts. Every rung that fails says
why in its row and the ladder goes on: a diagnosis with a missing rung beats none.

The DDP rung (allreduce_rung): an all-reduce of the model's gradient size alone (float32, as DDP
reduces gradients), between this node's processes over the run's backend (NCCL on GPUs, gloo on
the CPU), against the full run's step time. Bus bandwidth as nccl-tests define it: bytes / time
x 2 (n - 1) / n. With several nodes only this node's processes take part (said in the figures).

The what-ifs (candidates) the doctor measures, not guesses: each a change to the user's overrides,
run as the full training run for a short window, its images/s against the full run's (its gain). On
the input side: as many loader workers as usable cores (on the CPU: twice the workers, their cores
taken from the model's threads), shards instead of a JPEG folder (made from a sample of it); on the
compute side: channels_last, bf16, twice the batch. The side the verdict points at goes first, and
the budget decides how many run."""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Any, Callable, List, Sequence

from bench.config import BenchConfig
from bench.doctor.figures import COMPUTE, FULL, LOADER, UNFIT, Diagnosis, LoaderFigures, Rung, TrainingFigures, WhatIf
from bench.doctor.training import TrainingRuns, replace, synthetic_twin
from bench.doctor.verdict import diagnose, figures_verdict
from bench.errors import BenchError, interruption_in
from bench.rank_context import free_port

log = logging.getLogger("bench.doctor")

# shares of the budget: each rung's measured window (set-up and warm-up come on top)
WINDOW_SHARE = {COMPUTE: 0.1, LOADER: 0.06, "storage": 0.04, FULL: 0.1, "what_if": 0.06}
MIN_WINDOW_S = 1.0
WARMUP, ITERATIONS = 2, 5  # the all-reduce rung's
SHARD_SAMPLE = 1024  # images of a JPEG folder made into shards for the shards what-if


class Budget:
    """doctor.budget_s counted from the command's start (its process's creation: start-up and the
    config's checks are spent from it too), so what is left is what is really left."""

    def __init__(self, seconds: float):
        import psutil

        self.started_at = psutil.Process().create_time()  # epoch seconds
        since_start = max(0.0, time.time() - self.started_at)
        self.seconds, self.started = seconds, time.perf_counter() - since_start

    def window(self, part: str) -> float:
        return max(MIN_WINDOW_S, self.seconds * WINDOW_SHARE[part])

    def elapsed(self) -> float:
        return time.perf_counter() - self.started

    def left(self) -> float:
        return self.seconds - self.elapsed()


def _guarded(name: str, measure: Callable[[], Rung]) -> Rung:
    """A rung's own failure (a loader that cannot read, a process group that cannot form) is its
    row's reason, not the doctor's end."""
    try:
        return measure()
    except (BenchError, OSError, RuntimeError) as exc:
        # a signal a library turned into its own error ends the ladder
        if (stopped := interruption_in(exc)) is not None:
            raise stopped from None
        return Rung(name=name, failed=str(exc) if isinstance(exc, BenchError) else f"{type(exc).__name__}: {exc}")


def climb(
    config: BenchConfig,
    overrides: Sequence[str],
    budget_s: float,
    runs: TrainingRuns,
    cores: float,
    with_what_ifs: bool,
    on_rung: Callable[[Rung], None],
) -> Diagnosis:
    from bench.doctor.loader import loader_rung
    from bench.doctor.storage_read import storage_rung

    budget = Budget(budget_s)
    setup_s = budget.elapsed()
    rungs: List[Rung] = []

    def add(rung: Rung) -> Rung:
        rungs.append(rung)
        on_rung(rung)
        return rung

    compute = add(runs.run("1-compute", COMPUTE, synthetic_twin(overrides, config), budget.window(COMPUTE)))
    loader = add(_guarded(LOADER, lambda: loader_rung(config, budget.window(LOADER))))
    dataset_size = (loader.figures.dataset_size if isinstance(loader.figures, LoaderFigures) else None) or 0
    add(_guarded("storage", lambda: storage_rung(config, budget.window("storage"), dataset_size)))
    full = add(runs.run("4-full", FULL, overrides, budget.window(FULL)))
    parameters = full.parameters or compute.parameters or 0
    add(_guarded("allreduce", lambda: allreduce_rung(config, parameters, full.step_ms)))
    verdict, sentence = diagnose(rungs, cores)
    leaning, leaning_sentence = figures_verdict(rungs, cores)  # the side the what-ifs start on, even when unfit
    log.info("%s", sentence)
    what_ifs: List[WhatIf] = []
    if with_what_ifs and full.measured:
        on_cpu = isinstance(full.figures, TrainingFigures) and full.figures.device == "cpu"
        what_ifs = candidates(config, overrides, cores, leaning in ("input-bound", "storage-bound"), on_cpu)
    # each measured as the full run: the first (the likeliest fix, on the side the verdict points at)
    # whatever the budget says, each other one while the budget left covers a run as long as the full rung took
    for number, what_if in enumerate(what_ifs):
        what_if.before, left = full.images_per_second, budget.left()
        if number and left < full.seconds:
            what_if.skipped = (
                f"not measured: {max(0.0, left):.0f} s of the budget left, a run takes ~{full.seconds:.0f} s"
            )
            continue
        if what_if.name == "data=shards":
            what_if.overrides, what_if.skipped = make_shards(config, overrides, runs.out_dir)
            if what_if.skipped:
                continue
        job = f"what-if-{len([w for w in what_ifs if w.images_per_second or w.failed]) + 1}"
        measured = runs.run(job, what_if.name, what_if.overrides, budget.window("what_if"))
        for shared in ("images_per_second", "failed", "run_id", "fit", "unfit_because"):  # the run's, as a rung's
            setattr(what_if, shared, getattr(measured, shared))
        said = f"{what_if.gain:.2f}x" if what_if.gain else what_if.failed
        unfit = f" ({UNFIT}: {what_if.unfit_because})" if what_if.fit is False else ""
        log.info("what if %s: %s%s", what_if.name, said, unfit)
    diagnosis = Diagnosis(verdict, sentence, rungs, what_ifs, budget_s, budget.elapsed(), list(overrides))
    diagnosis.setup_s, diagnosis.started_at = setup_s, budget.started_at
    diagnosis.figures_verdict, diagnosis.figures_sentence = leaning, leaning_sentence
    return diagnosis


def _rank(rank: int, world: int, port: int, elements: int, backend: str, out: Any) -> None:
    import torch
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group(backend, rank=rank, world_size=world)
    try:
        device = torch.device("cuda", rank) if backend == "nccl" else torch.device("cpu")
        if device.type == "cuda":
            torch.cuda.set_device(device)
        tensor = torch.ones(elements, dtype=torch.float32, device=device)

        def reduce(times: int) -> float:
            started = time.perf_counter()
            for _ in range(times):
                dist.all_reduce(tensor)
            if device.type == "cuda":
                torch.cuda.synchronize()
            return time.perf_counter() - started

        reduce(WARMUP)
        dist.barrier()
        seconds = reduce(ITERATIONS) / ITERATIONS
        if rank == 0:
            out.put(seconds)
    finally:
        dist.destroy_process_group()


def allreduce_rung(config: BenchConfig, parameters: int, step_ms: float | None) -> Rung:
    from bench.doctor.figures import ALLREDUCE, AllreduceFigures

    world = config.distributed.nproc_per_node
    if config.distributed.world_size <= 1:
        return Rung(ALLREDUCE, skipped="one process: DDP has nothing to all-reduce")
    if world <= 1:
        return Rung(ALLREDUCE, skipped="one process on this node: the all-reduce between nodes is not measured here")
    import torch
    import torch.multiprocessing as mp

    started = time.perf_counter()
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    out = mp.get_context("spawn").SimpleQueue()
    mp.start_processes(
        _rank, args=(world, free_port(), parameters, backend, out), nprocs=world, join=True, start_method="spawn"
    )
    seconds = out.get()
    size = parameters * 4
    figures = AllreduceFigures(
        milliseconds=seconds * 1000,
        megabytes=size / 1e6,
        processes=world,
        backend=backend,
        bus_gigabytes_per_second=size / seconds * 2 * (world - 1) / world / 1e9,
        step_ms=step_ms,
        share_of_step=seconds * 1000 / step_ms if step_ms else None,
        nodes_measured=1 if config.distributed.nnodes > 1 else None,
    )
    return Rung(ALLREDUCE, seconds=time.perf_counter() - started, figures=figures)


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
