"""The training run in three steps: build (bench.train.build: model, data, precision, optimizer
and schedule, resumed from a checkpoint if asked), run (the warm-up, then the measured window),
collect (what the run measures after the window, and its result).

A run is `benchmark.warmup_steps` discarded steps, then the measured window, `benchmark.repeats`
times in this process after the one warm-up, each on a clock of its own (`measure`; with
repeats=1 exactly the single window bench always measured): `train.epochs` epochs of
`train.steps_per_epoch` steps (null: one pass over the dataset), cut short by
`benchmark.measure_steps`, `benchmark.measure_seconds` or a reached `train.target_accuracy`.
Throughput = images in the window / seconds of the window (evaluations and checkpoint writes
left out: bench.train.epochs). Inside the window the host never waits for the device except
every `benchmark.log_every` steps (or every step with `benchmark.sync=true`). What the run
measures besides the window (a breakdown pass, profiled steps, the FLOPs count) runs after it
(bench.runtime.profiling.after_window); benchmark.find_max_batch picks the batch before anything
else is built (bench.train.build.find_max_batch).

benchmark.breakdown: where a step's time goes, measured in a pass of its own AFTER the measured
window (the window itself stays unsynchronised, so its images/s is not slowed by the probes).

Each of `benchmark.breakdown_steps` steps is timed phase by phase, with the device synchronised
at every boundary: data (the next batch), forward (with the loss), backward, optimizer (the
step, the lr schedule and clearing the gradients). The phases of a step add up to that step, so
the shares sum to 1; the figures are means over the pass, in ms.

DDP: the time the step spends in gradient all-reduce that the backward pass does NOT hide is
measured as backward with gradient sync minus backward under `model.no_sync()` (same batch, no
all-reduce), each step doing one of each. That difference is what communication costs the step;
a comm hook would time each bucket's all-reduce, but most of that overlaps the backward
computation and costs nothing. It is reported as `breakdown_comm_ms` and taken out of
`breakdown_backward_ms`. Every rank runs the same steps in the same order (the collectives
match); rank 0's timings are reported.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import logging
import socket
import time
from functools import partial
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional

import torch
import torch.nn as nn

from bench.config import BenchConfig
from bench.data.registry import build_val_batches
from bench.errors import CheckpointError
from bench.machine.gpu_monitor import GpuFigures
from bench.rank_context import RankContext
from bench.runtime.device import peak_memory_bytes
from bench.runtime.models import count_parameters
from bench.runtime.precision import PrecisionPolicy
from bench.runtime.profiling import after_window
from bench.runtime.timing import SignalFlag, StepClock
from bench.train.build import TrainingRun, TrainStep
from bench.train.epochs import MeasuredWindow
from bench.train.mlperf_log import hyper_parameters, open_mlperf_log
from bench.train.result import BatchSearch, EpochRecord, RunExtras, TrainResult
from bench.train.resume import checkpoint_writer, claimed_checkpoints, restore_rng

log = logging.getLogger(__name__)


def train(
    config: BenchConfig,
    device: torch.device,
    monitor: Any = None,
    ctx: Optional[RankContext] = None,
    on_step: Optional[Callable[[], None]] = None,
    out_dir: Optional[Path] = None,
) -> TrainResult:
    """Build model, data, precision, optimizer and scheduler from `config` and run.

    `monitor` (start()/stop() -> GpuFigures) samples the device during the measured window only;
    with `out_dir` and storage.save_checkpoint rank 0 writes the end-of-run checkpoint after the
    window (bench.train.resume);
    `ctx` is this process's rank: with world_size > 1 the model is wrapped in DDP (the
    process group must exist) and each rank reads its own data; `on_step()` is called after
    every step; `out_dir` receives the profiler's files.
    """
    ctx = ctx or RankContext()
    mlperf = open_mlperf_log(config, out_dir, ctx.is_reporter)  # init_start: now
    with claimed_checkpoints(config, ctx, out_dir or Path.cwd()) as checkpoints:  # one writer per folder
        run = TrainingRun(config, device, ctx, on_step, checkpoints)
        first_step_at = time.perf_counter()  # time-to-accuracy counts from here
        global_batch = run.data.batch_size * ctx.world_size
        samples = getattr(run.data.batches, "facts", {}).get("dataset_size")  # train_samples
        # MLPerf's submission and hyper-parameter keys, as this run has them (eval_samples: once the val split is built)
        mlperf.run_start(hyper_parameters(run.config, global_batch, run.base_lr, run.planned, samples, str(device)))
        warm_up(run)
        if run.config.train.eval_every:  # the val batches the window's evaluations read, built after the warm-up
            data, memory_format = run.config.data, run.policy.memory_format
            run.val = build_val_batches(data, device, memory_format, ctx.rank, ctx.world_size, run.config.storage)
        run.mlperf = mlperf
        mlperf.event("eval_samples", getattr(run.val, "facts", {}).get("val_dataset_size", 0))
        window = measure(run, monitor, first_step_at)
        mlperf.run_stop(window.accuracy.reached_target if window.accuracy is not None else None)
        return collect_result(run, window, out_dir)


def warm_up(run: TrainingRun) -> None:
    """torch.compile's first call, the discarded warm-up steps, and a resumed run's state restored."""
    batches = run.data.batches
    if run.compile_info["active"]:
        # torch.compile fails lazily, at the first call: try it once, outside the window; that call is
        # the compile time (reported as compile_s, never in the window)
        began = time.perf_counter()
        try:
            run.step(*next(batches))
            if run.device.type == "cuda":
                torch.cuda.synchronize(run.device)
            run.compile_info["first_call_s"] = round(time.perf_counter() - began, 3)
        except Exception as exc:
            log.warning("torch.compile failed at the first step (%s: %s); running eager", type(exc).__name__, exc)
            run.compile_info.update(active=False, fallback_reason=f"{type(exc).__name__}: {exc}")
            run.step.model = run.wrapped  # the eager model (or its DDP wrapper)
    resumed, where = run.resumed, run.resumed_from
    if resumed and "meta" not in resumed:  # a format-1 file names no optimizer: loading it is the check
        restore(resumed, run.eager, run.optimizer, run.scheduler, run.policy, where)
    for _ in range(run.warmup):
        run.step(*next(batches))
    if resumed:  # after the warm-up, whose steps must not count: the state is the checkpoint's
        restore(resumed, run.eager, run.optimizer, run.scheduler, run.policy, where)


def measure(run: TrainingRun, monitor: Any, first_step_at: float) -> TrainResult:
    """The measured window, `benchmark.repeats` times, each on a clock of its own, pooled (`pool`), with
    the GPU monitor's figures and the window's peak memory."""
    config, checkpoints, repeats = run.config, run.checkpoints, run.config.benchmark.repeats
    if monitor is not None:
        monitor.start()
    checkpoint_on_signal = (
        checkpoints is not None and config.checkpoint.every_epochs > 0 and config.checkpoint.on_signal
    )
    windows: List[TrainResult] = []
    for repeat in range(1, repeats + 1):
        clock = StepClock(run.device, strict_sync=config.benchmark.sync)
        clock.sync()
        with SignalFlag(checkpoint_on_signal) as flag:
            window = MeasuredWindow(run, clock, first_step_at, flag).run()
        windows.append(window)
        if repeats > 1:
            seconds = window.window_seconds
            rate = window.measured_images / seconds if seconds > 0 else 0.0
            log.info(
                "repeat %d/%d: %.1f images/s (%d steps, %.2f s)", repeat, repeats, rate, window.measured_steps, seconds
            )
    pooled = pool(windows)
    pooled.gpu = monitor.stop() if monitor is not None else GpuFigures()
    pooled.peak_memory_bytes = peak_memory_bytes(run.device)  # the window's: the passes after it may allocate more
    return pooled


def pool(windows: List[TrainResult]) -> TrainResult:
    """One window's figures from several (images/s = all measured images / all measured seconds,
    step-time percentiles over every measured step); `repeat_images`/`repeat_seconds` list each
    repeat's, for the median, the spread and a confidence interval (bench.maths.confidence)."""
    last = windows[-1]  # final loss, lr and accuracy are the last repeat's
    images, seconds = [w.measured_images for w in windows], [w.window_seconds for w in windows]
    if len(windows) == 1:
        return dataclasses.replace(last, repeat_images=images, repeat_seconds=seconds)
    return dataclasses.replace(
        last,
        measured_steps=sum(w.measured_steps for w in windows),
        measured_images=sum(images),
        window_seconds=sum(seconds),
        step_times_ms=[t for w in windows for t in w.step_times_ms],
        data_wait_ms=[t for w in windows for t in w.data_wait_ms],
        epochs=[dataclasses.replace(e, repeat=number) for number, w in enumerate(windows, start=1) for e in w.epochs],
        repeat_images=images,
        repeat_seconds=seconds,
    )


