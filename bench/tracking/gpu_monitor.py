"""Background NVML sampling of GPU utilisation, memory, power and SM clock during the window.

Only runs when a GPU and NVML exist; otherwise start() and stop() do nothing and the
summary is empty. The sampling thread never touches CUDA, so it cannot perturb timing
beyond one NVML call per interval.
"""

from __future__ import annotations

import os
import threading
from typing import Any, Dict, List, Optional


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
        self._nvml = None

    def start(self) -> "GpuMonitor":
        try:
            import pynvml

            pynvml.nvmlInit()
            self._handle = nvml_handle(pynvml, self.cuda_index)
            self._nvml = pynvml
        except Exception:  # noqa: BLE001 - no GPU / no driver: nothing to sample
            return self
        self._thread = threading.Thread(target=self._run, name="gpu-monitor", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        nvml, handle = self._nvml, self._handle
        while not self._stop.wait(self.interval_s):
            try:
                util = nvml.nvmlDeviceGetUtilizationRates(handle)
                memory = nvml.nvmlDeviceGetMemoryInfo(handle)
                power_mw = nvml.nvmlDeviceGetPowerUsage(handle)
                clock = nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_SM)
            except Exception:  # noqa: BLE001
                continue
            self._samples.append((util.gpu, memory.used / 2**20, power_mw / 1000.0, clock))

    def stop(self) -> Dict[str, float]:
        if self._thread is None:
            return {}
        self._stop.set()
        self._thread.join()
        try:
            self._nvml.nvmlShutdown()
        except Exception:  # noqa: BLE001
            pass
        if not self._samples:
            return {}
        util, mem, power, clock = zip(*self._samples)
        mean = lambda xs: sum(xs) / len(xs)  # noqa: E731
        return {
            "gpu_util_mean_pct": mean(util),
            "gpu_memory_used_max_mb": max(mem),
            "gpu_power_mean_w": mean(power),
            "gpu_sm_clock_mean_mhz": mean(clock),
            "gpu_samples": len(self._samples),
        }
