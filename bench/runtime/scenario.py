"""What a scenario that runs a model (training, inference) is beyond its loop: the checks before
the run (bench.runtime.scenario), one rank's run around the scenario's loop (the device, the CPU
split, the process group, the window's monitor, every rank's result gathered to rank 0) and the
out-of-memory line. The training and the inference scenario classes build on it and add check,
run_name, measure and report_class.

What must hold before any run of a model starts (training or inference), beyond the schema:
the dataset is on disk and decodes, the device exists and can do the precision, the model exists,
and the run fits the machine (cores, GPUs, memory). Each failure is one sentence naming the key
(exit 2), before an MLflow run is opened. Cheapest first: the dataset check needs no torch.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from pathlib import Path
from typing import Any, Callable, ClassVar, Optional, Tuple

import psutil

from bench.config import BenchConfig
from bench.config.data import Split
from bench.errors import ConfigError, ConfigProblem, DataError
from bench.machine.fitness import MachineWatch, Verdict, affinity, oversubscription, usable_cores, wait_until_quiet
from bench.machine.gpu_monitor import GpuFigures, GpuMonitor, gpu_watch
from bench.rank_context import RankContext
from bench.registries import import_own
from bench.runtime.reporting import ModelOutcome, ModelResult
from bench.scenario_base import BaseScenario

log = logging.getLogger("bench")


class ModelScenario(BaseScenario):
    loop_modules: ClassVar[Tuple[str, ...]] = ()  # the scenario's own modules a rank runs

    def preload(self, config: BenchConfig) -> Tuple[str, ...]:
        """What the elastic launcher's forkserver imports once, so workers start in well under a
        second: torch, the loop, and torchvision only for a torchvision model (its import is ~1.5
        CPU-s that a bench-own model's every launch would pay for nothing)."""
        from bench.runtime.models import uses_torchvision

        return ("torch", *(("torchvision",) if uses_torchvision(config.model) else ()), *self.loop_modules)

    def preflight(self, config: BenchConfig) -> None:
        """The dataset, the device, the model, the machine: bench.runtime.scenario."""
        check_model_run(config)  # the dataset first: a missing one is refused before torch loads

    def measure(
        self, config: BenchConfig, device: Any, ctx: RankContext, monitor: Any, out_dir: Path, heartbeat: Any
    ) -> ModelResult:
        """The scenario's loop on this rank: `monitor` (start()/stop()) around its measured window."""
        raise NotImplementedError

    def run_rank(
        self, config: BenchConfig, ctx: RankContext, out_dir: Path, heartbeat: Optional[Callable[[], None]] = None
    ) -> Optional[ModelOutcome]:
        """Run the loop as one rank, on the CPU with the threads and loader workers the user left unset
        chosen to fit the cores (bench.runtime.device.fit_cpu, said once by rank 0); rank 0 returns
        what every rank measured, each with its fit-to-measure verdict, the others None."""
        import torch

        from bench.launch.process_group import all_gather, destroy_process_group, init_process_group
        from bench.runtime.device import fit_cpu, resolve_device

        device = resolve_device(config.allow_cpu)
        config, chosen = fit_cpu(config, device.type)
        if chosen and ctx.is_reporter:
            log.info("%s", chosen)
        monitor = WindowMonitor(config, device, ctx)
        if ctx.distributed:
            init_process_group(config.distributed, ctx, device)
        try:
            result = self.measure(config, device, ctx, monitor, out_dir, heartbeat)
            result.fit = monitor.verdict
            ranks = all_gather(result, ctx)
        finally:
            if monitor.verdict is None and monitor.watch._thread is not None:  # a window an exception cut short:
                monitor.stop()  # its samplers end with it (Ctrl-C in bench.api.run left them sampling)
            destroy_process_group()
        name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
        return ModelOutcome(ranks, device.type, name) if ctx.is_reporter else None

    def explain(self, exc: BaseException, config: BenchConfig) -> Optional[str]:
        """A known failure in one line: out of memory names the batch size, the device and what to try."""
        text = str(exc)
        if type(exc).__name__ == "OutOfMemoryError" or "out of memory" in text.lower() or "OutOfMemoryError" in text:
            import torch

            batch, cuda = config.data.batch_size, torch.cuda.is_available()
            return (
                f"out of memory at data.batch_size={batch} on {torch.cuda.get_device_name() if cuda else 'cpu'}: "
                f"try data.batch_size={max(1, batch // 2)}"
            )
        return None


# ---- fit to measure for a run of a model (bench.machine.fitness, .gpu_monitor): the watch the loops start
# before the measured window and stop after it, and the refusal before a run with benchmark.require_fit=true
# (preflight, no MLflow run yet: an oversubscribed config is refused at once, and the machine is probed until
# other processes leave it quiet, for at most benchmark.require_fit_wait_s, else the run is refused in one
# line, exit 2). Torch is imported only when a watch starts. The verdict's place in the record, the MLflow
# run and the run's status: bench.runtime.reporting.


def loader_workers(config: BenchConfig, ranks: int) -> int:
    """Loader worker processes per rank of `ranks` on this node (bench.data.loader.resolve_workers; none
    for synthetic data)."""
    from bench.data.loader import resolve_workers

    return 0 if config.data.synthetic else resolve_workers(config.data, ranks)


def demand(config: BenchConfig, device_type: str, ranks: int, threads: int) -> Tuple[int, int, int, str]:
    """(threads, ranks on this host, workers per rank, what a thread is): on a GPU a rank's CPU work
    is its launching thread (torch's intra-op pool idles), on a CPU every torch thread computes."""
    cuda, workers = device_type == "cuda", loader_workers(config, ranks)
    return (1, ranks, workers, "launching thread") if cuda else (threads, ranks, workers, "torch thread")


class WindowMonitor:
    """What a loop starts before the window and stops after it: rank 0's GPU sampler (NVML sampling
    and energy of its GPU, bench.machine.gpu_monitor; stop() returns its figures) and every rank's
    fitness watch (`verdict` afterwards; None when the window never ran)."""

    def __init__(self, config: BenchConfig, device: Any, ctx: RankContext):
        self.config, self.device, self.ctx = config, device, ctx
        cuda = device.type == "cuda"
        self.gpu_monitor = GpuMonitor(device.index or 0) if cuda and ctx.is_reporter else None
        # the CPU is judged once, by rank 0
        self.watch = MachineWatch(gpu=gpu_watch(device.index or 0) if cuda else None, cpu=ctx.is_reporter)
        self.verdict: Optional[Verdict] = None

    def start(self) -> "WindowMonitor":
        import torch

        ranks = int(os.environ.get("LOCAL_WORLD_SIZE", "1")) if self.ctx.distributed else 1
        self.watch.demand = demand(self.config, self.device.type, ranks, torch.get_num_threads())
        self.watch.start()
        if self.gpu_monitor is not None:
            self.gpu_monitor.start()
        return self

    def stop(self) -> GpuFigures:
        figures = self.gpu_monitor.stop() if self.gpu_monitor is not None else GpuFigures()
        self.verdict = self.watch.stop()
        return figures


def check_quiet(config: BenchConfig, device: Any) -> None:
    """benchmark.require_fit=true: refuse an oversubscribed config; wait, bounded, for a quiet machine."""
    bench = config.benchmark
    if not bench.require_fit:
        return
    import torch

    from bench.runtime.device import fit_cpu

    config, _ = fit_cpu(config, device.type)  # the threads and workers the run will have
    ranks = config.distributed.nproc_per_node
    threads_, ranks_, workers, word = demand(config, device.type, ranks, config.cpu_threads or torch.get_num_threads())
    _, reason = oversubscription(threads_, ranks_, workers, usable_cores(affinity()), word)
    if reason:
        raise ConfigProblem(
            f"benchmark.require_fit=true and {reason}: lower cpu_threads, data.num_workers or "
            "distributed.nproc_per_node, or run without benchmark.require_fit",
            "benchmark.require_fit",
            True,
        )
    if not (verdict := wait_until_quiet(bench.require_fit_wait_s)).fit:
        raise ConfigProblem(
            f"benchmark.require_fit=true and the machine was not fit to measure after "
            f"benchmark.require_fit_wait_s={bench.require_fit_wait_s:g}: {'; '.join(verdict.reasons)}; "
            "stop what runs beside it, or raise benchmark.require_fit_wait_s",
            "benchmark.require_fit",
            True,
        )


FLOAT32 = 4


def check_model_run(
    config: BenchConfig, validation: bool = False, storage: Optional[Callable[[BenchConfig], None]] = None
) -> Any:
    """Raise the first problem; return the device the run will use. `validation`: the val split too;
    `storage`: the scenario's own check of what it reads and writes there (training's checkpoints), else
    the storage option's modules are imported. Last, with benchmark.require_fit: a config that
    oversubscribes the cores, or a machine that stays busy (check_quiet)."""
    check_dataset(config, validation)
    if storage is None:
        import_own({"storage.name": config.storage.name, "storage.client": config.storage.client})
    else:
        storage(config)
    device = check_device_and_model(config)
    check_batch_fits(config, device)
    check_prefetch_fits(config)
    check_batch_norm_batch(config)  # training's
    if config.benchmark.find_max_batch and device.type != "cuda":  # training's (the config refuses it elsewhere)
        raise ConfigError(
            "benchmark.find_max_batch",
            True,
            "false on a CPU (the search grows the batch until the GPU "
            "runs out of memory; a CPU would swap first): set data.batch_size instead",
        )
    check_quiet(config, device)
    return device


def check_dataset(config: BenchConfig, validation: bool = False) -> None:
    """The data option's files are where it reads them (and the val split's, with `validation`)."""
    from bench.data.registry import check_location

    try:
        check_location(config.data)
        if validation:  # the val split too: its absence is found now, not after an epoch
            check_location(dataclasses.replace(config.data, split=Split.val), validation=True)
        if config.data.root and config.data.name == "shards" and (validation or config.data.root.startswith("s3://")):
            from bench.data.shardformat import check_s3_shards

            check_s3_shards(config.data.root, config.storage, [config.data.split] + ([Split.val] if validation else []))
    except DataError as exc:
        raise ConfigProblem(str(exc), "data.root", config.data.root) from None


def check_device_and_model(config: BenchConfig) -> Any:
    """The device (allow_cpu), its precision, its GPU count and cores, the model's name; the device."""
    from bench.runtime.device import check_gpu_count, resolve_device
    from bench.runtime.models import check_model
    from bench.runtime.precision import build_precision

    device = resolve_device(config.allow_cpu)
    build_precision(config.precision, device)
    check_gpu_count(config.distributed.nproc_per_node, device)
    check_cores(config, device)
    check_model(config.model)
    return device


def check_cores(config: BenchConfig, device: Any) -> None:
    """Thread, worker and CPU-rank counts beyond the cores only oversubscribe them (a thousand
    workers is a thousand processes): bounded by this machine."""
    cores = len(affinity())
    where = f"at most {cores} (the CPU cores this process may use)"
    for key, count in (("cpu_threads", config.cpu_threads), ("data.num_workers", config.data.num_workers)):
        if count and count > cores:
            raise ConfigError(key, count, where)
    if device.type == "cpu" and config.distributed.nproc_per_node > cores:
        raise ConfigError(
            "distributed.nproc_per_node",
            config.distributed.nproc_per_node,
            f"{where} on a CPU, where each rank needs a core of its own",
        )


def check_batch_fits(config: BenchConfig, device: Any) -> None:
    """One input batch (float32 NCHW) larger than the device's whole memory cannot run: say so
    with the key to change, instead of an allocator error naming no key. (Activations need far
    more; this only catches what can never fit.)"""
    import torch

    batch = config.distributed.per_process(config.data.batch_size)
    image = 3 * config.data.image_size**2 * FLOAT32
    memory = int(torch.cuda.mem_get_info(device)[1] if device.type == "cuda" else psutil.virtual_memory().total)
    where = "the GPU" if device.type == "cuda" else "this machine"
    if image > memory // 16:
        raise ConfigError(
            "data.image_size",
            config.data.image_size,
            f"a size whose images fit in memory: one {config.data.image_size}x{config.data.image_size} "
            f"image is {image / 2**30:.1f} GiB of float32 and {where} has {memory / 2**30:.1f} GiB",
        )
    if batch * image > memory:
        raise ConfigError(
            "data.batch_size",
            config.data.batch_size,
            f"a batch that fits in memory: {batch} images of 3x{config.data.image_size}"
            f"x{config.data.image_size} float32 are {batch * image / 2**30:.1f} GiB and {where} has "
            f"{memory / 2**30:.1f} GiB (at most {memory // image} per process)",
        )


def check_prefetch_fits(config: BenchConfig) -> None:
    """Real data: each loader worker of each rank on this node holds prefetch_factor uint8 batches
    ahead; all of them must fit in half of this machine's memory (the rest is the run's)."""
    data = config.data
    if data.synthetic or data.num_workers == 0:
        return
    ranks = config.distributed.nproc_per_node
    workers = loader_workers(config, ranks)
    batch_bytes = config.distributed.per_process(config.data.batch_size) * 3 * data.image_size**2
    budget = int(psutil.virtual_memory().total) // 2
    if data.prefetch_factor > (most := budget // max(1, ranks * workers * batch_bytes)):
        raise ConfigError(
            "data.prefetch_factor",
            data.prefetch_factor,
            f"at most {most} here: {ranks} process(es) x {workers} loader workers x prefetch_factor "
            f"batches of {batch_bytes / 2**20:.1f} MiB must fit in half of this machine's "
            f"{2 * budget / 2**30:.1f} GiB",
        )


def check_batch_norm_batch(config: BenchConfig) -> None:
    """BatchNorm normalises a batch by its own statistics: over one image per process (what each
    DDP rank's BN sees) they are that image's, and training goes wrong silently. Inference is fine."""
    if config.distributed.per_process(config.data.batch_size) != 1 or config.mode != "train":
        return
    import torch

    from bench.runtime.models import build_model

    with torch.device("meta"):  # the modules only, no weights allocated
        model = build_model(config.model)
    if any(isinstance(m, torch.nn.modules.batchnorm._BatchNorm) for m in model.modules()):
        raise ConfigError(
            "data.batch_size",
            config.data.batch_size,
            f"at least 2 images per process to train model={config.model.arch} (it has BatchNorm, "
            "which normalises over the batch); or model.norm=none",
        )
