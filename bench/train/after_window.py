"""What runs after the measured window, outside it, so none of it changes the window's figures:
the breakdown pass (benchmark.breakdown), the profiled steps (profile.enabled), and the FLOPs
count behind gflops_per_image and MFU (rank 0, once per run).

A SIGTERM / Ctrl-C during the passes of a single-process run is noted, not raised: the pass ends
after the step in progress and the run reports the window it already measured, then ends KILLED
(bench.app). A DDP rank keeps the old way (the signal ends the job): its ranks must run the same
steps, and each would see the signal at a different one."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Tuple

import torch

from bench.config import BenchConfig
from bench.rank_context import RankContext
from bench.runtime.flops import flops_per_image
from bench.runtime.profiling import profile_steps
from bench.runtime.signals import SignalFlag
from bench.train.breakdown import breakdown_pass
from bench.train.step import TrainStep


def optimizer_steps(config: BenchConfig) -> int:
    """Optimizer steps these passes take (the lr schedule must span them: OneCycleLR refuses to go past its end)."""
    return (config.benchmark.breakdown_steps if config.benchmark.breakdown else 0) + (
        config.profile.steps + 1 if config.profile.enabled else 0
    )


def after_window(
    config: BenchConfig,
    device: torch.device,
    ctx: RankContext,
    step: TrainStep,
    batches: Iterator,
    ddp: Optional[torch.nn.Module],
    out_dir: Optional[Path],
) -> Tuple[Dict[str, Any], List[str], Optional[str]]:
    """(figures, files written, the signal that cut the passes short or None) of the passes this run asked for."""
    figures: Dict[str, Any] = {}
    files: List[Path] = []
    with SignalFlag(not ctx.distributed and (config.benchmark.breakdown or config.profile.enabled)) as flag:
        stop = lambda: flag.signum is not None  # noqa: E731
        if config.benchmark.breakdown:
            figures.update(breakdown_pass(step, batches, device, config.benchmark.breakdown_steps, ddp, stop=stop))
        if config.profile.enabled and not stop():
            files = profile_steps(
                lambda: step(*next(batches)),
                config.profile.steps,
                device,
                out_dir or Path.cwd(),
                record=ctx.is_reporter,
                row_limit=config.profile.row_limit,
                stop=stop,
            )
    if ctx.is_reporter:
        figures.update(flops_per_image(config.model, config.data.image_size))
    interrupted = signal.Signals(flag.signum).name if flag.signum is not None else None
    return figures, [str(path) for path in files], interrupted
