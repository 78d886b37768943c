"""The figures a training run gathers beside its window (TrainResult.extra), as typed sub-records:
the dataset's facts, the batch the search found, the passes after the window, the training
checkpoints, the progressive phases and the end-of-run checkpoint write. Torch-free: it crosses
process boundaries with the TrainResult. `figures()` flattens them into the record's spread group
in the order the radix_metrics keys have always had."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any, Callable, Dict, Optional


@dataclass
class CheckpointWrite:
    """storage.save_checkpoint: where the end-of-run checkpoint went and how fast, or why it failed
    (bench.train.checkpoint); each figure None when not measured."""

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
        figures: Dict[str, Any] = dict(self.dataset)
        if self.batch_search is not None:
            figures.update(asdict(self.batch_search))
        figures.update(self.passes)
        figures.update(self.checkpoints)
        figures.update(self.phases)
        if self.written is not None:
            figures.update(self.written.figures(path))
        return figures
