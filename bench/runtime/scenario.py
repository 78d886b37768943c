"""What a scenario that runs a model (training, inference) is beyond its loop: the checks before
the run (bench.runtime.preflight), one rank's run around the scenario's loop (the device, the CPU
split, the process group, the window's monitor, every rank's result gathered to rank 0) and the
out-of-memory line. The training and the inference scenario classes build on it and add check,
run_name, measure and report_class."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Callable, ClassVar, Optional, Tuple

from bench.config import BenchConfig
from bench.rank_context import RankContext
from bench.runtime.reporting import ModelOutcome, ModelResult
from bench.scenario_base import BaseScenario

log = logging.getLogger("bench")


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

    def measure(
        self, config: BenchConfig, device: Any, ctx: RankContext, monitor: Any, out_dir: Path, heartbeat: Any
    ) -> ModelResult:
        """The scenario's loop on this rank: `monitor` (start()/stop()) around its measured window."""
        raise NotImplementedError

    def run_rank(
        self, config: BenchConfig, ctx: RankContext, out_dir: Path, heartbeat: Optional[Callable[[], None]] = None
    ) -> Optional[ModelOutcome]:
        """Run the loop as one rank, on the CPU with the threads and loader workers the user left unset
        chosen to fit the cores (bench.runtime.device.fit_cpu, said once by rank 0); rank 0 returns
        what every rank measured, each with its fit-to-measure verdict, the others None."""
        import torch

        from bench.launch.process_group import all_gather, destroy_process_group, init_process_group
        from bench.runtime.device import fit_cpu, resolve_device
        from bench.runtime.fit_watch import WindowMonitor

        device = resolve_device(config.allow_cpu)
        config, chosen = fit_cpu(config, device.type)
        if chosen and ctx.is_reporter:
            log.info("%s", chosen)
        monitor = WindowMonitor(config, device, ctx)
        if ctx.distributed:
            init_process_group(config.distributed, ctx, device)
        try:
            result = self.measure(config, device, ctx, monitor, out_dir, heartbeat)
            result.fit = monitor.verdict
            ranks = all_gather(result, ctx)
        finally:
            if monitor.verdict is None and monitor.watch._thread is not None:  # a window an exception cut short:
                monitor.stop()  # its samplers end with it (Ctrl-C in bench.api.run left them sampling)
            destroy_process_group()
        name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
        return ModelOutcome(ranks, device.type, name) if ctx.is_reporter else None

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
