"""The training loop and its measurement.

A run is `benchmark.warmup_steps` discarded steps, then the measured window:
`train.epochs x train.steps_per_epoch` steps, cut short by `benchmark.measure_steps` or
`benchmark.measure_seconds`. Throughput = images in the window / seconds of the window.
Inside the window the host never waits for the device except every
`benchmark.log_every` steps (or every step with `benchmark.sync=true`).
"""

from __future__ import annotations

import logging
import resource
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional

import torch
import torch.nn as nn
from tqdm import tqdm

from bench.data import build_batches
from bench.distributed import RankContext, per_rank_batch_size
from bench.models import build_model, count_parameters
from bench.optim import build_optimizer, build_scheduler, effective_lr
from bench.precision import PrecisionPolicy, build_precision
from bench.results import percentile
from bench.timing import StepClock

log = logging.getLogger(__name__)


@dataclass
class EpochRecord:
    epoch: int
    steps: int
    images: int
    seconds: float
    images_per_second: float
    loss: float
    lr: float
    step_time_ms_p50: float


@dataclass
class TrainResult:
    batch_size: int  # per process
    warmup_steps: int
    measured_steps: int
    window_seconds: float
    step_times_ms: List[float]
    data_wait_ms: List[float]
    epochs: List[EpochRecord]
    base_lr: float
    final_lr: float
    final_loss: float
    peak_memory_bytes: int
    parameters: int
    precision: Dict[str, Any]
    compile: Dict[str, Any] = field(default_factory=dict)
    fused_optimizer: bool = False
    param_checksum: float = 0.0  # sum of all weights after training: equal on every rank when DDP synced them
    gpu: Dict[str, float] = field(default_factory=dict)  # NVML samples from the window
    extra: Dict[str, Any] = field(default_factory=dict)  # e.g. checkpoint write figures

    @property
    def images(self) -> int:
        return self.measured_steps * self.batch_size


def make_step(model: nn.Module, optimizer: torch.optim.Optimizer, scheduler: Any,
              policy: PrecisionPolicy) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """One optimizer step: forward under autocast, backward (scaled for fp16), step, schedule."""
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
        return loss.detach()

    return step


def _peak_memory_bytes(device: torch.device) -> int:
    if device.type == "cuda":
        return int(torch.cuda.max_memory_allocated(device))
    # ru_maxrss is in KiB on Linux: the process's resident-set high-water mark.
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


def _maybe_compile(model: nn.Module, enabled: bool, mode: Optional[str]) -> tuple[nn.Module, Dict[str, Any]]:
    if not enabled:
        return model, {"requested": False, "active": False}
    try:
        return torch.compile(model, mode=mode), {"requested": True, "active": True, "mode": mode or "default"}
    except Exception as exc:  # noqa: BLE001 - any failure means: run eager, and say so
        log.warning("torch.compile failed (%s: %s); running eager", type(exc).__name__, exc)
        return model, {"requested": True, "active": False, "fallback_reason": f"{type(exc).__name__}: {exc}"}


