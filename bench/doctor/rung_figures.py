"""Each rung's own figures, typed (Rung.figures): what the loader, storage, all-reduce and training
rungs measured beside their images/s. doctor.json writes them with the keys and order they have
always had: a field marked OMIT is left out when None (a note said instead of a split, the store
of a remote read), the others are written null."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Dict, Optional, Union

OMIT = {"omit": True}  # absent from doctor.json when None


class _Figures:
    def to_json(self) -> Dict[str, Any]:
        """doctor.json's "figures" of the rung: the fields in order, an OMIT field only when set."""
        return {
            f.name: getattr(self, f.name)
            for f in fields(self)  # type: ignore[arg-type]
            if not (f.metadata.get("omit") and getattr(self, f.name) is None)
        }


@dataclass
class LoaderFigures(_Figures):
    """The input pipeline alone (bench.doctor.loader)."""

    cpu_ms_per_image: float
    batches: int
    workers: Optional[int]  # the loader's data_workers (None: the loader does not say)
    dataset_size: Optional[int]
    stage_cpu_ms: Optional[Dict[str, float]] = field(default=None, metadata=OMIT)  # CPU ms/image by stage
    stage_note: Optional[str] = field(default=None, metadata=OMIT)  # why the stages were not split


@dataclass
class StorageFigures(_Figures):
    """The files under data.root read alone (bench.doctor.storage_read)."""

    cache: str  # warm, cold (the pass the rate is from) or remote (S3: one pass, no page cache of ours)
    store: Optional[str] = field(default=None, metadata=OMIT)  # a remote read's store URL
    megabytes_per_second: Optional[float] = None
    cold_megabytes_per_second: Optional[float] = None
    warm_megabytes_per_second: Optional[float] = None
    files_read: int = 0
    dataset_files: int = 0
    dataset_megabytes: float = 0.0
    threads: int = 0  # the readers' number (the key it has had since it was threads only)
    readers: str = "threads"  # processes or threads


@dataclass
class AllreduceFigures(_Figures):
    """An all-reduce of the gradients' size alone (bench.doctor.allreduce)."""

    milliseconds: float
    megabytes: float
    processes: int
    backend: str
    bus_gigabytes_per_second: float
    step_ms: Optional[float]  # the full run's step p50
    share_of_step: Optional[float]
    nodes_measured: Optional[int]  # 1 with several nodes: only this node's processes took part


@dataclass
class TrainingFigures(_Figures):
    """A training rung's settings, read back from its run's record (bench.doctor.training)."""

    measured_steps: int
    batch_size: int
    world_size: int
    precision: Optional[str]
    channels_last: Optional[bool]
    device: str


RungFigures = Union[LoaderFigures, StorageFigures, AllreduceFigures, TrainingFigures]
