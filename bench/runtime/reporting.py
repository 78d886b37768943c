"""Report pieces the model scenarios (training, inference) share: what a rank measured (ModelResult)
and what rank 0 hands the report (ModelOutcome), the record group of how the model ran (Execution:
precision policy, compile, device, AU) and the figures both records hold (model_figures: throughput,
data wait, efficiency, repeats, fit), and the report both build on (ModelReport: the timeline file,
run_summary.json, repeats.csv, the profiler's files, the MLflow series and tags, the read-back)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Dict, Generic, List, Mapping, Optional, Sequence, TypeVar

from bench.machine.gpu_monitor import GpuFigures
from bench.results import Record, RepeatFigures, read_column, shown, write_csv
from bench.runtime.fit_watch import fit_figures, fit_problems, fit_tags
from bench.runtime.malloc import in_effect as malloc_in_effect
from bench.runtime.peaks import utilisation
from bench.scenario_base import BaseReport

if TYPE_CHECKING:
    from bench.config import BenchConfig
    from bench.machine.fitness import Verdict

PROFILE_FILES = ("trace_rank0.json", "profile_top_ops.txt")  # bench.runtime.profiling writes them
AU_THRESHOLD = 0.90  # accelerator utilization below which a run is input-bound (MLPerf Storage's ResNet-50 bar)
# benchmark.repeats > 1: a row per measured window, and its MLflow series (step = repeat)
REPEATS_FILE, REPEATS_METRIC = "repeats.csv", "repeat_images_per_second"


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
    fit: Optional[Verdict] = None  # this rank's fit-to-measure verdict (bench.runtime.fit_watch; None: not watched)

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
    """Achieved TFLOP/s and MFU (bench.runtime.peaks; `gflops` per image, None: none), and images per
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
    if world_size > 1:
        throughput = sum(r.images_per_second for r in ranks)
    else:
        throughput = images / seconds if seconds > 0 else 0.0
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
        batch_size=result.batch_size,
        global_batch_size=result.batch_size * world_size,
        measured_steps=result.measured_steps,
        warmup_steps=result.warmup_steps,
        world_size=world_size,
        images_per_second_per_device=throughput / world_size,
        data_wait_seconds=data_wait_s,
        data_wait_fraction=wait_fraction,
        peak_memory_mb=result.peak_memory_bytes / 2**20,
        parameters=result.parameters,
        model=config.model.arch,
        data=str(config.data.name),
        image_size=config.data.image_size,
        execution=execution,
        gpu=result.gpu.figures(),
        repeat=RepeatFigures.of(repeat_throughputs(ranks)),
        efficiency=efficiency(execution, gflops, throughput, world_size, result.images, result.gpu.energy_joules),
        fit=fit_figures(result.fit, [r.fit for r in ranks[1:]]),
    )


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
            repeats = [(i, n, f"{s:.6f}", f"{r:.4f}") for i, (n, s, r) in enumerate(windows, start=1)]
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
            batch_size=record.batch_size,
            warmup_steps=record.warmup_steps,
            measured_steps=record.measured_steps,
            window_seconds=record.elapsed_seconds,
            data_wait_ms=read_column(job_dir / cls.TIMELINE_FILE, "data_wait_ms"),
            repeat_images=[int(v) for v in read_column(job_dir / REPEATS_FILE, "images")],
            repeat_seconds=read_column(job_dir / REPEATS_FILE, "seconds"),
            peak_memory_bytes=int(record.peak_memory_mb * 2**20),
            parameters=record.parameters,
            compile=summary.get("compile", {}),
            files=[str(job_dir / name) for name in PROFILE_FILES if (job_dir / name).is_file()],
        )

    @classmethod
    def repeats(cls, job_dir: Path) -> List[float]:
        """images/s of each measured window a finished run wrote ([] with one window)."""
        return read_column(job_dir / REPEATS_FILE, "images_per_second")