def train(cfg: Mapping[str, Any], device: torch.device, monitor: Any = None,
          on_finish: Optional[Callable[[nn.Module, torch.optim.Optimizer], Dict[str, Any]]] = None,
          ctx: Optional[RankContext] = None, on_step: Optional[Callable[[], None]] = None) -> TrainResult:
    """Build model, data, precision, optimizer and scheduler from `cfg` (a resolved plain dict) and run.

    `monitor` (start()/stop() -> dict) samples the device during the measured window only;
    `on_finish(model, optimizer)` runs after the window (a checkpoint write, say);
    `ctx` is this process's rank: with world_size > 1 the model is wrapped in DDP (the
    process group must exist) and each rank reads its own data; `on_step()` is called after
    every step (the launched workers' hang watchdog).
    """
    ctx = ctx or RankContext()
    torch.manual_seed(cfg["seed"])
    if cfg.get("cpu_threads"):
        torch.set_num_threads(cfg["cpu_threads"])
    torch.backends.cudnn.benchmark = bool(cfg["cudnn_benchmark"])
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)

    bench_cfg, train_cfg = cfg["benchmark"], cfg["train"]
    batch_size = per_rank_batch_size(cfg, ctx.world_size)
    planned = train_cfg["epochs"] * train_cfg["steps_per_epoch"]
    if bench_cfg["measure_steps"]:
        planned = min(planned, bench_cfg["measure_steps"])
    warmup = bench_cfg["warmup_steps"]

    policy = build_precision(cfg["precision"], device)
    eager = build_model(cfg["model"]).to(device=device, memory_format=policy.memory_format)
    base_lr = effective_lr(cfg["optimizer"], cfg["scheduler"], batch_size * ctx.world_size)
    optimizer = build_optimizer(eager, cfg["optimizer"], base_lr, device)
    scheduler = build_scheduler(optimizer, cfg["scheduler"], warmup + planned, base_lr)
    batches = build_batches(dict(cfg["data"], batch_size=batch_size), device, policy.memory_format,
                            cfg["seed"] + ctx.rank, rank=ctx.rank, world_size=ctx.world_size, storage=cfg["storage"])
    wrapped = _wrap_ddp(eager, cfg["distributed"], device) if ctx.distributed else eager
    model, compile_info = _maybe_compile(wrapped, cfg["compile"], cfg.get("compile_mode"))
    model.train()

    def step_of(module: nn.Module) -> Callable:
        step = make_step(module, optimizer, scheduler, policy)
        return _calling_after(step, on_step) if on_step is not None else step

    step = step_of(model)

    if compile_info["active"]:
        # torch.compile fails lazily, at the first call: try it once, outside the window.
        try:
            step(*next(batches))
        except Exception as exc:  # noqa: BLE001
            log.warning("torch.compile failed at the first step (%s: %s); running eager", type(exc).__name__, exc)
            compile_info.update(active=False, fallback_reason=f"{type(exc).__name__}: {exc}")
            step = step_of(wrapped)

    for _ in range(warmup):
        step(*next(batches))
    clock = StepClock(device, strict_sync=bench_cfg["sync"])
    clock.sync()
    if monitor is not None:
        monitor.start()
    result = _measure(step, batches, clock, cfg, planned, batch_size, optimizer, ctx)
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
        **result,
    )


def _calling_after(step: Callable, hook: Callable[[], None]) -> Callable:
    def stepped(images: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        loss = step(images, labels)
        hook()
        return loss

    return stepped


def _wrap_ddp(model: nn.Module, dist_cfg: Mapping[str, Any], device: torch.device) -> nn.Module:
    from torch.nn.parallel import DistributedDataParallel

    return DistributedDataParallel(
        model,
        device_ids=[device.index] if device.type == "cuda" else None,
        gradient_as_bucket_view=dist_cfg["gradient_as_bucket_view"],  # no copy between grads and buckets
        static_graph=dist_cfg["static_graph"],  # same graph every step: lets DDP skip per-step bookkeeping
        bucket_cap_mb=dist_cfg["bucket_cap_mb"],
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


def _measure(step: Callable, batches: Any, clock: StepClock, cfg: Mapping[str, Any], planned: int,
             batch_size: int, optimizer: torch.optim.Optimizer, ctx: RankContext) -> Dict[str, Any]:
    bench_cfg = cfg["benchmark"]
    steps_per_epoch = cfg["train"]["steps_per_epoch"]
    log_every = bench_cfg["log_every"]
    deadline = time.perf_counter() + bench_cfg["measure_seconds"] if bench_cfg["measure_seconds"] else None
    progress = tqdm(total=planned, unit="step", file=sys.stderr, mininterval=1.0, leave=False,
                    disable=None if bench_cfg["progress"] and ctx.is_reporter else True)  # None: off when not a TTY

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
            seconds = clock.seconds_between(len(clock) - 1 - recent, len(clock) - 1)
            log.info("step %d/%d  loss %.4f  %.1f img/s (last %d steps)", done, planned,
                     loss.item(), recent * batch_size / seconds, recent)
        if timed_out:
            break
    clock.sync()
    progress.close()

    step_times = clock.step_times_ms()
    epochs, first = [], 0
    for number, (last, epoch_loss, lr) in enumerate(epoch_ends, start=1):
        seconds = clock.seconds_between(first, last)
        epochs.append(EpochRecord(epoch=number, steps=last - first, images=(last - first) * batch_size,
                                  seconds=seconds, images_per_second=(last - first) * batch_size / seconds,
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
