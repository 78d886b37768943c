"""What every scenario's report shares: the typed record (which declares how its fields are shown:
`shown`), the final stdout line, and output files written whole or not at all, error.txt even on a
full disk (the report the app drives: bench.scenario_base.BaseReport).

A report (bench.train.report.TrainReport, bench.iobench.report.StorageReport) aggregates what
the ranks or simulated accelerators measured, flattens it to the `radix_metrics` dict (the
final stdout line and the MLflow metrics), writes the run's files and reads them back for
`python -m bench.report`.
"""

from __future__ import annotations

import csv
import fcntl
import io
import json
import logging
import math
import os
from collections.abc import Callable
from contextlib import contextmanager, suppress
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path
from typing import Any, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Type, TypeVar, get_type_hints

from bench.report_view import Column, Sample
from bench.secrets import redact

R = TypeVar("R", bound="Record")
ERROR_RESERVE = ".error.txt.reserve"  # room held for error.txt while a run runs (room_kept)
ERROR_ROOM = 16 * 1024  # a traceback of a few KiB; a longer one keeps its end (the exception)
log = logging.getLogger("bench")
KEPT = {"kept": True}  # a field written even when None (null in the final line), as it always was


# a dict field (field(default_factory=dict, metadata=SPREAD)) holding a group of figures whose names
# vary (NVML, dataset facts, utilisation): its items are written in its place, one radix_metrics key each
SPREAD = {"spread": True}


# a field holding another record (field(metadata=INLINE), or with default_factory=Kind: a group of
# figures computed and merged apart, such as one storage run's, or shared by every record): its fields
# are written in its place, as if they were the outer record's; read back, its type builds it
INLINE = {"inline": True}


def shown(
    header: str = "",
    fmt: str = "{}",
    *,
    at: int = 0,
    tag: bool = False,
    sample: Optional[Dict[str, Any]] = None,
    **options: Any,
) -> Any:
    """A record field that declares its presentation (a dataclasses.field: `default`, `default_factory`
    pass through): `header` and `fmt` make it a column of the sweep table, report.md and report.csv
    (ordered by `at`, then field order; "" : no column); `tag` makes it an MLflow tag as well as a
    metric (every number is a metric, every field a radix_metrics key); `sample`, the figure
    `python -m bench.compare` judges (bench.report_view.Sample's options: unit, per_step, ...)."""
    return field(metadata={"column": (header, fmt, at) if header else None, "tag": tag, "sample": sample}, **options)


class Record:
    """A scenario's typed result record (a dataclass, kw_only): the one place that turns it into the
    radix_metrics dict (the final line, summary.csv, MLflow) and back, and that declares how each
    field is shown (`shown`: its sweep-table column, MLflow tag, compare's sample). Its fields, in
    order, are the keys; a None field is left out (absent from the final line) unless it is KEPT; a
    SPREAD field's items, and an INLINE record's fields, go in its place. Reading back, a key no
    field names lands in the record's last spread field."""

    @classmethod
    def declared(cls) -> List[tuple[str, Mapping[str, Any]]]:
        """(name, metadata) of every field written as a key, INLINE records' fields in their place."""
        hints = get_type_hints(cls)
        found: List[tuple[str, Mapping[str, Any]]] = []
        for f in fields(cls):  # type: ignore[arg-type]
            found += hints[f.name].declared() if f.metadata.get("inline") else [(f.name, f.metadata)]
        return found

    @classmethod
    def columns(cls, more: Sequence[tuple[str, str, str, int]] = ()) -> List[Column]:
        """The sweep table's columns its fields declare, and `more` ((header, key, format, at)):
        (header, key, format), by `at`, then field order."""
        found = [(*m["column"], name) for name, m in cls.declared() if m.get("column")]  # (header, format, at, key)
        found += [(header, fmt, at, key) for header, key, fmt, at in more]
        return [(header, key, fmt) for header, fmt, _, key in sorted(found, key=lambda c: c[2])]

    @classmethod
    def sample(cls) -> Sample:
        """What `python -m bench.compare` judges of a run: the field declared with `sample`."""
        found = [Sample(name, **m["sample"]) for name, m in cls.declared() if m.get("sample")]
        if len(found) != 1:
            raise TypeError(f"{cls.__name__} declares {len(found)} fields with a sample: compare judges one")
        return found[0]

    def tags(self) -> Dict[str, Any]:
        """The MLflow tags its fields declare (`tag=True`), those the run has."""
        metrics = self.to_metrics()
        return {name: metrics[name] for name, m in self.declared() if m.get("tag") and name in metrics}

    def to_metrics(self) -> Dict[str, Any]:
        metrics: Dict[str, Any] = {}
        for f in fields(self):  # type: ignore[arg-type]
            value = getattr(self, f.name)
            if f.metadata.get("spread"):
                metrics.update(value)
            elif f.metadata.get("inline"):
                metrics.update(value.to_metrics())
            elif value is not None or f.metadata.get("kept"):
                metrics[f.name] = value
        return metrics

    @classmethod
    def from_metrics(cls: Type[R], metrics: Mapping[str, Any]) -> R:
        """The record of a radix_metrics dict read back (run_summary.json's results, MLflow)."""
        own = {f.name: f for f in fields(cls) if not f.metadata.get("spread")}  # type: ignore[arg-type]
        groups = [f.name for f in fields(cls) if f.metadata.get("spread")]  # type: ignore[arg-type]
        hints = get_type_hints(cls)  # an INLINE field's type is its record class
        nested: Dict[str, Type[Record]] = {name: hints[name] for name, f in own.items() if f.metadata.get("inline")}
        values: Dict[str, Any] = {
            name: metrics.get(name)
            for name, f in own.items()
            if name not in nested and (name in metrics or (f.default is MISSING and f.default_factory is MISSING))
        }
        values.update({name: kind.from_metrics(metrics) for name, kind in nested.items()})
        inner = {f.name for kind in nested.values() for f in fields(kind)}  # type: ignore[arg-type]
        if groups:
            values[groups[-1]] = {k: v for k, v in metrics.items() if k not in own and k not in inner}
        return cls(**values)

    def figure(self, name: str) -> Any:
        """One of the open-ended figures (the spread groups': gpu, extra, efficiency) by name; None when
        the run has none."""
        groups = [getattr(self, f.name) for f in fields(self) if f.metadata.get("spread")]  # type: ignore[arg-type]
        return next((group[name] for group in groups if name in group), None)


