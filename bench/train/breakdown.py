"""benchmark.breakdown: where a step's time goes, measured in a pass of its own AFTER the measured
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
import itertools
import logging
import time
from typing import Any, Callable, Dict, Iterator, List, Optional

import torch

from bench.train.step import TrainStep

log = logging.getLogger(__name__)

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
    for _ in range(steps):
        if stop():
            break
        if ddp is not None:
            times["backward_unsynced"].append(_backward_without_sync(step, ddp, next(batches), sync))
        marks = [time.perf_counter()]
        images, labels = next(batches)
        sync()
        marks.append(time.perf_counter())
        loss = step.forward(images, labels)
        sync()
        marks.append(time.perf_counter())
        step.backward(loss)
        sync()
        marks.append(time.perf_counter())
        step.update()
        step.zero_grad()
        sync()
        marks.append(time.perf_counter())
        for phase, (start, end) in zip(PHASES, itertools.pairwise(marks), strict=True):
            times[phase].append((end - start) * 1000.0)
        if step.after is not None:
            step.after()
    return figures(times, len(times["data"]))


def _backward_without_sync(step: TrainStep, ddp: torch.nn.Module, batch: Any, sync: Any) -> float:
    """ms of a backward pass under no_sync (no all-reduce); the gradients are thrown away."""
    images, labels = batch
    no_sync = getattr(ddp, "no_sync", None)  # DistributedDataParallel's
    with no_sync() if no_sync is not None else contextlib.nullcontext():
        loss = step.forward(images, labels)
        sync()
        start = time.perf_counter()
        step.backward(loss)
        sync()
        elapsed = (time.perf_counter() - start) * 1000.0
    step.zero_grad()
    return elapsed


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
