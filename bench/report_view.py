"""What a sweep, `bench.report` and `bench.compare` show of a scenario's runs (its report class's
`view`), built from what its record's fields declare (bench.results.shown: the sweep table's columns,
the sample compare judges and its unit) with the generic columns (job, status, overrides, error)
declared here once; plus its plots and what is read back from MLflow. bench.analysis reads these and
names no scenario's figure. Kept low and import-free (bench.results and bench.runtime's model views use it)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, List, Mapping, Optional, Sequence, Tuple

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["DISPLAY", "Column", "Plots", "Sample", "Scaling", "View", "as_shown", "rounded"]

# the figures MLflow's UI shows as a rounded copy (a metric of its own: the UI prints raw floats cut
# off), and the copy's name; the copies are dropped again when runs are read back. Each scenario's
# headline (its Sample.figure) is one: a sweep's view shows it as a column
DISPLAY = {"images_per_second": "images/s", "samples_per_second": "samples/s", "latency_ms_p50": "latency p50 ms"}


def rounded(value: float, digits: int = 4) -> float:
    """`value` to `digits` significant digits (4692.4 -> 4692, 7.326087 -> 7.326): the DISPLAY copy's value."""
    import math

    if not math.isfinite(value) or value == 0:
        return value
    return round(value, max(0, digits - 1 - math.floor(math.log10(abs(value)))))


def as_shown(value: float) -> str:
    """A DISPLAY figure as MLflow's table and charts print its copy (10.1523 -> "10.15", 4692.4 -> "4692",
    10.1 -> "10.1"): a sweep's table shows it so, the two agree to the digit."""
    return repr(rounded(float(value))).removesuffix(".0")


Column = Tuple[str, str, str]  # (header, frame column = a radix_metrics key, format)
Plots = Callable[["pd.DataFrame", Path, str], List[Path]]
# every scenario's table: who ran, how it ended, what the command line said; then its own; the error last
HEAD: List[Column] = [("job", "job", "{}"), ("status", "status", "{}"), ("overrides", "overrides", "{}")]
ERROR: Column = ("error", "error", "{}")


def no_plots(frame: "pd.DataFrame", out: Path, title: str) -> List[Path]:
    return []


@dataclass(frozen=True)
class Sample:
    """What `python -m bench.compare` samples of a run of a scenario, and its unit on the page.

    The samples, in the order compare tries them: the run's repeats (`BaseReport.repeats`: this
    figure per measured window, when both runs have 2 or more), then its timeline (`timeline`: one
    value per step or request) when `per_step` says how to read it, else the run's own `figure`
    alone (a point ratio, no interval)."""

    figure: str  # the run's own figure (a radix_metrics key): what compare reports without samples
    unit: str  # its unit on compare's page and table: "images/s", "samples/s", "ms"
    # how a timeline entry (a step time in ms) becomes this figure: the rate is items / summed time, the
    # items per entry being the first of these figures a run has; () : the timeline is not sampled
    per_step: Tuple[str, ...] = ()
    timeline_is_figure: bool = False  # the timeline entries are the figure itself (a latency in ms): its median
    lower_is_better: bool = False  # a latency: the ratio compare judges is baseline / candidate (>1: faster)
    from_repeats: bool = True  # the repeats (`BaseReport.repeats`) are this figure per window


@dataclass(frozen=True)
class Scaling:
    """The figures a sweep's scaling columns come from (bench.analysis.scaling: speedup against the
    1-process run of the same configuration, and the data-wait percentage)."""

    processes: str  # the figure counting the run's processes (world_size)
    throughput: str  # the figure that speeds up (images_per_second)
    wait_fraction: Optional[str] = None  # the window's share spent waiting for data: data_wait_percent


@dataclass(frozen=True)
class View:
    """What a sweep, `bench.report` and `bench.compare` show of a scenario's runs, and where they
    read it back from: the scenario's report class declares it (its `view`); bench.analysis asks
    it and names no scenario's fields."""

    sample: Sample
    columns: List[Column]  # the sweep table; "error" last
    plots: Plots = no_plots  # the sweep's PNGs: (frame, out dir, title) -> files written
    optional_columns: List[Column] = field(default_factory=list)  # shown before "error" when some job has them
    # what names a single run in compare (prefix, figure, format)
    label_columns: List[Column] = field(default_factory=list)
    timeline_metric: Optional[str] = None  # the MLflow series of the timeline (step times, latencies)
    repeats_metric: Optional[str] = None  # the MLflow series of the repeats' figure (None: none)
    # config key -> figure column: a run read back from MLflow has its names in its params only
    named_in_config: Mapping[str, str] = field(default_factory=dict)
    # config keys the table shows under a column of their own already (not again as a swept key)
    shown_config: Tuple[str, ...] = ()
    scaling: Optional[Scaling] = None  # speedup and scaling efficiency over process counts (None: none)

    @classmethod
    def of(cls, record: Any, more: Sequence[Tuple[str, str, str, int]] = (), **options: Any) -> "View":
        """The view a record type declares (a bench.results.Record: its fields' columns and sample),
        between the generic columns; `more`: (header, key, format, at) of figures it holds in a spread
        group or the sweep derives (speedup), placed by `at` among its own."""
        return cls(sample=record.sample(), columns=[*HEAD, *record.columns(more), ERROR], **options)