def collect_result(run: TrainingRun, window: TrainResult, out_dir: Optional[Path]) -> TrainResult:
    """The passes after the window, the end-of-run checkpoint, and the run's figures added to the window's."""
    config, ctx, data = run.config, run.ctx, run.data
    extra = RunExtras(dataset=dict(getattr(data.batches, "facts", {})))  # real data: dataset_size, ...
    if config.benchmark.find_max_batch:
        extra.batch_search = BatchSearch(batch_size_requested=run.requested_batch, batch_size_found=data.batch_size)
    breakdown = None
    if config.benchmark.breakdown:  # training's own pass after the window, before the profiled steps
        ddp = run.wrapped if ctx.distributed else None
        breakdown = partial(breakdown_pass, run.step, data.batches, run.device, config.benchmark.breakdown_steps, ddp)
    extra.passes, files, interrupted = after_window(
        config, run.device, ctx, lambda: run.step(*next(data.batches)), out_dir, True, breakdown
    )
    if run.checkpoints is not None:
        extra.checkpoints = run.checkpoints.figures()
    if data.progressive:
        extra.phases = phase_figures(window.epochs)
    write = checkpoint_writer(config, out_dir, ctx) if out_dir is not None else None
    if write is not None and not interrupted:  # a signal asks for a prompt end: no checkpoint write
        extra.written = write(run.eager, run.optimizer)
    return dataclasses.replace(
        window,
        rank=ctx.rank,
        host=socket.gethostname(),
        extra=extra,
        batch_size=data.batch_size,
        warmup_steps=run.warmup,
        base_lr=run.base_lr,
        parameters=count_parameters(run.eager),
        precision=run.policy.describe(),
        compile=run.compile_info,
        fused_optimizer=bool(run.optimizer.defaults.get("fused")),
        # the sum of all weights, in one device-to-host read (not one per tensor)
        param_checksum=float(torch.stack([p.detach().double().sum() for p in run.eager.parameters()]).sum().item()),
        files=files,
        interrupted=interrupted,
    )


