"""Report pieces the model scenarios (training, inference) share: the record group of how the model
ran (Execution: precision policy, compile, device, AU), the efficiency figures, the profiler's
files and repeats.csv, the file of benchmark.repeats' windows."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Optional, Sequence

from bench.results import Record, read_column, write_csv
from bench.runtime.malloc import in_effect as malloc_in_effect
from bench.runtime.peaks import utilisation

if TYPE_CHECKING:
    from bench.config import BenchConfig

PROFILE_FILES = ("trace_rank0.json", "profile_top_ops.txt")  # bench.runtime.profiling writes them
AU_THRESHOLD = 0.90  # accelerator utilization below which a run is input-bound (MLPerf Storage's ResNet-50 bar)
# benchmark.repeats > 1: a row per measured window, and its MLflow series (step = repeat)
REPEATS_FILE, REPEATS_METRIC = "repeats.csv", "repeat_images_per_second"


@dataclass(kw_only=True)
class Execution(Record):
    """How a model ran, in a training or inference record (nested INLINE, after the model's own
    fields): the precision policy (bench.runtime.precision's describe()), torch.compile, cuDNN
    autotuning, the CPU allocator, the device, and whether the input pipeline kept it fed."""

    precision: Optional[str] = None  # the precision policy
    autocast_dtype: Optional[str] = None
    grad_scaler: Optional[bool] = None
    tf32: Optional[bool] = None
    channels_last: Optional[bool] = None
    compile: bool
    cudnn_benchmark: bool
    cpu_malloc_reuse: Optional[bool] = None  # on a CPU: freed memory kept for reuse (bench.runtime.malloc)
    device: str  # cpu | cuda
    device_name: str
    # accelerator utilization: the share of the measured window not spent waiting for data (compute
    # time / wall time, as MLPerf Storage defines AU); input_bound when au < AU_THRESHOLD
    au: float
    input_bound: bool
    compile_fallback: Optional[str] = None  # why torch.compile fell back to eager
    compile_s: Optional[float] = None  # torch.compile's first call (the compile), outside the window (training)

    @classmethod
    def of(
        cls,
        config: "BenchConfig",
        precision: Mapping[str, Any],
        compile_info: Mapping[str, Any],
        device: str,
        device_name: str,
        data_wait_fraction: float,
    ) -> "Execution":
        """From the run's precision policy (describe()), its compile info and the window's data wait."""
        au = min(1.0, max(0.0, 1.0 - data_wait_fraction))
        return cls(
            **precision,
            compile=bool(compile_info.get("active")),
            cudnn_benchmark=bool(config.cudnn_benchmark),
            cpu_malloc_reuse=malloc_in_effect(config.cpu_malloc_reuse, device),
            device=device,
            device_name=device_name,
            au=au,
            input_bound=au < AU_THRESHOLD,
            compile_fallback=compile_info.get("fallback_reason") or None,
            compile_s=compile_info.get("first_call_s"),
        )


def efficiency(
    run: Execution, gflops: Optional[float], images_per_second: float, world_size: int, images: int, energy: Any
) -> Dict[str, Any]:
    """Achieved TFLOP/s and MFU (bench.runtime.peaks; `gflops` per image, None: none), and images per
    joule (`energy`: NVML's joules of rank 0's GPU over the window, `images` rank 0's)."""
    dtype, tf32 = run.autocast_dtype or "none", bool(run.tf32)
    figures = dict(utilisation(gflops, images_per_second, world_size, run.device, run.device_name, dtype, tf32))
    if energy:
        figures["images_per_joule"] = images / energy
    return figures


def write_repeats(out_dir: Path, images: Sequence[int], seconds: Sequence[float], rates: Sequence[float]) -> Path:
    """repeats.csv: a row per measured window (rates: the job's images/s, all ranks)."""
    # training's rates count the windows every rank measured, which may be fewer than rank 0's
    windows = zip(images, seconds, rates, strict=False)
    rows = [(i, n, f"{s:.6f}", f"{r:.4f}") for i, (n, s, r) in enumerate(windows, start=1)]
    return write_csv(out_dir / REPEATS_FILE, ["repeat", "images", "seconds", "images_per_second"], rows)


def read_repeats(job_dir: Path) -> List[float]:
    """images/s of each measured window a finished run wrote ([] with one window)."""
    return read_column(job_dir / REPEATS_FILE, "images_per_second")
