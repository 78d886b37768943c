"""The measured window, `benchmark.repeats` times in this process after the one warm-up.

Each repeat is a full window (`train.epochs` x `train.steps_per_epoch` steps, capped by
benchmark.measure_steps / measure_seconds) on a clock of its own. The run's window figures pool
the repeats (images/s = all measured images / all measured seconds, step-time percentiles over
every measured step), and each repeat's images and seconds are kept, so the report can give the
median, the spread and a confidence interval (bench.maths.confidence) and write one row per
repeat. With repeats=1 this is exactly the single window bench always measured.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import List

from bench.runtime.signals import SignalFlag
from bench.runtime.timing import StepClock
from bench.train.build import TrainingRun
from bench.train.epochs import run_epochs
from bench.train.result import TrainResult

log = logging.getLogger(__name__)


def measure_windows(run: TrainingRun, first_step_at: float, checkpoint_on_signal: bool) -> TrainResult:
    config = run.config
    repeats = config.benchmark.repeats
    windows: List[TrainResult] = []
    for repeat in range(1, repeats + 1):
        clock = StepClock(run.device, strict_sync=config.benchmark.sync)
        clock.sync()
        with SignalFlag(checkpoint_on_signal) as flag:
            window = run_epochs(run, clock, first_step_at, flag)
        windows.append(window)
        if repeats > 1:
            seconds = window.window_seconds
            log.info(
                "repeat %d/%d: %.1f images/s (%d steps, %.2f s)",
                repeat,
                repeats,
                window.measured_images / seconds if seconds > 0 else 0.0,
                window.measured_steps,
                seconds,
            )
    return pool(windows)


def pool(windows: List[TrainResult]) -> TrainResult:
    """One window's figures from several; `repeat_images`/`repeat_seconds` list each repeat's."""
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