# The figure groups every scenario's record shares, defined here once and nested INLINE (their
# fields written in their place, so a record's key order is the one it always had).


@dataclass(kw_only=True)
class RepeatFigures(Record):
    """benchmark.repeats > 1 (a model run's N measured windows): the median images/s, min/max, IQR,
    the 95% bootstrap interval of the median (bench.maths.confidence), the coefficient of variation
    and `stable` (cv <= STABLE_CV). All None (none written) with fewer than 2 windows."""

    repeats: Optional[int] = None
    images_per_second_median: Optional[float] = None
    images_per_second_min: Optional[float] = None
    images_per_second_max: Optional[float] = None
    images_per_second_iqr: Optional[float] = None
    images_per_second_ci95_low: Optional[float] = None
    images_per_second_ci95_high: Optional[float] = None
    images_per_second_ci95_halfwidth_pct: Optional[float] = None
    images_per_second_cv: Optional[float] = None
    stable: Optional[bool] = None

    @classmethod
    def of(cls, throughputs: Sequence[float]) -> "RepeatFigures":
        """The figures of the windows' images/s (numpy, imported here: the records stay light)."""
        if len(throughputs) < 2:
            return cls()
        import numpy as np

        from bench.maths.confidence import STABLE_CV, bootstrap, interval

        values = np.asarray(throughputs, dtype=float)
        median = float(np.median(values))
        low, high = interval(bootstrap(values))
        q1, q3 = np.percentile(values, [25, 75])
        cv = float(values.std(ddof=1) / values.mean()) if values.mean() > 0 else math.inf
        return cls(
            repeats=len(values),
            images_per_second_median=median,
            images_per_second_min=float(values.min()),
            images_per_second_max=float(values.max()),
            images_per_second_iqr=float(q3 - q1),
            images_per_second_ci95_low=low,
            images_per_second_ci95_high=high,
            images_per_second_ci95_halfwidth_pct=100.0 * (high - low) / 2.0 / median if median else None,
            images_per_second_cv=cv,
            stable=cv <= STABLE_CV,
        )


@dataclass(kw_only=True)
class FitFigures(Record):
    """Fit to measure (bench.machine.fitness): the verdict on the machine during the measured window
    (or runs), its reasons ('; '-joined, empty when fit) and notes, and the figures behind them; last
    in every scenario's record. All None (none written) when nothing was watched."""

    fit_to_measure: Optional[bool] = None
    fit_reasons: Optional[str] = None
    fit_notes: Optional[str] = None
    fit_other_cpu_cores: Optional[float] = None  # CPU used by processes outside the run, in cores
    fit_usable_cores: Optional[float] = None  # affinity, capped by the cgroup CPU quota
    fit_cpu_demand: Optional[int] = None  # threads x ranks + loader workers on this host (model runs)
    fit_load_average: Optional[float] = None  # 1-minute, at the window's start
    fit_swap_in_mb: Optional[float] = None
    fit_gpu_sm_clock_ratio: Optional[float] = None  # mean SM clock over the window / max

    @classmethod
    def of(cls, verdict: Mapping[str, Any]) -> "FitFigures":
        """The fields of a verdict's dict (bench.machine.fitness.Verdict.as_dict; {}: not watched)."""
        return cls(**{f.name: verdict[f.name] for f in fields(cls) if f.name in verdict})


