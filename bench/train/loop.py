"""The training loop and its measurement.

A run is `benchmark.warmup_steps` discarded steps, then the measured window:
`train.epochs x train.steps_per_epoch` steps, cut short by `benchmark.measure_steps` or
`benchmark.measure_seconds`. Throughput = images in the window / seconds of the window.
Inside the window the host never waits for the device except every
`benchmark.log_every` steps (or every step with `benchmark.sync=true`).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import resource
import sys
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch
import torch.nn as nn
from tqdm import tqdm

from bench.analysis.stats import percentile
from bench.config import BenchConfig
from bench.config.distributed import Scaling
from bench.data.registry import build_batches
from bench.launch.context import RankContext
from bench.train.models import build_model, count_parameters
from bench.train.optim import build_optimizer, effective_lr
from bench.train.precision import PrecisionPolicy, build_precision
from bench.train.result import EpochRecord, TrainResult
from bench.train.schedules import build_scheduler
from bench.train.timing import StepClock

log = logging.getLogger(__name__)

Step = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def per_rank_batch_size(config: BenchConfig, world_size: int) -> int:
    """weak scaling: data.batch_size per process; strong: data.batch_size split over the ranks."""
    batch = config.data.batch_size
    return batch // world_size if config.distributed.scaling == Scaling.strong else batch


def make_step(model: nn.Module, optimizer: torch.optim.Optimizer, scheduler: Any, policy: PrecisionPolicy,
              after: Optional[Callable[[], None]] = None) -> Step:
    """One optimizer step: forward under autocast, backward (scaled for fp16), step, schedule;
    then `after()` (the launched workers' hang watchdog)."""
    criterion = nn.CrossEntropyLoss()
    scaler = policy.scaler

    def step(images: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        optimizer.zero_grad(set_to_none=True)
        with policy.autocast():
            loss = criterion(model(images), labels)
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        else:
            loss.backward()
            optimizer.step()
        scheduler.step()
        if after is not None:
            after()
        return loss.detach()

    return step


def _peak_memory_bytes(device: torch.device) -> int:
    if device.type == "cuda":
        return int(torch.cuda.max_memory_allocated(device))
    # ru_maxrss is in KiB on Linux: the process's resident-set high-water mark.
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


def _maybe_compile(model: nn.Module, enabled: bool, mode: Optional[str]) -> Tuple[nn.Module, Dict[str, Any]]:
    if not enabled:
        return model, {"requested": False, "active": False}
    try:
        return torch.compile(model, mode=mode), {"requested": True, "active": True, "mode": mode or "default"}
    except Exception as exc:  # noqa: BLE001 - any failure means: run eager, and say so
        log.warning("torch.compile failed (%s: %s); running eager", type(exc).__name__, exc)
        return model, {"requested": True, "active": False, "fallback_reason": f"{type(exc).__name__}: {exc}"}


def _cpu_threads(config: BenchConfig, device: torch.device, ctx: RankContext) -> Optional[int]:
    """CPU ranks share the cores: without a split each would start one thread per core and
    oversubscribe (torchrun sets OMP_NUM_THREADS=1 for the same reason)."""
    if config.cpu_threads or device.type != "cpu" or not ctx.distributed:
        return config.cpu_threads
    return max(1, (os.cpu_count() or 1) // config.distributed.nproc_per_node)


def train(config: BenchConfig, device: torch.device, monitor: Any = None,
          on_finish: Optional[Callable[[nn.Module, torch.optim.Optimizer], Dict[str, Any]]] = None,
          ctx: Optional[RankContext] = None, on_step: Optional[Callable[[], None]] = None) -> TrainResult:
    """Build model, data, precision, optimizer and scheduler from `config` and run.

    `monitor` (start()/stop() -> dict) samples the device during the measured window only;
    `on_finish(model, optimizer)` runs after the window (a checkpoint write, say);
    `ctx` is this process's rank: with world_size > 1 the model is wrapped in DDP (the
    process group must exist) and each rank reads its own data; `on_step()` is called after
    every step.
    """
    ctx = ctx or RankContext()
    torch.manual_seed(config.seed)
    threads = _cpu_threads(config, device, ctx)
    if threads:
        torch.set_num_threads(threads)
    torch.backends.cudnn.benchmark = bool(config.cudnn_benchmark)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)

    batch_size = per_rank_batch_size(config, ctx.world_size)
    planned = config.train.epochs * config.train.steps_per_epoch
    if config.benchmark.measure_steps:
        planned = min(planned, config.benchmark.measure_steps)
    warmup = config.benchmark.warmup_steps

    policy = build_precision(config.precision, device)
    eager = build_model(config.model).to(device=device, memory_format=policy.memory_format)
    base_lr = effective_lr(config.optimizer, config.scheduler, batch_size * ctx.world_size)
    optimizer = build_optimizer(eager, config.optimizer, base_lr, device)
    scheduler = build_scheduler(optimizer, config.scheduler, warmup + planned, base_lr)
    batches = build_batches(dataclasses.replace(config.data, batch_size=batch_size), device, policy.memory_format,
                            config.seed + ctx.rank, rank=ctx.rank, world_size=ctx.world_size, storage=config.storage)
    wrapped = _wrap_ddp(eager, config, device) if ctx.distributed else eager
    model, compile_info = _maybe_compile(wrapped, config.compile, config.compile_mode)
    model.train()
    step = make_step(model, optimizer, scheduler, policy, after=on_step)

    if compile_info["active"]:
        # torch.compile fails lazily, at the first call: try it once, outside the window.
        try:
            step(*next(batches))
        except Exception as exc:  # noqa: BLE001
            log.warning("torch.compile failed at the first step (%s: %s); running eager", type(exc).__name__, exc)
            compile_info.update(active=False, fallback_reason=f"{type(exc).__name__}: {exc}")
            step = make_step(wrapped, optimizer, scheduler, policy, after=on_step)

    for _ in range(warmup):
        step(*next(batches))
    clock = StepClock(device, strict_sync=config.benchmark.sync)
    clock.sync()
    if monitor is not None:
        monitor.start()
    window = _measure(step, batches, clock, config, planned, batch_size, optimizer, ctx)
    gpu = monitor.stop() if monitor is not None else {}
    extra = dict(getattr(batches, "facts", {}))  # real data: dataset_size, corrupt_skipped, ...
    if on_finish is not None:
        extra.update(on_finish(eager, optimizer))
    return TrainResult(
        gpu=gpu,
        extra=extra,
        batch_size=batch_size,
        warmup_steps=warmup,
        base_lr=base_lr,
        peak_memory_bytes=_peak_memory_bytes(device),
        parameters=count_parameters(eager),
        precision=policy.describe(),
        compile=compile_info,
        fused_optimizer=bool(optimizer.defaults.get("fused")),
        param_checksum=_param_checksum(eager),
        **window,
    )


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


def _deadline_passed(deadline: Optional[float], ctx: RankContext) -> bool:
    """measure_seconds: with several ranks the decision is all-reduced (any rank out of time
    stops all), or a rank that stopped alone would leave the others waiting in an all-reduce."""
    if deadline is None:
        return False
    passed = time.perf_counter() >= deadline
    if not ctx.distributed:
        return passed
    import torch.distributed as dist

    flag = torch.tensor([1.0 if passed else 0.0], device="cuda" if torch.cuda.is_available() and
                        dist.get_backend() == "nccl" else "cpu")
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    return bool(flag.item())


def _measure(step: Step, batches: Any, clock: StepClock, config: BenchConfig, planned: int, batch_size: int,
             optimizer: torch.optim.Optimizer, ctx: RankContext) -> Dict[str, Any]:
    steps_per_epoch = config.train.steps_per_epoch
    log_every = config.benchmark.log_every
    seconds = config.benchmark.measure_seconds
    deadline = time.perf_counter() + seconds if seconds else None
    progress = tqdm(total=planned, unit="step", file=sys.stderr, mininterval=1.0, leave=False,
                    disable=None if config.benchmark.progress and ctx.is_reporter else True)  # None: off when not a TTY

    data_wait: List[float] = []
    epoch_ends: List[tuple] = []  # (index of the epoch's last mark, its last loss, lr after it)
    done = 0
    loss = torch.zeros(())
    clock.mark()  # the window opens here
    while done < planned:
        t0 = time.perf_counter()
        images, labels = next(batches)
        data_wait.append((time.perf_counter() - t0) * 1000.0)
        loss = step(images, labels)
        clock.mark()
        done += 1
        progress.update()
        # several ranks decide together, at log intervals only (a collective is a sync point)
        at_sync_point = not ctx.distributed or done % log_every == 0 or done == planned
        timed_out = at_sync_point and _deadline_passed(deadline, ctx)
        if done % steps_per_epoch == 0 or done == planned or timed_out:
            epoch_ends.append((len(clock) - 1, loss, optimizer.param_groups[0]["lr"]))
        if done % log_every == 0:
            clock.sync()  # a log interval: the one place the host waits for the device
            recent = min(log_every, done)
            window = clock.seconds_between(len(clock) - 1 - recent, len(clock) - 1)
            log.info("step %d/%d  loss %.4f  %.1f img/s (last %d steps)", done, planned,
                     loss.item(), recent * batch_size / window, recent)
        if timed_out:
            break
    clock.sync()
    progress.close()

    step_times = clock.step_times_ms()
    epochs, first = [], 0
    for number, (last, epoch_loss, lr) in enumerate(epoch_ends, start=1):
        span = clock.seconds_between(first, last)
        epochs.append(EpochRecord(epoch=number, steps=last - first, images=(last - first) * batch_size,
                                  seconds=span, images_per_second=(last - first) * batch_size / span,
                                  loss=float(epoch_loss.item()), lr=float(lr),
                                  step_time_ms_p50=percentile(step_times[first:last], 50)))
        first = last
    return {
        "measured_steps": done,
        "window_seconds": clock.seconds_between(0, len(clock) - 1),
        "step_times_ms": step_times,
        "data_wait_ms": data_wait,
        "epochs": epochs,
        "final_lr": float(optimizer.param_groups[0]["lr"]),
        "final_loss": float(loss.item()),
    }
