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

Fit to measure, the GPU's side (NVML): what bench.machine.fitness.MachineWatch adds for a
rank's GPU. Every NVML call may be missing (an old driver, a GPU without the feature): a check
that cannot be read is left out, quietly; without NVML at all there is no GPU watch.

Unfit: another compute process on the GPU; thermal or hardware slowdown (incl. the power brake)
during the window; a power limit below the default; uncorrected ECC errors; a PCIe link narrower
than the card and slot allow; the rank pinned to CPUs none of which are on its GPU's NUMA node.
Notes: the software power cap reached (common at full load, and what a power-limited card does),
SM clock below SLOW_SM_CLOCK of max, MIG on, persistence mode off, a PCIe generation below max
during the window (a link steps down when idle), corrected ECC errors during the window, a rank
whose CPUs are only partly on its GPU's NUMA node.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import threading
import time
from dataclasses import dataclass, fields
from typing import Any, Collection, Dict, List, Optional, Set, Tuple

from bench.machine.fitness import Verdict, share_under
from bench.maths.stats import on_its_side


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
    entry = visible[cuda_index] if cuda_index < len(visible) else str(cuda_index)
    if entry.isdigit():
        return nvml.nvmlDeviceGetHandleByIndex(int(entry))
    return nvml.nvmlDeviceGetHandleByUUID(entry)  # GPU-xxxx or MIG-xxxx


class GpuMonitor:
    def __init__(self, cuda_index: int = 0, interval_s: float = 0.5):
        self.cuda_index, self.interval_s = cuda_index, interval_s
        self._samples: List[tuple] = []
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._nvml: Any = None  # the pynvml module, once NVML started (no type stubs)
        self._handle: Any = None  # this GPU's NVML handle
        self._energy_start: Optional[tuple] = None  # (millijoules, monotonic seconds) at start()

    def _energy_mj(self) -> Optional[tuple]:
        # pre-Volta GPUs and some drivers have no energy counter
        reading = _try(self._nvml.nvmlDeviceGetTotalEnergyConsumption, self._handle)
        return None if reading is None else (int(reading), time.monotonic())

    def start(self) -> "GpuMonitor":
        if (opened := _nvml_open(self.cuda_index)) is None:  # no GPU / no driver: nothing to sample
            return self
        self._nvml, self._handle = opened
        self._energy_start = self._energy_mj()
        self._sample()
        self._thread = threading.Thread(target=self._run, name="gpu-monitor", daemon=True)
        self._thread.start()
        return self

    def _sample(self) -> None:
        nvml, handle = self._nvml, self._handle
        with contextlib.suppress(Exception):  # a reading NVML did not give: no sample this time
            util = nvml.nvmlDeviceGetUtilizationRates(handle)
            memory = nvml.nvmlDeviceGetMemoryInfo(handle)
            power_mw = nvml.nvmlDeviceGetPowerUsage(handle)
            clock = nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_SM)
            self._samples.append((util.gpu, memory.used / 2**20, power_mw / 1000.0, clock))

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._sample()

    def stop(self) -> GpuFigures:
        figures = GpuFigures()
        if self._thread is None:
            return figures
        end = self._energy_mj() if self._energy_start is not None else None
        self._stop.set()
        self._thread.join()
        self._sample()  # the window's end: a short window has its figures too
        _try(self._nvml.nvmlShutdown)  # the figures matter more than a clean NVML shutdown
        if self._energy_start is not None and end is not None:
            joules, seconds = (end[0] - self._energy_start[0]) / 1000.0, end[1] - self._energy_start[1]
            if joules >= 0 and seconds > 0:  # else the counter wrapped or was reset by the driver
                figures.energy_joules, figures.energy_power_mean_w = joules, joules / seconds
        if self._samples:
            util, mem, power, clock = zip(*self._samples, strict=True)
            mean = lambda xs: sum(xs) / len(xs)  # noqa: E731
            figures.gpu_util_mean_pct, figures.gpu_memory_used_max_mb = mean(util), max(mem)
            figures.gpu_power_mean_w, figures.gpu_sm_clock_mean_mhz = mean(power), mean(clock)
            figures.gpu_samples = len(self._samples)
        return figures


