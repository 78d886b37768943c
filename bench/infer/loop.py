"""The inference run: the model runtime's model, precision policy, compile and data builders
(bench.runtime, shared with training), then forward passes only (model.eval(),
torch.inference_mode, autocast as the precision says).

A run is `benchmark.warmup_steps` discarded batches, then the measured window of
`train.epochs` x `train.steps_per_epoch` batches (null: a pass over a real dataset), capped by
benchmark.measure_steps / measure_seconds, `benchmark.repeats` times. images/s = images of the
window / its seconds. Each batch ends with a mark on the step clock (bench.runtime.timing): a CUDA
event on a GPU, so the host never waits inside the window and a batch's latency is the device
time between two completions; with benchmark.sync=true every batch is synchronised and the
latency includes the host's round trip. Profiled batches and the FLOPs count come after the
window (profile.enabled).
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any, Callable, Optional

import torch

from bench.config import BenchConfig
from bench.infer.result import InferResult
from bench.machine.gpu_monitor import GpuFigures
from bench.rank_context import RankContext
from bench.runtime.device import peak_memory_bytes, prepare_process
from bench.runtime.epoch_data import EpochData
from bench.runtime.models import build_model, count_parameters, maybe_compile
from bench.runtime.precision import build_precision
from bench.runtime.profiling import after_window
from bench.runtime.timing import StepClock

log = logging.getLogger(__name__)


def infer(
    config: BenchConfig,
    device: torch.device,
    monitor: Any = None,
    ctx: Optional[RankContext] = None,
    on_step: Optional[Callable[[], None]] = None,
    out_dir: Optional[Path] = None,
) -> InferResult:
    ctx, bench = ctx or RankContext(), config.benchmark
    prepare_process(config, device, ctx)  # one process: its threads are cpu_threads, as given
    policy = build_precision(config.precision, device)
    # Module.to takes device and memory_format together at runtime; its stub has them in separate overloads
    eager = build_model(config.model).to(device=device, memory_format=policy.memory_format).eval()  # type: ignore[call-overload]
    model, compile_info = maybe_compile(eager, config.compile, config.compile_mode, device)
    data = EpochData(config, device, policy.memory_format, ctx)
    planned = min(data.planned(0), bench.measure_steps or data.planned(0))
    batches = data.batches

    def forward(images: torch.Tensor) -> torch.Tensor:
        with torch.inference_mode(), policy.autocast():
            return model(images)

    if compile_info["active"]:  # torch.compile fails lazily: try it once, outside the window
        try:
            forward(next(batches)[0])
        except Exception as exc:
            log.warning("torch.compile failed at the first batch (%s: %s); running eager", type(exc).__name__, exc)
            compile_info.update(active=False, fallback_reason=f"{type(exc).__name__}: {exc}")
            model = eager
    for _ in range(bench.warmup_steps):
        forward(next(batches)[0])
    result = InferResult(
        batch_size=data.batch_size,
        warmup_steps=bench.warmup_steps,
        parameters=count_parameters(eager),
        precision=policy.describe(),
        compile=compile_info,
    )
    if monitor is not None:
        monitor.start()
    # each measured window is added to `result`: `planned` batches, or fewer when benchmark.measure_seconds runs out
    for _ in range(bench.repeats):
        clock = StepClock(device, strict_sync=bench.sync)
        deadline = time.perf_counter() + bench.measure_seconds if bench.measure_seconds else None
        clock.sync()
        clock.mark()  # the window opens here
        done = 0
        while done < planned:
            t0 = time.perf_counter()
            images, _ = next(batches)
            result.data_wait_ms.append((time.perf_counter() - t0) * 1000.0)
            forward(images)
            clock.mark()
            done += 1
            if on_step is not None:
                on_step()
            if deadline is not None and time.perf_counter() >= deadline:
                break
            if done % bench.log_every == 0:
                clock.sync()  # a log interval: the one place the host waits for the device
                recent = clock.seconds_between(len(clock) - 1 - bench.log_every, len(clock) - 1)
                rate = bench.log_every * config.data.batch_size / recent
                log.info("batch %d/%d  %.1f img/s (last %d batches)", done, planned, rate, bench.log_every)
        clock.sync()
        seconds = clock.seconds_between(0, len(clock) - 1)
        result.measured_steps += done
        result.window_seconds += seconds
        result.latency_ms += clock.step_times_ms()
        result.repeat_images.append(done * result.batch_size)
        result.repeat_seconds.append(seconds)
    result.gpu = monitor.stop() if monitor is not None else GpuFigures()
    result.peak_memory_bytes = peak_memory_bytes(device)
    # a signal ends the profiled batches; the window is reported
    passes, result.files, result.interrupted = after_window(
        config, device, ctx, lambda: forward(next(batches)[0]), out_dir, False
    )
    result.extra = {**getattr(batches, "facts", {}), **passes}
    return result
