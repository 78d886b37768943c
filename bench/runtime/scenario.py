"""What a scenario that runs a model (training, inference) is beyond its loop: the checks before
the run (bench.runtime.preflight), the out-of-memory line, and rank 0's GPU monitor. The training and
the inference scenario classes build on it and add check, run_name, run_rank and report_class."""

from __future__ import annotations

import logging
from typing import Any, ClassVar, Optional, Tuple

from bench.config import BenchConfig
from bench.rank_context import RankContext
from bench.scenario_base import BaseScenario


class ModelScenario(BaseScenario):
    loop_modules: ClassVar[Tuple[str, ...]] = ()  # the scenario's own modules a rank runs

    def preload(self, config: BenchConfig) -> Tuple[str, ...]:
        """What the elastic launcher's forkserver imports once, so workers start in well under a
        second: torch, the loop, and torchvision only for a torchvision model (its import is ~1.5
        CPU-s that a bench-own model's every launch would pay for nothing)."""
        from bench.runtime.models import uses_torchvision

        return ("torch", *(("torchvision",) if uses_torchvision(config.model) else ()), *self.loop_modules)

    def preflight(self, config: BenchConfig) -> None:
        """The dataset, the device, the model, the machine: bench.runtime.preflight."""
        from bench.runtime.preflight import check_model_run

        check_model_run(config)  # the dataset first: a missing one is refused before torch loads

    def explain(self, exc: BaseException, config: BenchConfig) -> Optional[str]:
        """A known failure in one line: out of memory names the batch size, the device and what to try."""
        text = str(exc)
        if type(exc).__name__ == "OutOfMemoryError" or "out of memory" in text.lower() or "OutOfMemoryError" in text:
            import torch

            batch, cuda = config.data.batch_size, torch.cuda.is_available()
            return (
                f"out of memory at data.batch_size={batch} on {torch.cuda.get_device_name() if cuda else 'cpu'}: "
                f"try data.batch_size={max(1, batch // 2)}"
            )
        return None


def rank_device(config: BenchConfig, ctx: RankContext) -> Tuple[Any, BenchConfig]:
    """This rank's device and the config it runs: on the CPU with the threads and loader workers
    the user left unset chosen to fit the cores (bench.runtime.device.fit_cpu), said once by rank 0."""
    from bench.runtime.device import fit_cpu, resolve_device

    device = resolve_device(config.allow_cpu)
    config, chosen = fit_cpu(config, device.type)
    if chosen and ctx.is_reporter:
        logging.getLogger("bench").info("%s", chosen)
    return device, config


def window_monitor(config: BenchConfig, device: Any, ctx: RankContext) -> Any:
    """What the loop starts before the window and stops after it: rank 0's GPU monitor and every
    rank's fit-to-measure watch (bench.runtime.fit_watch); its fit() is the verdict afterwards."""
    from bench.runtime.fit_watch import WindowMonitor

    return WindowMonitor(config, device, ctx, gpu_monitor(device, ctx))


def gpu_monitor(device: Any, ctx: RankContext) -> Any:
    """NVML sampling and energy of rank 0's GPU during the window (None on a CPU and on other ranks)."""
    if device.type != "cuda" or not ctx.is_reporter:
        return None
    from bench.machine.gpu_monitor import GpuMonitor

    return GpuMonitor(device.index or 0)