SLOW_SM_CLOCK = 0.80  # mean SM clock over the window below this share of max is noted
# clock-event (throttle) reason bits, as nvml.h numbers them
THERMAL = {
    0x20: "software thermal slowdown",
    0x40: "hardware thermal slowdown",
    0x08: "hardware slowdown",
    0x80: "hardware power brake slowdown",
}
POWER_CAP = 0x04
ECC_UNCORRECTED, ECC_CORRECTED, ECC_VOLATILE = 1, 0, 0  # NVML_MEMORY_ERROR_TYPE_*, NVML_VOLATILE_ECC
CLOCK_SM = 1  # NVML_CLOCK_SM


def _try(call: Any, *args: Any) -> Any:
    with contextlib.suppress(Exception):  # NVMLError_NotSupported and friends: the check is left out
        return call(*args)
    return None


def cpus_of_mask(words: List[int]) -> Set[int]:
    """nvmlDeviceGetCpuAffinity's bitmask (64-bit words, lowest CPUs first) as CPU numbers."""
    return {64 * i + bit for i, word in enumerate(words) for bit in range(64) if int(word) >> bit & 1}


class GpuWatch:
    """One rank's GPU: `nvml` is the pynvml module (or a stand-in), `handle` the GPU's."""

    def __init__(self, nvml: Any, handle: Any, index: int, ranks_on_gpu: int = 1):
        self.nvml, self.handle, self.index, self.ranks_on_gpu = nvml, handle, index, ranks_on_gpu
        self.events, self.pcie_gen = 0, 0  # events: OR of every clock-event reason seen during the window
        self.clocks: List[int] = []
        self.others: Set[int] = set()
        self.own: Set[int] = set()

    def start(self, own_pids: Collection[int]) -> None:
        self.own = set(own_pids) | {os.getpid()}
        self.ecc_corrected = _try(self.nvml.nvmlDeviceGetTotalEccErrors, self.handle, ECC_CORRECTED, ECC_VOLATILE)
        self.sample()

    def sample(self) -> None:
        nvml, handle = self.nvml, self.handle
        reasons_now = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or getattr(
            nvml, "nvmlDeviceGetCurrentClocksThrottleReasons", None
        )
        if reasons_now and (reasons := _try(reasons_now, handle)) is not None:
            self.events |= int(reasons)
        if (clock := _try(nvml.nvmlDeviceGetClockInfo, handle, CLOCK_SM)) is not None:
            self.clocks.append(int(clock))
        self.pcie_gen = max(self.pcie_gen, int(_try(nvml.nvmlDeviceGetCurrPcieLinkGeneration, handle) or 0))
        if (processes := _try(nvml.nvmlDeviceGetComputeRunningProcesses, handle)) is not None:
            pids = {int(p.pid) for p in processes}
            if pids & self.own or len(pids) <= self.ranks_on_gpu:
                self.others |= pids - self.own
            else:  # none of them is ours: NVML shows another PID namespace (a container); count beyond our ranks
                self.others |= set(sorted(pids)[self.ranks_on_gpu :])

    def stop(self) -> Verdict:
        self.sample()
        verdict, nvml, handle, gpu = Verdict(), self.nvml, self.handle, f"GPU {self.index}"
        if self.others:
            verdict.reasons.append(
                f"{gpu} ran {len(self.others)} other compute process(es) (pid "
                f"{', '.join(str(p) for p in sorted(self.others))})"
            )
        if seen := [name for bit, name in THERMAL.items() if self.events & bit]:
            verdict.reasons.append(f"{gpu} throttled during the window: {', '.join(seen)}")
        if self.events & POWER_CAP:
            verdict.notes.append(f"{gpu} reached its power cap during the window")
        if (top := _try(nvml.nvmlDeviceGetMaxClockInfo, handle, CLOCK_SM)) and self.clocks:
            mean = sum(self.clocks) / len(self.clocks)
            verdict.figures.update(fit_gpu_sm_clock_ratio=round(mean / top, 3))
            if mean / top < SLOW_SM_CLOCK:
                shown = share_under(mean / top, SLOW_SM_CLOCK)
                verdict.notes.append(f"{gpu} SM clock {mean:.0f} of {top} MHz max ({shown}) during the window")
        limit = _try(nvml.nvmlDeviceGetPowerManagementLimit, handle)
        default = _try(nvml.nvmlDeviceGetPowerManagementDefaultLimit, handle)
        if limit and default and limit < default:
            shown = on_its_side(limit / 1000, default / 1000, 0)  # 699.6 W is not "700 W < default 700 W"
            verdict.reasons.append(f"{gpu} power limit {shown} W < default {default / 1000:g} W")
        if (mig := _try(nvml.nvmlDeviceGetMigMode, handle)) and int(mig[0]) == 1:
            verdict.notes.append(f"{gpu} is in MIG mode: the figures are one partition's")
        if _try(nvml.nvmlDeviceGetPersistenceMode, handle) == 0:
            verdict.notes.append(f"{gpu} persistence mode is off")
        if uncorrected := _try(nvml.nvmlDeviceGetTotalEccErrors, handle, ECC_UNCORRECTED, ECC_VOLATILE):
            verdict.reasons.append(f"{gpu} has {uncorrected} uncorrected ECC errors since the driver loaded")
        corrected = _try(nvml.nvmlDeviceGetTotalEccErrors, handle, ECC_CORRECTED, ECC_VOLATILE)
        if corrected is not None and self.ecc_corrected is not None and corrected > self.ecc_corrected:
            verdict.notes.append(f"{gpu} corrected {corrected - self.ecc_corrected} ECC errors during the window")
        width = _try(nvml.nvmlDeviceGetCurrPcieLinkWidth, handle)
        most = _try(nvml.nvmlDeviceGetMaxPcieLinkWidth, handle)
        if width and most and width < most:
            verdict.reasons.append(f"{gpu} PCIe link x{width} of x{most}")
        top_gen = _try(nvml.nvmlDeviceGetMaxPcieLinkGeneration, handle)
        if self.pcie_gen and top_gen and self.pcie_gen < top_gen:
            verdict.notes.append(f"{gpu} PCIe link gen {self.pcie_gen} of gen {top_gen} during the window")
        self._numa(verdict, gpu)
        _try(nvml.nvmlShutdown)  # NVML counts its inits: this watch's one ends here
        return verdict

    def _numa(self, verdict: Verdict, gpu: str) -> None:
        """This rank's CPUs against its GPU's NUMA-local CPUs (nvmlDeviceGetCpuAffinity)."""
        mask = _try(self.nvml.nvmlDeviceGetCpuAffinity, self.handle, ((os.cpu_count() or 1) + 63) // 64)  # 64-bit words
        if not mask or not hasattr(os, "sched_getaffinity"):
            return
        local, mine = cpus_of_mask(list(mask)), os.sched_getaffinity(0)
        if not local or local >= mine or mine == set(range(os.cpu_count() or 1)):
            return  # on the GPU's node, or not pinned at all (the scheduler may place it anywhere)
        if not local & mine:
            verdict.reasons.append(
                f"{gpu}: this rank runs on CPUs {_ranges(mine)}, none on the GPU's NUMA node (CPUs {_ranges(local)})"
            )
        else:
            verdict.notes.append(
                f"{gpu}: this rank's CPUs {_ranges(mine)} are partly off the GPU's NUMA node (CPUs {_ranges(local)})"
            )


def _ranges(cpus: Collection[int]) -> str:
    """{0,1,2,5} -> '0-2,5': runs of consecutive CPUs, each a group of equal (cpu - its place)."""
    runs = [[cpu for _, cpu in run] for _, run in itertools.groupby(enumerate(sorted(cpus)), lambda at: at[1] - at[0])]
    return ",".join(f"{run[0]}-{run[-1]}" if len(run) > 1 else f"{run[0]}" for run in runs)


def _nvml_open(cuda_index: int, nvml: Any = None) -> Optional[Tuple[Any, Any]]:
    """(the pynvml module or a stand-in, this GPU's handle) once NVML started; None without NVML."""
    with contextlib.suppress(Exception):  # NVMLError_LibraryNotFound and friends: no GPU, no driver
        if nvml is None:
            import pynvml

            nvml = pynvml
        nvml.nvmlInit()
        return nvml, nvml_handle(nvml, cuda_index)
    return None


def gpu_watch(cuda_index: int, ranks_on_gpu: int = 1, nvml: Any = None) -> Optional[GpuWatch]:
    """The watch of this rank's GPU, or None without NVML (no driver, no GPU)."""
    opened = _nvml_open(cuda_index, nvml)
    return GpuWatch(*opened, cuda_index, ranks_on_gpu) if opened else None
