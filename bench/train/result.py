"""What a training rank measured (TrainResult: its epochs, its accuracy, the figures gathered beside
the window in RunExtras: the dataset's facts, the batch the search found, the passes after the
window, the training checkpoints, the progressive phases and the end-of-run checkpoint write) and the
run's record (TrainMetrics), as plain data (torch-free: it crosses process boundaries and is read
back by the report)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any, Callable, Dict, List, Optional

from bench.results import INLINE, KEPT, SPREAD, FitFigures, Record, RepeatFigures, shown
from bench.runtime.reporting import Execution, ModelOutcome, ModelResult


@dataclass
class EpochRecord:
    epoch: int
    steps: int
    images: int
    seconds: float
    images_per_second: float
    loss: float
    lr: float
    step_time_ms_p50: Optional[float]  # None for an epoch without a measured step
    # the epoch's seconds split (seed 003's C2 table): waiting for the next batch on the host, and the rest
    data_wait_seconds: Optional[float] = None
    compute_seconds: Optional[float] = None
    # evaluated epochs (train.eval_every): accuracy, and seconds since the first training step
    val_top1: Optional[float] = None
    val_top5: Optional[float] = None
    eval_seconds: Optional[float] = None
    wall_seconds: Optional[float] = None
    # progressive resizing (data.progressive): the phase this epoch trained in
    image_size: Optional[int] = None
    batch_size: Optional[int] = None
    # benchmark.repeats > 1: the repeat (from 1) this epoch was measured in
    repeat: Optional[int] = None


@dataclass
class Accuracy:
    """A run's accuracy figures from its evaluated epochs (bench.train.epochs.MeasuredWindow.accuracy_figures):
    the last evaluation, the best, what evaluating cost; time to target where train.target_accuracy is set."""

    val_top1: Optional[float]
    val_top5: Optional[float]
    val_top1_best: float
    eval_seconds: float
    evaluations: int
    train_wall_seconds: float
    val_images: Optional[int] = None  # every val image counted once, over all ranks
    target_accuracy: Optional[float] = None  # train.target_accuracy; the three below only with one
    reached_target: Optional[bool] = None
    time_to_target_seconds: Optional[float] = None  # None (null) when the target was not reached
    epochs_to_target: Optional[int] = None

    def figures(self) -> Dict[str, Any]:
        """The record's accuracy figures, in field order: val_images only when counted, the target's
        four only with a target (its time and epochs null when it was not reached)."""
        targets = ("target_accuracy", "reached_target", "time_to_target_seconds", "epochs_to_target")
        return {
            f.name: getattr(self, f.name)
            for f in fields(self)
            if not (f.name == "val_images" and self.val_images is None)
            and not (f.name in targets and self.target_accuracy is None)
        }


# The figures a training run gathers beside its window (TrainResult.extra), as typed sub-records:
# `RunExtras.figures()` flattens them into the record's spread group in the order the radix_metrics
# keys have always had.


@dataclass
class CheckpointWrite:
    """storage.save_checkpoint: where the end-of-run checkpoint went and how fast, or why it failed
    (bench.train.resume); each figure None when not measured."""

    checkpoint_path: Optional[str] = None  # the run's own: not a radix_metrics key
    checkpoint_bytes: Optional[int] = None
    checkpoint_write_seconds: Optional[float] = None
    checkpoint_write_gbps: Optional[float] = None
    checkpoint_error: Optional[str] = None  # the write failed: the only figure then

    def figures(self, path: bool = True) -> Dict[str, Any]:
        """The figures written, in field order (the path left out with path=False)."""
        return {
            f.name: getattr(self, f.name)
            for f in fields(self)
            if getattr(self, f.name) is not None and (path or f.name != "checkpoint_path")
        }

    @classmethod
    def read(cls, figure: Callable[[str], Any]) -> "CheckpointWrite":
        """The write's figures, read back from a record (`TrainMetrics.figure`: whichever spread group
        a figure landed in, run_summary.json and MLflow read back included; None where absent)."""
        return cls(**{f.name: figure(f.name) for f in fields(cls)})


@dataclass
class BatchSearch:
    """benchmark.find_max_batch: the batch asked for and the one the search found."""

    batch_size_requested: int
    batch_size_found: int


@dataclass
class RunExtras:
    """TrainResult.extra: every group of figures gathered beside the window, in the order written."""

    dataset: Dict[str, Any] = field(default_factory=dict)  # the loader's facts: dataset_size, corrupt_skipped, ...
    batch_search: Optional[BatchSearch] = None
    passes: Dict[str, Any] = field(default_factory=dict)  # after the window: breakdown, FLOPs per image
    checkpoints: Dict[str, Any] = field(default_factory=dict)  # resumed from, saved every N epochs
    phases: Dict[str, Any] = field(default_factory=dict)  # data.progressive: images/s of each phase
    written: Optional[CheckpointWrite] = None  # storage.save_checkpoint (None: not written)

    def figures(self, path: bool = True) -> Dict[str, Any]:
        """One dict of all the groups' figures (the end-of-run checkpoint's path left out with path=False)."""
        search = asdict(self.batch_search) if self.batch_search is not None else {}
        written = self.written.figures(path) if self.written is not None else {}
        return {**self.dataset, **search, **self.passes, **self.checkpoints, **self.phases, **written}


@dataclass(kw_only=True)
class TrainResult(ModelResult):
    """What one training rank measured, the one type from the loop to the report: its measured
    window's figures (bench.train.epochs; benchmark.repeats' windows pooled by bench.train.loop.pool),
    then what the run adds after the window (bench.train.loop.collect_result) and who measured it
    (bench.train.scenario). Every rank's reaches rank 0 (all_gather); rank 0's, with the job's step
    timeline merged in, becomes the record (bench.train.report.summarize)."""

    measured_images: int = 0  # images of the measured steps (the batch changes with data.progressive)
    step_times_ms: List[float] = field(default_factory=list)
    epochs: List[EpochRecord] = field(default_factory=list)
    final_lr: float = 0.0
    final_loss: float = 0.0
    accuracy: Optional[Accuracy] = None  # val top-1/top-5, time-to-target (None: nothing evaluated)
    rank: int = 0
    host: str = ""
    base_lr: float = 0.0
    fused_optimizer: bool = False
    param_checksum: float = 0.0  # sum of all weights after training: equal on every rank when DDP synced them
    extra: RunExtras = field(default_factory=RunExtras)  # dataset facts, checkpoint write figures, ...

    @property
    def timeline_ms(self) -> List[float]:
        return self.step_times_ms

    @property
    def images(self) -> int:
        return self.measured_images or self.measured_steps * self.batch_size


TrainOutcome = ModelOutcome[TrainResult]  # every rank's result, in rank order


@dataclass(kw_only=True)
class TrainMetrics(Record):
    """A training run's figures: the `radix_metrics` contract (final line, summary.csv, MLflow),
    field by field in the order they are written; None fields are left out. `shown`: its column in a
    sweep's table (at: its place), its MLflow tag, the figure compare samples (per step: each step
    global_batch_size images, when no repeats)."""

    images_per_second: float = shown(  # global: the sum over ranks
        "images/s", "{:.1f}", at=7, sample={"unit": "images/s", "per_step": ("global_batch_size", "batch_size")}
    )
    total_images: int
    elapsed_seconds: float
    lr: float = shown("lr", "{:g}", at=6)  # the lr the run started at (an optimizer sweep's own)
    batch_size: int = shown("batch/proc", at=4)  # per process
    global_batch_size: int = shown("global batch", at=5)
    epochs: int
    steps_per_epoch: Optional[int] = field(default=None, metadata=KEPT)  # null: one pass, before any epoch ran
    measured_steps: int
    warmup_steps: int
    world_size: int = shown("procs", at=3)
    images_per_second_per_device: float = shown("images/s/proc", "{:.1f}", at=8)
    distributed: str
    scaling: str = shown("scaling", at=14)
    # world_size > 1: per-rank throughput (a straggler shows) and whether DDP kept the weights equal
    rank_images_per_second_min: Optional[float] = None
    rank_images_per_second_max: Optional[float] = None
    rank_slowest: Optional[int] = None
    rank_spread: Optional[float] = None
    params_in_sync: Optional[bool] = None
    step_time_ms_mean: Optional[float] = None  # the step-time spread (none without measured steps)
    step_time_ms_p50: Optional[float] = shown("step p50 ms", "{:.2f}", at=9, default=None)
    step_time_ms_p95: Optional[float] = None
    step_time_ms_p99: Optional[float] = shown("step p99 ms", "{:.2f}", at=10, default=None)
    step_time_ms_min: Optional[float] = None
    step_time_ms_max: Optional[float] = None
    step_time_ms_std: Optional[float] = None
    step_time_cv: Optional[float] = None
    unstable: bool = shown(default=False, tag=True)  # the step times spread more than bench.maths.stats.UNSTABLE_CV
    data_wait_seconds: float
    data_wait_fraction: float
    peak_memory_mb: float
    final_loss: float
    final_lr: float
    parameters: int
    param_checksum: float  # sum of the final weights: equal runs end equal
    model: str = shown("model", at=1, tag=True)
    data: str
    image_size: int
    optimizer: str
    nesterov: Optional[bool] = None  # optimizer=sgd only: Nesterov momentum on or off
    norm: Optional[str] = None  # model.norm: batch (the models' own) or none (normalisation layers removed)
    fused_optimizer: bool
    execution: Execution = field(metadata=INLINE)  # precision, compile, device, AU
    gpu: Dict[str, Any] = field(default_factory=dict, metadata=SPREAD)  # NVML samples and energy of rank 0's GPU
    # dataset facts, FLOPs per image, the batch find_max_batch found, checkpoint figures, accuracy
    extra: Dict[str, Any] = field(default_factory=dict, metadata=SPREAD)
    repeat: RepeatFigures = field(default_factory=RepeatFigures, metadata=INLINE)  # benchmark.repeats > 1
    # achieved TFLOP/s, MFU where the peak is known, images per joule
    efficiency: Dict[str, Any] = field(default_factory=dict, metadata=SPREAD)
    fit: FitFigures = field(default_factory=FitFigures, metadata=INLINE)  # fit to measure, last
