"""What runs after the measured window, outside it, so none of it changes the window's figures:
the breakdown pass (benchmark.breakdown), the profiled steps (profile.enabled), and the FLOPs
count behind gflops_per_image and MFU (rank 0, once per run)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Tuple

import torch

from bench.config import BenchConfig
from bench.launch.context import RankContext
from bench.train.breakdown import breakdown_pass
from bench.train.flops import flops_per_image
from bench.train.profiling import profile_steps
from bench.train.step import TrainStep


def optimizer_steps(config: BenchConfig) -> int:
    """Optimizer steps these passes take (the lr schedule must span them: OneCycleLR refuses to go past its end)."""
    return (config.benchmark.breakdown_steps if config.benchmark.breakdown else 0) + \
        (config.profile.steps + 1 if config.profile.enabled else 0)


def after_window(config: BenchConfig, device: torch.device, ctx: RankContext, step: TrainStep, batches: Iterator,
                 ddp: Optional[torch.nn.Module], out_dir: Optional[Path]) -> Tuple[Dict[str, Any], List[str]]:
    """(figures, files written) of the passes this run asked for."""
    figures: Dict[str, Any] = {}
    files: List[Path] = []
    if config.benchmark.breakdown:
        figures.update(breakdown_pass(step, batches, device, config.benchmark.breakdown_steps, ddp))
    if config.profile.enabled:
        files = profile_steps(lambda: step(*next(batches)), config.profile.steps, device, out_dir or Path.cwd(),
                              record=ctx.is_reporter, row_limit=config.profile.row_limit)
    if ctx.is_reporter:
        figures.update(flops_per_image(config.model, config.data.image_size))
    return figures, [str(path) for path in files]
