"""How a run's processes start and cooperate: rank context, logs, process group, the hang
watchdog, the elastic launcher and its reaper.

`select_launcher` is the one place that decides how a run's ranks start:
- in this process: a one-process run (distributed=single, or ddp with one process outside a
  sweep), and every scenario that has no ranks (the storage benchmark);
- elastic workers: nproc_per_node x nnodes > 1, and every job of a multirun (so each
  configuration runs in processes of its own: fresh allocator, fresh cuDNN autotune);
- joined: under torchrun / Slurm / Kubernetes (RANK, WORLD_SIZE, LOCAL_RANK set).
"""

from __future__ import annotations

from bench.config import BenchConfig
from bench.launch.context import outside_launcher_context
from bench.launch.launchers import Elastic, InProcess, Joined, Launcher


def select_launcher(config: BenchConfig, has_ranks: bool, in_sweep: bool) -> Launcher:
    if not has_ranks:
        return InProcess()
    joined = outside_launcher_context(config.distributed)
    if joined is not None:
        return Joined(joined)
    if in_sweep or config.distributed.world_size > 1:
        return Elastic(config.distributed)
    return InProcess()