def restore(
    state: Dict[str, Any],
    eager: nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: Any,
    policy: PrecisionPolicy,
    where: str = "",
) -> None:
    """Every rank loads the same checkpoint in place, so DDP's replicas stay identical."""
    eager.load_state_dict(state["model"])
    # the checkpoint's position in the schedule, this run's length: train.epochs may grow on resume, and
    # OneCycleLR's state would otherwise carry the old horizon and fail past it
    horizon = {key: scheduler.__dict__[key] for key in ("total_steps", "_schedule_phases") if key in scheduler.__dict__}
    try:  # a format-1 file has no `meta` naming its optimizer: another one's state fails here
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
    except (KeyError, ValueError, RuntimeError) as exc:
        raise CheckpointError(
            f"checkpoint {where} holds another optimizer or schedule than this run's "
            f"({type(exc).__name__}: {str(exc)[:120]}): resume with the config it was written by, "
            "or start without train.resume"
        ) from None
    if horizon and state["scheduler"].get("total_steps") != horizon.get("total_steps"):
        log.warning(
            "train.resume: the checkpoint's lr schedule spans %s steps, this run's %s (train.epochs "
            "changed): the schedule continues on this run's length",
            state["scheduler"].get("total_steps"),
            horizon.get("total_steps"),
        )
    scheduler.__dict__.update(horizon)
    if policy.scaler is not None and state.get("scaler"):
        policy.scaler.load_state_dict(state["scaler"])
    restore_rng(state["rng"])


