"""Background NVML sampling of GPU utilisation, memory, power and SM clock during the window,
and the energy the GPU used in it.

Only runs when a GPU and NVML exist; otherwise start() and stop() do nothing and the
summary is empty. One sample is taken at start() and one at stop(), the rest every
`interval_s` in between, so a window shorter than the interval still has utilisation and
power. The sampling thread never touches CUDA, so it cannot perturb timing
beyond one NVML call per interval. Energy is NVML's total-energy counter (millijoules since
the driver loaded; Volta and newer) read at start() and at stop(): energy_joules, and
energy_power_mean_w = those joules / the seconds between the two reads. A GPU or driver
without the counter gives no energy figures (absent, not 0).
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from dataclasses import dataclass, fields
from typing import Any, Dict, List, Optional


@dataclass
class GpuFigures:
    """What the monitor measured in the window (all None: no GPU, no NVML, or no samples); the
    energy pair only where the driver has the counter."""

    gpu_util_mean_pct: Optional[float] = None
    gpu_memory_used_max_mb: Optional[float] = None
    gpu_power_mean_w: Optional[float] = None
    gpu_sm_clock_mean_mhz: Optional[float] = None
    gpu_samples: Optional[int] = None
    energy_joules: Optional[float] = None
    energy_power_mean_w: Optional[float] = None

    def figures(self) -> Dict[str, Any]:
        """The measured figures by name, in field order (the radix_metrics keys); none unmeasured."""
        return {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not None}


def nvml_handle(nvml: Any, cuda_index: int) -> Any:
    """NVML numbers all GPUs; CUDA numbers the visible ones: map through CUDA_VISIBLE_DEVICES."""
    visible = [v.strip() for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
    if cuda_index < len(visible):
        entry = visible[cuda_index]
        if entry.isdigit():
            return nvml.nvmlDeviceGetHandleByIndex(int(entry))
        return nvml.nvmlDeviceGetHandleByUUID(entry)  # GPU-xxxx or MIG-xxxx
    return nvml.nvmlDeviceGetHandleByIndex(cuda_index)


class GpuMonitor:
    def __init__(self, cuda_index: int = 0, interval_s: float = 0.5):
        self.cuda_index = cuda_index
        self.interval_s = interval_s
        self._samples: List[tuple] = []
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._nvml: Any = None  # the pynvml module, once NVML started (no type stubs)
        self._handle: Any = None  # this GPU's NVML handle
        self._energy_start: Optional[tuple] = None  # (millijoules, monotonic seconds) at start()

    def _energy_mj(self) -> Optional[tuple]:
        try:
            return int(self._nvml.nvmlDeviceGetTotalEnergyConsumption(self._handle)), time.monotonic()
        except Exception:  # pre-Volta GPUs and some drivers have no energy counter
            return None

    def start(self) -> "GpuMonitor":
        try:
            import pynvml

            pynvml.nvmlInit()
            self._handle = nvml_handle(pynvml, self.cuda_index)
            self._nvml = pynvml
        except Exception:  # no GPU / no driver: nothing to sample
            return self
        self._energy_start = self._energy_mj()
        self._sample()
        self._thread = threading.Thread(target=self._run, name="gpu-monitor", daemon=True)
        self._thread.start()
        return self

    def _sample(self) -> None:
        nvml, handle = self._nvml, self._handle
        try:
            util = nvml.nvmlDeviceGetUtilizationRates(handle)
            memory = nvml.nvmlDeviceGetMemoryInfo(handle)
            power_mw = nvml.nvmlDeviceGetPowerUsage(handle)
            clock = nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_SM)
        except Exception:
            return
        self._samples.append((util.gpu, memory.used / 2**20, power_mw / 1000.0, clock))

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._sample()

    def stop(self) -> GpuFigures:
        if self._thread is None:
            return GpuFigures()
        energy_end = self._energy_mj() if self._energy_start is not None else None
        self._stop.set()
        self._thread.join()
        self._sample()  # the window's end: a short window has its figures too
        with contextlib.suppress(Exception):  # the figures matter more than a clean NVML shutdown
            self._nvml.nvmlShutdown()
        energy = self._energy_figures(energy_end)
        if not self._samples:
            return energy
        util, mem, power, clock = zip(*self._samples, strict=True)
        mean = lambda xs: sum(xs) / len(xs)  # noqa: E731
        energy.gpu_util_mean_pct, energy.gpu_memory_used_max_mb = mean(util), max(mem)
        energy.gpu_power_mean_w, energy.gpu_sm_clock_mean_mhz = mean(power), mean(clock)
        energy.gpu_samples = len(self._samples)
        return energy

    def _energy_figures(self, end: Optional[tuple]) -> GpuFigures:
        if self._energy_start is None or end is None:
            return GpuFigures()
        joules, seconds = (end[0] - self._energy_start[0]) / 1000.0, end[1] - self._energy_start[1]
        if joules < 0 or seconds <= 0:  # the counter wrapped or was reset by the driver
            return GpuFigures()
        return GpuFigures(energy_joules=joules, energy_power_mean_w=joules / seconds)
