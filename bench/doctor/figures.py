"""The doctor's typed figures: one Rung per measurement of the ladder with its own figures, typed by
rung (LoaderFigures, ...), one WhatIf per measured change, and the Diagnosis they make (doctor.json
is their serialisation). doctor.json writes a rung's figures with the keys and order they have always
had: a field marked OMIT is left out when None (a note said instead of a split, the store of a remote
read), the others are written null."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any, Dict, List, Optional, Union

OMIT = {"omit": True}  # absent from doctor.json when None
STAGES = ("read", "decode", "augment", "collate", "host_to_device")  # the loader's, in order (LoaderFigures)


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
    """An all-reduce of the gradients' size alone (bench.doctor.ladder.allreduce_rung)."""

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

COMPUTE, LOADER, STORAGE, FULL, ALLREDUCE = "compute", "loader", "storage", "full", "allreduce"
UNFIT = "not fit to measure"  # a training run whose window the machine's other load (or oversubscription) spoilt
RUNG_TITLES = {
    COMPUTE: "compute ceiling (synthetic data on the device)",
    LOADER: "input pipeline alone (no model)",
    STORAGE: "storage alone (the files under data.root)",
    FULL: "full training run",
    ALLREDUCE: "all-reduce of the gradients alone",
}


@dataclass
class Rung:
    """One measurement. `images_per_second` is what this part alone can give (None: not a rate,
    or skipped); `skipped` says why a rung did not run; `figures` holds the rest, typed by rung
    (LoaderFigures, ...; None: nothing measured)."""

    name: str
    images_per_second: Optional[float] = None
    seconds: float = 0.0  # wall time the rung took, set-up included
    skipped: str = ""
    failed: str = ""
    run_id: Optional[str] = None
    figures: Optional[RungFigures] = None
    # a training rung's own figures, typed: its step time, data-wait share, model size, and whether
    # the machine was fit to measure during its window (bench.machine.fitness) and why not
    step_ms: Optional[float] = None
    data_wait: Optional[float] = None
    parameters: Optional[int] = None
    fit: Optional[bool] = None
    unfit_because: str = ""

    @property
    def title(self) -> str:
        return RUNG_TITLES.get(self.name, self.name)

    @property
    def measured(self) -> bool:
        return not self.skipped and not self.failed

    def figures_json(self) -> Dict[str, Any]:
        """doctor.json's "figures" of this rung ({} when it measured none)."""
        return self.figures.to_json() if self.figures is not None else {}


@dataclass
class WhatIf:
    """A change measured as a full training run (or, for the loader's changes, the loader alone),
    against the rung it changes: `gain` = changed / before."""

    name: str  # e.g. "data.num_workers=2"
    overrides: List[str]
    rung: str  # the rung it is compared with (FULL, LOADER, COMPUTE)
    before: Optional[float] = None
    images_per_second: Optional[float] = None
    skipped: str = ""
    failed: str = ""
    run_id: Optional[str] = None
    fit: Optional[bool] = None  # as a training rung's: was its run fit to measure, and why not
    unfit_because: str = ""

    @property
    def gain(self) -> Optional[float]:
        return self.images_per_second / self.before if self.before and self.images_per_second is not None else None


@dataclass
class Diagnosis:
    # input-bound, storage-bound, compute-bound, communication-bound, contended; no bound called:
    # unknown (the full run failed), unfit (a rung not fit to measure), inconsistent (noisy figures)
    verdict: str
    sentence: str
    rungs: List[Rung]
    what_ifs: List[WhatIf] = field(default_factory=list)
    budget_s: float = 0.0
    elapsed_s: float = 0.0  # wall time from the command's start to the ladder's end
    overrides: List[str] = field(default_factory=list)
    parent_run_id: Optional[str] = None
    setup_s: float = 0.0  # wall time from the command's start to the first rung
    started_at: float = 0.0  # the command's start, epoch seconds (0: not known)
    wall_s: float = 0.0  # wall time from the command's start to its page (0: not known, elapsed_s)
    # what the figures alone say, the machine's fitness aside (the verdict had the machine been fit)
    figures_verdict: str = ""
    figures_sentence: str = ""

    def rung(self, name: str) -> Optional[Rung]:
        return next((r for r in self.rungs if r.name == name), None)

    def to_json(self) -> Dict[str, Any]:
        data = asdict(self)  # each rung's figures as doctor.json has them (an unset note left out)
        data.update(rungs=[{**asdict(rung), "figures": rung.figures_json()} for rung in self.rungs])
        return data
