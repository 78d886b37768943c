"""Report pieces the model scenarios (training, inference) share: what a rank measured (ModelResult)
and what rank 0 hands the report (ModelOutcome), the record group of how the model ran (Execution:
precision policy, compile, device, AU) and the figures both records hold (model_figures: throughput,
data wait, efficiency, repeats, fit), and the report both build on (ModelReport: the timeline file,
run_summary.json, repeats.csv, the profiler's files, the MLflow series and tags, the read-back).

Peak dense TFLOP/s per GPU model and precision, for MFU (model FLOPs utilisation).

Figures are the vendor's datasheet numbers WITHOUT structured sparsity (datasheets print the
sparse figure with a `*`; the dense one is half of it). `fp32` is the plain FP32 (CUDA-core)
figure, used when TF32 is off; `tf32` the TF32 tensor-core figure; `fp16` and `bf16` the
tensor-core figures that autocast uses. A GPU not in the table, a precision it has no figure
for, and every CPU get no peak: MFU is then absent, never guessed.

MFU = achieved model TFLOP/s per device (FLOPs per image counted by FlopCounterMode x images/s
per device) / this peak. FlopCounterMode counts convolutions and matrix products (2 FLOPs per
multiply-add), not element-wise ops, as MFU is usually defined.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Dict, Generic, List, Mapping, Optional, Sequence, Tuple, TypeVar

from bench.machine.fitness import Verdict
from bench.machine.gpu_monitor import GpuFigures
from bench.results import FitFigures, Record, RepeatFigures, read_column, shown, write_csv
from bench.runtime.malloc import in_effect as malloc_in_effect
from bench.scenario_base import BaseReport

if TYPE_CHECKING:
    from bench.config import BenchConfig

PROFILE_FILES = ("trace_rank0.json", "profile_top_ops.txt")  # bench.runtime.profiling writes them
AU_THRESHOLD = 0.90  # accelerator utilization below which a run is input-bound (MLPerf Storage's ResNet-50 bar)
# benchmark.repeats > 1: a row per measured window, and its MLflow series (step = repeat)
REPEATS_FILE, REPEATS_METRIC = "repeats.csv", "repeat_images_per_second"
# a rank's figures its record holds under the same names (model_figures), and read back from it (read_window)
SAME_NAMES = ("batch_size", "warmup_steps", "measured_steps", "parameters")


@dataclass(kw_only=True)
class ModelResult:
    """What one rank of a model run measured, as plain data (torch-free: it crosses process boundaries
    and is read back by the report): its measured window (benchmark.repeats' windows pooled), how it
    ran, what it wrote after the window. Training's (bench.train.result.TrainResult) and inference's
    (bench.infer.result.InferResult) add their own, and each names its timeline (`timeline_ms`)."""

    measured_steps: int = 0
    window_seconds: float = 0.0
    data_wait_ms: List[float] = field(default_factory=list)  # per measured step: the host waiting for the batch
    repeat_images: List[int] = field(default_factory=list)  # per measured window (benchmark.repeats)
    repeat_seconds: List[float] = field(default_factory=list)
    batch_size: int = 0  # per process
    warmup_steps: int = 0
    peak_memory_bytes: int = 0  # the window's
    parameters: int = 0
    precision: Dict[str, Any] = field(default_factory=dict)  # the policy's describe()
    compile: Dict[str, Any] = field(default_factory=dict)
    gpu: GpuFigures = field(default_factory=GpuFigures)  # NVML samples and energy from the window
    files: List[str] = field(default_factory=list)  # written after the window (profiler trace, table)
    interrupted: Optional[str] = None  # the signal (SIGTERM, SIGINT) that cut the passes after the window short
    fit: Optional[Verdict] = (
        None  # this rank's fit-to-measure verdict (bench.runtime.scenario.WindowMonitor; None: not watched)
    )

    @property
    def timeline_ms(self) -> List[float]:
        raise NotImplementedError  # per measured step: training's step times, inference's latencies

    @property
    def images(self) -> int:
        return self.measured_steps * self.batch_size

    @property
    def images_per_second(self) -> float:
        return self.images / self.window_seconds if self.window_seconds > 0 else 0.0


R = TypeVar("R", bound=ModelResult)


@dataclass
class ModelOutcome(Generic[R]):
    """What rank 0 hands the reporting process: every rank's result, in rank order."""

    ranks: List[R]
    device: str  # cpu | cuda
    device_name: str

    @property
    def result(self) -> R:
        return self.ranks[0]  # rank 0's


@dataclass(kw_only=True)
class Execution(Record):
    """How a model ran, in a training or inference record (nested INLINE, after the model's own
    fields): the precision policy (bench.runtime.precision's describe()), torch.compile, cuDNN
    autotuning, the CPU allocator, the device, and whether the input pipeline kept it fed."""

    precision: Optional[str] = shown("precision", at=2, tag=True, default=None)  # the precision policy
    autocast_dtype: Optional[str] = None
    grad_scaler: Optional[bool] = None
    tf32: Optional[bool] = None
    channels_last: Optional[bool] = None
    compile: bool
    cudnn_benchmark: bool
    cpu_malloc_reuse: Optional[bool] = None  # on a CPU: freed memory kept for reuse (bench.runtime.malloc)
    device: str  # cpu | cuda
    device_name: str = shown(tag=True)
    # accelerator utilization: the share of the measured window not spent waiting for data (compute
    # time / wall time, as MLPerf Storage defines AU); input_bound when au < AU_THRESHOLD
    au: float
    input_bound: bool
    compile_fallback: Optional[str] = None  # why torch.compile fell back to eager
    compile_s: Optional[float] = None  # torch.compile's first call (the compile), outside the window (training)


def efficiency(
    run: Execution, gflops: Optional[float], images_per_second: float, world_size: int, images: int, energy: Any
) -> Dict[str, Any]:
    """Achieved TFLOP/s and MFU (bench.runtime.reporting; `gflops` per image, None: none), and images per
    joule (`energy`: NVML's joules of rank 0's GPU over the window, `images` rank 0's)."""
    dtype, tf32 = run.autocast_dtype or "none", bool(run.tf32)
    figures = dict(utilisation(gflops, images_per_second, world_size, run.device, run.device_name, dtype, tf32))
    if energy:
        figures["images_per_joule"] = images / energy
    return figures


def input_pipeline(data_wait_fraction: float) -> Dict[str, Any]:
    """Accelerator utilization (au: the share of the window not spent waiting for data) and whether
    the run was input-bound (au < AU_THRESHOLD)."""
    au = min(1.0, max(0.0, 1.0 - data_wait_fraction))
    return {"au": au, "input_bound": au < AU_THRESHOLD}


def repeat_throughputs(ranks: Sequence[ModelResult]) -> List[float]:
    """images/s of each measured window (benchmark.repeats), summed over ranks like the run's own."""
    count = min((len(r.repeat_seconds) for r in ranks), default=0)
    return [
        sum(r.repeat_images[i] / r.repeat_seconds[i] for r in ranks if r.repeat_seconds[i] > 0) for i in range(count)
    ]


def model_figures(
    outcome: ModelOutcome, result: ModelResult, config: "BenchConfig", gflops: Optional[float]
) -> Dict[str, Any]:
    """The fields a training and an inference record share, from every rank's result and rank 0's
    (`result`, with the job's timeline): throughput (a DDP job's: the sum over ranks of each one's
    images / its own window), the data wait, how the model ran, the efficiency figures (`gflops` per
    image, None: none), the repeats' spread and the fit-to-measure verdict (the other ranks' GPUs too)."""
    ranks, device = outcome.ranks, outcome.device
    world_size, seconds = len(ranks), result.window_seconds
    images = result.images * world_size
    throughput = sum(r.images_per_second for r in ranks)  # one rank: rank 0's images / its window
    data_wait_s = sum(result.data_wait_ms) / 1000.0
    wait_fraction = data_wait_s / seconds if seconds > 0 else 0.0
    compiled = result.compile
    execution = Execution(
        **result.precision,
        compile=bool(compiled.get("active")),
        cudnn_benchmark=bool(config.cudnn_benchmark),
        cpu_malloc_reuse=malloc_in_effect(config.cpu_malloc_reuse, device),
        device=device,
        device_name=outcome.device_name,
        **input_pipeline(wait_fraction),
        compile_fallback=compiled.get("fallback_reason") or None,
        compile_s=compiled.get("first_call_s"),
    )
    return dict(
        images_per_second=throughput,
        total_images=images,
        elapsed_seconds=seconds,
        **{name: getattr(result, name) for name in SAME_NAMES},
        global_batch_size=result.batch_size * world_size,
        world_size=world_size,
        images_per_second_per_device=throughput / world_size,
        data_wait_seconds=data_wait_s,
        data_wait_fraction=wait_fraction,
        peak_memory_mb=result.peak_memory_bytes / 2**20,
        model=config.model.arch,
        data=str(config.data.name),
        image_size=config.data.image_size,
        execution=execution,
        gpu=result.gpu.figures(),
        repeat=RepeatFigures.of(repeat_throughputs(ranks)),
        efficiency=efficiency(execution, gflops, throughput, world_size, result.images, result.gpu.energy_joules),
        fit=fit_figures(result.fit, [r.fit for r in ranks[1:]]),
    )


# A window's fit-to-measure verdict in the record, the MLflow run and the run's status: with
# benchmark.require_fit=true an unfit window ends the run FAILED (exit 1), its figures reported.


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


@dataclass
class ModelReport(BaseReport):
    """What the training and the inference report share: rank 0's result with the job's timeline, the
    typed record and the images/s of each measured window. Files: the timeline (TIMELINE_FILE: a row
    per measured step), run_summary.json, summary.csv, repeats.csv (benchmark.repeats > 1) and the
    profiler's; MLflow: the timeline and repeats series, the tags (the record's, and the fit's), the
    files. An unfit window with benchmark.require_fit is a problem (the run ends FAILED)."""

    TIMELINE_FILE: ClassVar[str]  # a row per measured step (TIMELINE_INDEX), its figure and data wait
    TIMELINE_INDEX: ClassVar[str] = "step"  # the timeline file's first column (TIMELINE_COLUMN its figure)

    result: Any  # rank 0's ModelResult, with the job's timeline
    record: Any  # the radix_metrics contract, typed
    repeat_rates: List[float] = field(default_factory=list)  # images/s of each window (benchmark.repeats)
    require_fit: bool = False  # benchmark.require_fit: an unfit window is a problem (the run ends FAILED)

    @property
    def interrupted(self) -> Optional[str]:
        """The signal that stopped the passes after the window: the window is reported, the run ends KILLED."""
        return self.result.interrupted

    @property
    def problems(self) -> List[str]:
        return fit_problems(self.record.fit, self.require_fit)

    def write(
        self, out_dir: Path, config: Mapping[str, Any], environment: Mapping[str, Any], run_id: Optional[str]
    ) -> List[Path]:
        summary = {"results": self.metrics, "compile": self.result.compile, "environment": dict(environment)}
        return self.write_run(out_dir, {**summary, "config": dict(config), "mlflow_run_id": run_id})

    def write_run(self, out_dir: Path, summary: Mapping[str, Any]) -> List[Path]:
        """run_summary.json (`summary`), summary.csv, the timeline (its data wait beside each step),
        repeats.csv with several windows, and the files the rank wrote after the window."""
        result = self.result
        files = self.write_summary(out_dir, summary)
        # training's merged timeline keeps the steps and the waits every rank has: they may differ in length
        pairs = zip(result.timeline_ms, result.data_wait_ms, strict=False)
        rows = [(i, f"{value:.4f}", f"{wait:.4f}") for i, (value, wait) in enumerate(pairs, start=1)]
        files.append(
            write_csv(out_dir / self.TIMELINE_FILE, [self.TIMELINE_INDEX, self.TIMELINE_COLUMN, "data_wait_ms"], rows)
        )
        if len(self.repeat_rates) > 1:  # the windows every rank measured, which may be fewer than rank 0's
            windows = zip(result.repeat_images, result.repeat_seconds, self.repeat_rates, strict=False)
            # full precision (repr): the compare's medians read back from this file are the record's to the digit
            repeats = [(i, n, s, r) for i, (n, s, r) in enumerate(windows, start=1)]
            files.append(
                write_csv(out_dir / REPEATS_FILE, ["repeat", "images", "seconds", "images_per_second"], repeats)
            )
        return files + [Path(f) for f in result.files if Path(f).is_file()]

    def log_to(self, tracker: Any, files: List[Path], out_dir: Path, log_series: bool) -> None:
        """Everything but the metrics (logged first, on their own): series, tags, artifacts."""
        if not tracker.active:
            return
        if log_series:
            tracker.log_series(str(self.view.timeline_metric), self.result.timeline_ms)
        if len(self.repeat_rates) > 1:
            tracker.log_series(REPEATS_METRIC, self.repeat_rates)
        tracker.set_tags({**self.record.tags(), **fit_tags(self.record.fit)})
        self.log_files(tracker, files, out_dir)

    @classmethod
    def read_window(cls, job_dir: Path, summary: Mapping[str, Any], record: Any) -> Dict[str, Any]:
        """What a finished run's ModelResult holds of its measured window, read back from its record and
        files (to upload it later): the arguments both result types share."""
        return dict(
            **{name: getattr(record, name) for name in SAME_NAMES},
            window_seconds=record.elapsed_seconds,
            data_wait_ms=read_column(job_dir / cls.TIMELINE_FILE, "data_wait_ms"),
            repeat_images=[int(v) for v in read_column(job_dir / REPEATS_FILE, "images")],
            repeat_seconds=read_column(job_dir / REPEATS_FILE, "seconds"),
            peak_memory_bytes=int(record.peak_memory_mb * 2**20),
            compile=summary.get("compile", {}),
            files=[str(job_dir / name) for name in PROFILE_FILES if (job_dir / name).is_file()],
        )

    @classmethod
    def repeats(cls, job_dir: Path) -> List[float]:
        """images/s of each measured window a finished run wrote ([] with one window)."""
        return read_column(job_dir / REPEATS_FILE, "images_per_second")


# (pattern on torch.cuda.get_device_name, model, {precision: dense TFLOP/s}); first match wins. Each row's
# source is the comment above it: the vendor's datasheet and the figures it prints (* = with sparsity)
PEAKS: List[Tuple[str, str, Dict[str, float]]] = [
    # NVIDIA GH200 Grace Hopper datasheet (its H100-class GPU: FP32 67, TF32 989*, BF16/FP16 1,979*)
    (r"GH200", "GH200", {"fp32": 67.0, "tf32": 494.5, "bf16": 989.5, "fp16": 989.5}),
    # NVIDIA H200 datasheet (H200 NVL column: FP32 60, TF32 835*, BF16/FP16 1,671*; * = with sparsity)
    (r"H200.*NVL", "H200 NVL", {"fp32": 60.0, "tf32": 417.5, "bf16": 835.5, "fp16": 835.5}),
    # NVIDIA H200 datasheet (H200 SXM column: FP32 67, TF32 989*, BF16/FP16 1,979*)
    (r"H200", "H200 SXM", {"fp32": 67.0, "tf32": 494.5, "bf16": 989.5, "fp16": 989.5}),
    # NVIDIA H100 datasheet (H100 NVL column: FP32 60, TF32 835*, BF16/FP16 1,671*)
    (r"H100.*NVL", "H100 NVL", {"fp32": 60.0, "tf32": 417.5, "bf16": 835.5, "fp16": 835.5}),
    # NVIDIA H100 datasheet (H100 PCIe column: FP32 51, TF32 756*, BF16/FP16 1,513*)
    (r"H100.*PCIe", "H100 PCIe", {"fp32": 51.0, "tf32": 378.0, "bf16": 756.5, "fp16": 756.5}),
    # NVIDIA H100 datasheet (H100 SXM column: FP32 67, TF32 989*, BF16/FP16 1,979*)
    (r"H100", "H100 SXM", {"fp32": 67.0, "tf32": 494.5, "bf16": 989.5, "fp16": 989.5}),
    # NVIDIA A100 datasheet (40GB/80GB, PCIe and SXM: FP32 19.5, TF32 156, BF16/FP16 312; sparse x2)
    (r"A100", "A100", {"fp32": 19.5, "tf32": 156.0, "bf16": 312.0, "fp16": 312.0}),
    # NVIDIA L40S datasheet (FP32 91.6, TF32 183 | 366*, BF16/FP16 362.05 | 733*)
    (r"L40S", "L40S", {"fp32": 91.6, "tf32": 183.0, "bf16": 362.05, "fp16": 362.05}),
    # NVIDIA L4 datasheet (FP32 30.3, TF32 120*, BF16/FP16 242*)
    (r"\bL4\b", "L4", {"fp32": 30.3, "tf32": 60.0, "bf16": 121.0, "fp16": 121.0}),
    # NVIDIA A10 datasheet (FP32 31.2, TF32 62.5 | 125*, BF16/FP16 125 | 250*); not the A10G
    (r"\bA10\b", "A10", {"fp32": 31.2, "tf32": 62.5, "bf16": 125.0, "fp16": 125.0}),
    # NVIDIA V100 datasheet (V100S PCIe column: FP32 16.4, Tensor 130; no TF32 or BF16)
    (r"V100S", "V100S PCIe", {"fp32": 16.4, "fp16": 130.0}),
    # NVIDIA V100 datasheet (V100 PCIe column: FP32 14, Tensor 112)
    (r"V100.*PCIE", "V100 PCIe", {"fp32": 14.0, "fp16": 112.0}),
    # NVIDIA V100 datasheet (V100 SXM2 column: FP32 15.7, Tensor 125)
    (r"V100", "V100 SXM2", {"fp32": 15.7, "fp16": 125.0}),
    # NVIDIA T4 datasheet (FP32 8.1, mixed FP16/FP32 tensor 65; no TF32 or BF16)
    (r"\bT4\b", "T4", {"fp32": 8.1, "fp16": 65.0}),
]


def peak_key(autocast_dtype: str, tf32: bool) -> str:
    """The table's precision column for a run: autocast's dtype, else tf32 when it was on, else fp32."""
    return {"bfloat16": "bf16", "float16": "fp16"}.get(autocast_dtype, "tf32" if tf32 else "fp32")


def peak_tflops(device_name: str, precision: str) -> Optional[Tuple[float, str]]:
    """(dense TFLOP/s, GPU model) for this GPU and precision column; None when not known."""
    for pattern, model, figures in PEAKS:
        if re.search(pattern, device_name, flags=re.IGNORECASE):
            figure = figures.get(precision)
            return (figure, model) if figure is not None else None
    return None


def utilisation(
    gflops_per_image: Optional[float],
    images_per_second: float,
    world_size: int,
    device: str,
    device_name: str,
    autocast_dtype: str,
    tf32: bool,
) -> Dict[str, object]:
    """Achieved model TFLOP/s (all devices and per device) and, where the peak is known, MFU."""
    if not gflops_per_image or images_per_second <= 0:
        return {}
    achieved = images_per_second * gflops_per_image / 1000.0
    figures: Dict[str, object] = {"achieved_tflops": achieved, "achieved_tflops_per_device": achieved / world_size}
    if known := (peak_tflops(device_name, peak_key(autocast_dtype, tf32)) if device == "cuda" else None):
        peak, model = known
        figures.update(peak_tflops_per_device=peak, peak_gpu_model=model, mfu=achieved / world_size / peak)
    return figures