def phase_figures(epochs: List[EpochRecord]) -> Dict[str, Any]:
    """images/s of each progressive phase (consecutive epochs of one image and batch size)."""
    figures: Dict[str, Any] = {}
    phases = itertools.groupby(epochs, key=lambda e: (e.image_size, e.batch_size))
    for number, ((image_size, batch_size), group) in enumerate(phases, start=1):
        phase = list(group)
        images, seconds = sum(e.images for e in phase), sum(e.seconds for e in phase)
        figures[f"phase{number}_image_size"], figures[f"phase{number}_batch_size"] = image_size, batch_size
        figures[f"phase{number}_images_per_second"] = images / seconds if seconds > 0 else 0.0
    return figures


PHASES = ("data", "forward", "backward", "optimizer")


def breakdown_pass(
    step: TrainStep,
    batches: Iterator,
    device: torch.device,
    steps: int,
    ddp: Optional[torch.nn.Module] = None,
    stop: Callable[[], bool] = lambda: False,
) -> Dict[str, Any]:
    """The breakdown figures ({} for no steps); `ddp` (the DistributedDataParallel module) adds comm;
    `stop()` true (a signal was noted) ends the pass after the step in progress: the figures are
    then over the steps done."""
    sync = (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else (lambda: None)
    times: Dict[str, List[float]] = {phase: [] for phase in (*PHASES, "backward_unsynced")}
    step.zero_grad()  # the window's last step left its gradients
    sync()
    log.info("breakdown pass started: %d synchronised steps after the window", steps)

    def timed(phase: str, *calls: Callable[[], Any]) -> Any:
        """The last call's result; the calls' time to the device's end (ms) added to `phase`'s."""
        start = time.perf_counter()
        out = [call() for call in calls][-1]
        sync()
        times[phase].append((time.perf_counter() - start) * 1000.0)
        return out

    no_sync = getattr(ddp, "no_sync", None)  # DistributedDataParallel's
    for _ in range(steps):
        if stop():
            break
        if ddp is not None:  # a backward pass under no_sync (no all-reduce); its gradients are thrown away
            with no_sync() if no_sync is not None else contextlib.nullcontext():
                images, labels = next(batches)
                unsynced = step.forward(images, labels)
                sync()
                timed("backward_unsynced", partial(step.backward, unsynced))
            step.zero_grad()
        images, labels = timed("data", partial(next, batches))
        loss = timed("forward", partial(step.forward, images, labels))
        timed("backward", partial(step.backward, loss))
        timed("optimizer", step.update, step.zero_grad)
        if step.after is not None:
            step.after()
    return figures(times, len(times["data"]))


def figures(times: Dict[str, List[float]], steps: int) -> Dict[str, Any]:
    """Means per phase, shares of the step, and (when measured) the exposed communication."""
    if not steps or not times["data"]:
        return {}
    mean = {phase: sum(values) / len(values) for phase, values in times.items() if values}
    if "backward_unsynced" in mean:
        mean["comm"] = max(0.0, mean["backward"] - mean.pop("backward_unsynced"))
        mean["backward"] -= mean["comm"]
    total = sum(mean.values())
    out: Dict[str, Any] = {"breakdown_steps": steps, "breakdown_step_ms": total}
    for phase, ms in mean.items():
        out[f"breakdown_{phase}_ms"] = ms
        out[f"breakdown_{phase}_share"] = ms / total if total > 0 else 0.0
    return out
