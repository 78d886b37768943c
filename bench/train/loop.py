"""The training run: build model, data, precision, optimizer and schedule, resume from a
checkpoint if asked, then measure.

A run is `benchmark.warmup_steps` discarded steps, then the measured window (`benchmark.repeats`
times: bench.train.repeats):
`train.epochs` epochs of `train.steps_per_epoch` steps (null: one pass over the dataset), cut
short by `benchmark.measure_steps`, `benchmark.measure_seconds` or a reached
`train.target_accuracy`. Throughput = images in the window / seconds of the window
(evaluations and checkpoint writes left out: bench.train.epochs). Inside the window the host
never waits for the device except every `benchmark.log_every` steps (or every step with
`benchmark.sync=true`). What the run measures besides the window (a breakdown pass, profiled
steps, the FLOPs count) runs after it (bench.train.after_window); benchmark.find_max_batch
picks the batch before anything else is built (bench.train.max_batch).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

import torch
import torch.nn as nn

from bench.config import BenchConfig
from bench.data.registry import build_val_batches
from bench.errors import CheckpointError
from bench.launch.context import RankContext
from bench.train.after_window import after_window, optimizer_steps
from bench.train.device import peak_memory_bytes
from bench.train.epoch_data import EpochData
from bench.train.checkpoint_format import check_model_fits
from bench.train.epochs import Session
from bench.train.models import build_model, count_parameters, maybe_compile
from bench.train.optim import build_optimizer, effective_lr
from bench.train.precision import PrecisionPolicy, build_precision
from bench.train.result import EpochRecord, TrainResult
from bench.train.repeats import measure_windows
from bench.train.resume import Position, TrainingCheckpoints, restore_rng
from bench.train.schedules import build_scheduler
from bench.train.step import TrainStep

log = logging.getLogger(__name__)

make_step = TrainStep  # the name other modules and tests import


def _cpu_threads(config: BenchConfig, device: torch.device, ctx: RankContext) -> Optional[int]:
    """CPU ranks share the cores: without a split each would start one thread per core and
    oversubscribe (torchrun sets OMP_NUM_THREADS=1 for the same reason)."""
    if config.cpu_threads or device.type != "cpu" or not ctx.distributed:
        return config.cpu_threads
    return max(1, (os.cpu_count() or 1) // config.distributed.nproc_per_node)


def train(config: BenchConfig, device: torch.device, monitor: Any = None,
          on_finish: Optional[Callable[[nn.Module, torch.optim.Optimizer], Dict[str, Any]]] = None,
          ctx: Optional[RankContext] = None, on_step: Optional[Callable[[], None]] = None,
          out_dir: Optional[Path] = None) -> TrainResult:
    """Build model, data, precision, optimizer and scheduler from `config` and run.

    `monitor` (start()/stop() -> dict) samples the device during the measured window only;
    `on_finish(model, optimizer)` runs after the window (a checkpoint write, say);
    `ctx` is this process's rank: with world_size > 1 the model is wrapped in DDP (the
    process group must exist) and each rank reads its own data; `on_step()` is called after
    every step; `out_dir` receives the profiler's files.
    """
    ctx = ctx or RankContext()
    torch.manual_seed(config.seed)
    threads = _cpu_threads(config, device, ctx)
    if threads:
        torch.set_num_threads(threads)
    torch.backends.cudnn.benchmark = bool(config.cudnn_benchmark)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)

    checkpoints = TrainingCheckpoints(config) if config.checkpoint.every_epochs or config.train.resume else None
    if checkpoints is not None and ctx.is_reporter:
        checkpoints.remove_stale_temporaries()
    resumed = checkpoints.load(config.train.resume) if checkpoints and config.train.resume else None
    start = Position(resumed["epoch"], resumed["step_in_epoch"]) if resumed else Position(0)
    policy = build_precision(config.precision, device)
    eager = build_model(config.model).to(device=device, memory_format=policy.memory_format)
    if resumed:  # before any step: another model's checkpoint is one line, not load_state_dict's dump
        check_model_fits(resumed, eager, checkpoints.loaded["resumed_from"])
    requested = config.data.batch_size
    if config.benchmark.find_max_batch:
        from bench.train.max_batch import find_max_batch

        found = find_max_batch(config, eager, policy, device, ctx)
        config = dataclasses.replace(config, data=dataclasses.replace(config.data, batch_size=found))
        torch.cuda.reset_peak_memory_stats(device)  # the search's trials are not the run's peak
    data = EpochData(config, device, policy.memory_format, ctx, start.epoch)
    warmup = config.benchmark.warmup_steps
    total = data.planned(0)  # the schedule spans the whole run, resumed or not
    planned = data.planned(start.epoch, start.step_in_epoch)
    if config.benchmark.measure_steps:
        planned = min(planned, config.benchmark.measure_steps)
    base_lr = effective_lr(config.optimizer, config.scheduler, data.batch_size * ctx.world_size)
    optimizer = build_optimizer(eager, config.optimizer, base_lr, device)
    scheduler = build_scheduler(optimizer, _in_steps(config.scheduler, data, warmup),
                                warmup + total * config.benchmark.repeats + optimizer_steps(config), base_lr)
    if config.scheduler.scale_lr:
        data.on_batch_change = lambda old, new: scale_lr(optimizer, scheduler, new / old)
    wrapped = _wrap_ddp(eager, config, device) if ctx.distributed else eager
    model, compile_info = maybe_compile(wrapped, config.compile, config.compile_mode)
    model.train()
    options = {"label_smoothing": config.train.label_smoothing, "clip_norm": config.optimizer.grad_clip_norm}
    step = TrainStep(model, optimizer, scheduler, policy, after=on_step, **options)
    batches = data.batches

    first_step_at = time.perf_counter()  # time-to-accuracy counts from here
    if compile_info["active"]:
        # torch.compile fails lazily, at the first call: try it once, outside the window.
        try:
            step(*next(batches))
        except Exception as exc:  # noqa: BLE001
            log.warning("torch.compile failed at the first step (%s: %s); running eager", type(exc).__name__, exc)
            compile_info.update(active=False, fallback_reason=f"{type(exc).__name__}: {exc}")
            step = step.with_model(wrapped)

    if resumed and "meta" not in resumed:  # a format-1 file names no optimizer: loading it is the check
        restore(resumed, eager, optimizer, scheduler, policy, checkpoints.loaded["resumed_from"])
    for _ in range(warmup):
        step(*next(batches))
    if resumed:  # after the warm-up, whose steps must not count: the state is the checkpoint's
        restore(resumed, eager, optimizer, scheduler, policy, checkpoints.loaded["resumed_from"])
    val = build_val_batches(config.data, device, policy.memory_format, ctx.rank, ctx.world_size, config.storage) \
        if config.train.eval_every else None
    session = Session(config, ctx, eager, optimizer, scheduler, policy, step, data, val, checkpoints, start,
                      [EpochRecord(**e) for e in resumed["history"]] if resumed else [],
                      resumed["wall_seconds"] if resumed else 0.0)
    if monitor is not None:
        monitor.start()
    window = measure_windows(session, device, planned, first_step_at,
                             checkpoints is not None and config.checkpoint.every_epochs > 0 and config.checkpoint.on_signal)
    gpu = monitor.stop() if monitor is not None else {}
    peak_memory = peak_memory_bytes(device)  # the window's: the passes after it may profile, or allocate more
    extra = dict(getattr(data.batches, "facts", {}))  # real data: dataset_size, corrupt_skipped, ...
    if config.benchmark.find_max_batch:
        extra.update(batch_size_requested=requested, batch_size_found=data.batch_size)
    figures, files, interrupted = after_window(config, device, ctx, step, data.batches,
                                               wrapped if ctx.distributed else None, out_dir)
    extra.update(figures)
    if checkpoints is not None:
        extra.update(checkpoints.figures())
    if data.progressive:
        extra.update(phase_figures(window["epochs"]))
    if on_finish is not None and not interrupted:  # a signal asks for a prompt end: no checkpoint write
        extra.update(on_finish(eager, optimizer))
    return TrainResult(
        gpu=gpu,
        extra=extra,
        batch_size=data.batch_size,
        warmup_steps=warmup,
        base_lr=base_lr,
        peak_memory_bytes=peak_memory,
        parameters=count_parameters(eager),
        precision=policy.describe(),
        compile=compile_info,
        fused_optimizer=bool(optimizer.defaults.get("fused")),
        param_checksum=_param_checksum(eager),
        files=files,
        interrupted=interrupted,
        **window,
    )


def _in_steps(scheduler: Any, data: EpochData, warmup: int) -> Any:
    """scheduler.milestone_unit=epochs: each milestone becomes the optimizer step its epoch starts at."""
    if scheduler.milestone_unit != "epochs":
        return scheduler
    steps = [warmup + data.planned(0) - data.planned(epoch) for epoch in scheduler.milestones]
    return dataclasses.replace(scheduler, milestones=steps, milestone_unit="steps")


def restore(state: Dict[str, Any], eager: nn.Module, optimizer: torch.optim.Optimizer, scheduler: Any,
            policy: PrecisionPolicy, where: str = "") -> None:
    """Every rank loads the same checkpoint in place, so DDP's replicas stay identical."""
    eager.load_state_dict(state["model"])
    try:  # a format-1 file has no `meta` naming its optimizer: another one's state fails here
        optimizer.load_state_dict(state["optimizer"])
        _restore_schedule(scheduler, state["scheduler"])
    except (KeyError, ValueError, RuntimeError) as exc:
        raise CheckpointError(f"checkpoint {where} holds another optimizer or schedule than this run's "
                              f"({type(exc).__name__}: {str(exc)[:120]}): resume with the config it was written by, "
                              "or start without train.resume") from None
    if policy.scaler is not None and state.get("scaler"):
        policy.scaler.load_state_dict(state["scaler"])
    restore_rng(state["rng"])


