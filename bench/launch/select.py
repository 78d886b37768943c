"""The one place that decides how a run's ranks start (see bench.launch for the three ways)."""

from __future__ import annotations

from bench.config import BenchConfig
from bench.launch.launchers import Elastic, InProcess, Joined, Launcher
from bench.rank_context import outside_launcher_context


def select_launcher(config: BenchConfig, has_ranks: bool, in_sweep: bool) -> Launcher:
    if not has_ranks:
        return InProcess()
    joined = outside_launcher_context(config.distributed)
    if joined is not None:
        return Joined(joined)
    if in_sweep or config.distributed.world_size > 1:
        return Elastic(config.distributed)
    return InProcess()