def leaves(value: Any, leaf: Callable[[Any], Any]) -> Any:
    """`value` with `leaf` applied to every value in its mappings, lists and tuples (as dicts and lists)."""
    if isinstance(value, Mapping):
        return {k: leaves(v, leaf) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [leaves(v, leaf) for v in value]
    return leaf(value)


def strict(value: Any) -> Any:
    """A value JSON can carry: non-finite floats (nan, inf) become None (null), recursively."""
    return leaves(value, lambda v: None if isinstance(v, float) and not math.isfinite(v) else v)


def final_line(metrics: Mapping[str, Any]) -> str:
    """The last stdout line of a run: `{"radix_metrics": {...}}` (the original Radix contract,
    extended), always strict JSON: a figure that is not a finite number is null."""
    return json.dumps({"radix_metrics": strict(dict(metrics))}, default=str, allow_nan=False)


def write_text(path: Path, text: str) -> Path:
    """Write to a temporary name and rename: the file is complete or absent, never half-written.
    Every run file goes through here, and through bench.secrets.redact."""
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        tmp.write_text(redact(text))
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def write_json(path: Path, data: Any) -> Path:
    return write_text(path, json.dumps(strict(data), indent=2, default=str, allow_nan=False) + "\n")


def write_jsonl(path: Path, rows: Iterable[Mapping[str, Any]]) -> Path:
    return write_text(path, "".join(json.dumps(strict(dict(row)), default=str, allow_nan=False) + "\n" for row in rows))


def write_csv(path: Path, fields: Sequence[str], rows: Iterable[Any]) -> Path:
    """Rows are dicts (by field name) or sequences (in field order)."""
    buffer = io.StringIO()
    csv.writer(buffer).writerow(fields)  # the header, as DictWriter.writeheader writes it
    by_name = (rows := list(rows)) and isinstance(rows[0], Mapping)
    writer: Any = csv.DictWriter(buffer, fieldnames=list(fields)) if by_name else csv.writer(buffer)
    writer.writerows(rows)
    return write_text(path, buffer.getvalue())


def read_summary(job_dir: Path) -> Dict[str, Any]:
    return json.loads((job_dir / "run_summary.json").read_text())


def note_run(out_dir: Path, run_name: str, files: Sequence[Path]) -> None:
    """run_summary.json gets the run's name (its MLflow name, tracked or not) and the files it wrote
    (names in `out_dir`), written after the tracker has them: what `bench.tools.upload` sends later."""
    if not (out_dir / "run_summary.json").is_file():  # a scenario that keeps none cannot be uploaded anyway
        return
    names = [str(Path(f).relative_to(out_dir)) for f in files if Path(f).is_relative_to(out_dir)]
    write_json(out_dir / "run_summary.json", {**read_summary(out_dir), "run_name": run_name, "files": names})


def read_column(path: Path, column: str) -> List[float]:
    """One numeric column of a CSV file ([] when the file is not there)."""
    if not path.is_file():
        return []
    with path.open() as fh:
        return [float(row[column]) for row in csv.DictReader(fh)]


@contextmanager
def room_kept(out_dir: Path) -> Iterator[None]:
    """error.txt, even on a full disk: while a run runs, room for the file is held in its directory
    (ERROR_RESERVE, a hidden file of ERROR_ROOM bytes; what fits when the disk is full already);
    write_error gives the room back and writes the reason there. The reservation goes when the run
    ends, however it ends (a run killed with SIGKILL leaves it in its own directory). The file is
    flock-ed meanwhile, the run's sign of life (`running`): the kernel frees it when the process dies."""
    fd = -1
    with suppress(OSError):  # no flock here: the run goes on, unseen by `running`
        fd = os.open(out_dir / ERROR_RESERVE, os.O_RDWR | os.O_CREAT, 0o644)
        fcntl.flock(fd, fcntl.LOCK_EX)  # waits only while a report's `running` probes it
    with suppress(OSError):  # a full disk: the room that fit
        (out_dir / ERROR_RESERVE).write_bytes(b"\0" * ERROR_ROOM)
    try:
        yield
    finally:
        _release_room(out_dir)
        if fd >= 0:
            os.close(fd)  # the lock with it, unless a forked child still runs


def running(out_dir: Path) -> bool:
    """Whether a run still runs in `out_dir` (room_kept holds its lock): what bench.report calls RUNNING."""
    try:
        fd = os.open(out_dir / ERROR_RESERVE, os.O_RDONLY)
    except OSError:  # none: no run there now
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)  # freed at once by the close below
        return False
    except OSError as exc:  # held by the run (a filesystem without flock cannot tell)
        return isinstance(exc, BlockingIOError)
    finally:
        os.close(fd)


def _release_room(out_dir: Path) -> None:
    try:
        with suppress(FileNotFoundError):
            os.truncate(out_dir / ERROR_RESERVE, 0)  # its room back now: room_kept's lock keeps the file open
        (out_dir / ERROR_RESERVE).unlink(missing_ok=True)
    except OSError as exc:
        log.debug("could not remove %s: %s", out_dir / ERROR_RESERVE, exc)


def write_error(out_dir: Path, text: str) -> Path:
    """error.txt with `text` (redacted; its last ERROR_ROOM bytes when longer), written in the room
    the run reserved; raises OSError when even that cannot be done."""
    _release_room(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    data = redact(text).encode()[-ERROR_ROOM:]
    path = out_dir / "error.txt"
    path.write_bytes(data if data.endswith(b"\n") else data + b"\n")
    return path
