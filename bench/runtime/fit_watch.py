"""Fit to measure, for a run of a model (training, inference): the watch the loops start before the
measured window and stop after it (bench.machine.fitness, .gpu_monitor), the refusal before a run
with benchmark.require_fit=true, and the verdict's place in the record, the MLflow run and the
run's status. Torch is imported only when a watch starts.

benchmark.require_fit=true: before the run (preflight, no MLflow run yet) an oversubscribed
config is refused at once, and the machine is probed until other processes leave it quiet, for
at most benchmark.require_fit_wait_s, else the run is refused in one line (exit 2). A window
that was unfit all the same ends the run FAILED (exit 1), its figures reported.
"""

from __future__ import annotations

import os
from typing import Any, Dict, List, Optional, Sequence, Tuple

from bench.config import BenchConfig
from bench.errors import ConfigProblem
from bench.machine.fitness import MachineWatch, Verdict, affinity, oversubscription, usable_cores, wait_until_quiet
from bench.machine.gpu_monitor import GpuFigures, GpuMonitor, gpu_watch
from bench.rank_context import RankContext
from bench.results import FitFigures


def loader_workers(config: BenchConfig, ranks: int) -> int:
    """Loader worker processes per rank (bench.data.loader.resolve_workers' rule)."""
    data = config.data
    if data.synthetic or data.num_workers == 0:
        return 0
    if data.num_workers is not None:
        return int(data.num_workers)
    return max(1, min(8, len(affinity()) // max(1, ranks)))


def demand(config: BenchConfig, device_type: str, ranks: int, threads: int) -> Tuple[int, int, int, str]:
    """(threads, ranks on this host, workers per rank, what a thread is): on a GPU a rank's CPU work
    is its launching thread (torch's intra-op pool idles), on a CPU every torch thread computes."""
    cuda, workers = device_type == "cuda", loader_workers(config, ranks)
    return (1, ranks, workers, "launching thread") if cuda else (threads, ranks, workers, "torch thread")


class WindowMonitor:
    """What a loop starts before the window and stops after it: rank 0's GPU sampler (NVML sampling
    and energy of its GPU, bench.machine.gpu_monitor; stop() returns its figures) and every rank's
    fitness watch (`verdict` afterwards; None when the window never ran)."""

    def __init__(self, config: BenchConfig, device: Any, ctx: RankContext):
        self.config, self.device, self.ctx = config, device, ctx
        cuda = device.type == "cuda"
        self.gpu_monitor = GpuMonitor(device.index or 0) if cuda and ctx.is_reporter else None
        # the CPU is judged once, by rank 0
        self.watch = MachineWatch(gpu=gpu_watch(device.index or 0) if cuda else None, cpu=ctx.is_reporter)
        self.verdict: Optional[Verdict] = None

    def start(self) -> "WindowMonitor":
        import torch

        ranks = int(os.environ.get("LOCAL_WORLD_SIZE", "1")) if self.ctx.distributed else 1
        self.watch.demand = demand(self.config, self.device.type, ranks, torch.get_num_threads())
        self.watch.start()
        if self.gpu_monitor is not None:
            self.gpu_monitor.start()
        return self

    def stop(self) -> GpuFigures:
        figures = self.gpu_monitor.stop() if self.gpu_monitor is not None else GpuFigures()
        self.verdict = self.watch.stop()
        return figures


def check_quiet(config: BenchConfig, device: Any) -> None:
    """benchmark.require_fit=true: refuse an oversubscribed config; wait, bounded, for a quiet machine."""
    bench = config.benchmark
    if not bench.require_fit:
        return
    import torch

    from bench.runtime.device import fit_cpu

    config, _ = fit_cpu(config, device.type)  # the threads and workers the run will have
    ranks = config.distributed.nproc_per_node
    threads_, ranks_, workers, word = demand(config, device.type, ranks, config.cpu_threads or torch.get_num_threads())
    _, reason = oversubscription(threads_, ranks_, workers, usable_cores(affinity()), word)
    if reason:
        raise ConfigProblem(
            f"benchmark.require_fit=true and {reason}: lower cpu_threads, data.num_workers or "
            "distributed.nproc_per_node, or run without benchmark.require_fit",
            "benchmark.require_fit",
            True,
        )
    verdict = wait_until_quiet(bench.require_fit_wait_s)
    if not verdict.fit:
        raise ConfigProblem(
            f"benchmark.require_fit=true and the machine was not fit to measure after "
            f"benchmark.require_fit_wait_s={bench.require_fit_wait_s:g}: {'; '.join(verdict.reasons)}; "
            "stop what runs beside it, or raise benchmark.require_fit_wait_s",
            "benchmark.require_fit",
            True,
        )


def fit_figures(fit: Optional[Verdict], others: Sequence[Optional[Verdict]] = ()) -> FitFigures:
    """The record's fit_* fields from rank 0's verdict and the other ranks' (their GPUs'); none
    (all None) when no window was watched."""
    if fit is None:
        return FitFigures()
    verdict = Verdict.from_dict(fit.as_dict())  # a copy: the ranks' own verdicts stay as they were
    for other in others:
        if other is not None:
            verdict.add(other)
    return FitFigures.of(verdict.as_dict())


def fit_tags(fit: FitFigures) -> Dict[str, Any]:
    """The MLflow tags: bench.fit_to_measure (true/false) and its reasons and notes. (Not params:
    params are the config, and bench.compare matches configurations on them.)"""
    if fit.fit_to_measure is None:
        return {}
    return {
        "bench.fit_to_measure": str(bool(fit.fit_to_measure)).lower(),
        "bench.fit_reasons": fit.fit_reasons or "",
        "bench.fit_notes": fit.fit_notes or "",
    }


def fit_problems(fit: FitFigures, require_fit: bool) -> List[str]:
    """benchmark.require_fit=true and an unfit window: the run ends FAILED, its figures stand."""
    if require_fit and fit.fit_to_measure is False:
        return [f"the machine was not fit to measure (benchmark.require_fit=true): {fit.fit_reasons}"]
    return []