def _restore_schedule(scheduler: Any, saved: Dict[str, Any]) -> None:
    """The checkpoint's position in the schedule, this run's length: train.epochs may grow on
    resume, and OneCycleLR's state would otherwise carry the old horizon and fail past it."""
    horizon = {key: scheduler.__dict__[key] for key in ("total_steps", "_schedule_phases") if key in scheduler.__dict__}
    scheduler.load_state_dict(saved)
    if horizon and saved.get("total_steps") != horizon.get("total_steps"):
        log.warning("train.resume: the checkpoint's lr schedule spans %s steps, this run's %s (train.epochs "
                    "changed): the schedule continues on this run's length", saved.get("total_steps"),
                    horizon.get("total_steps"))
    scheduler.__dict__.update(horizon)


def scale_lr(optimizer: torch.optim.Optimizer, scheduler: Any, ratio: float) -> None:
    """A progressive phase changed the batch: the lr follows it (scheduler.scale_lr)."""
    for group in optimizer.param_groups:
        for key in ("lr", "initial_lr", "max_lr", "min_lr"):
            if key in group:
                group[key] *= ratio
    if hasattr(scheduler, "base_lrs"):
        scheduler.base_lrs = [lr * ratio for lr in scheduler.base_lrs]


def phase_figures(epochs: List[EpochRecord]) -> Dict[str, Any]:
    """images/s of each progressive phase (consecutive epochs of one image and batch size)."""
    figures: Dict[str, Any] = {}
    phases: List[List[EpochRecord]] = []
    for epoch in epochs:
        if phases and (phases[-1][-1].image_size, phases[-1][-1].batch_size) == (epoch.image_size, epoch.batch_size):
            phases[-1].append(epoch)
        else:
            phases.append([epoch])
    for number, phase in enumerate(phases, start=1):
        images, seconds = sum(e.images for e in phase), sum(e.seconds for e in phase)
        figures.update({f"phase{number}_image_size": phase[0].image_size,
                        f"phase{number}_batch_size": phase[0].batch_size,
                        f"phase{number}_images_per_second": images / seconds if seconds > 0 else 0.0})
    return figures


def _wrap_ddp(model: nn.Module, config: BenchConfig, device: torch.device) -> nn.Module:
    from torch.nn.parallel import DistributedDataParallel

    dist = config.distributed
    return DistributedDataParallel(
        model,
        device_ids=[device.index] if device.type == "cuda" else None,
        gradient_as_bucket_view=dist.gradient_as_bucket_view,  # no copy between grads and buckets
        static_graph=dist.static_graph,  # same graph every step: lets DDP skip per-step bookkeeping
        bucket_cap_mb=dist.bucket_cap_mb,
    )


def _param_checksum(model: nn.Module) -> float:
    with torch.no_grad():
        # one device-to-host read, not one per tensor
        return float(torch.stack([p.detach().double().sum() for p in model.parameters()]).sum().item())
