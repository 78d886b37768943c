"""What a storage-benchmark run reports, typed: the `radix_metrics` contract of mode=storage.

`RunFigures` are one measured run's figures (read phase, evaluation, checkpoints), merged over
`storage.runs` by bench.iobench.session; `StorageMetrics` is the whole record: the settings, the
prepare phase, the (merged) run figures, the caching verdict (each an inline record: its fields
are written in its place), MLPerf's qualification and the fit-to-measure verdict (every scenario's
bench.results.FitFigures). Field order is key order in the final line; a None field is left out
(a figure with no samples behind it, or a phase that did not run), never written as 0.

What one simulated accelerator measured (`Request`, `EpochStats`, `ReaderResult`): its requests, its
epochs (and eval passes), its checkpoints; plain dataclasses, pickled from an accelerator process
or rank to the reporter. Two accounts of every epoch, side by side:
- strict (bench's own, the fields it always had): the run's first step is warm-up, its time and
  samples are out; `wall_s` runs from the end of that step (or the epoch's start) to the epoch's end;
- MLPerf's (`all_*`, `epoch_s`, `first_step_s`, `au_compute_s`): every step counts for samples/s,
  and each epoch's first step is left out of its AU (MLPerf Storage rules, DLIO 2.0.0's counters).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from bench.results import INLINE, FitFigures, Record, shown


@dataclass
class Request:
    key: str
    epoch: int
    bytes: int
    latency_ms: float
    finished: float  # perf_counter() when the request ended
    step: int = 0  # the step of the run that consumed its last sample (0: none did)


@dataclass
class EpochStats:
    epoch: int
    steps: int = 0  # measured steps (the run's first step is never counted)
    samples: int = 0
    bytes: float = 0.0  # of the measured samples
    wall_s: float = 0.0
    compute_s: float = 0.0
    wait_s: float = 0.0
    all_steps: int = 0  # every step of the epoch, its first included
    all_samples: int = 0
    all_bytes: float = 0.0
    epoch_s: float = 0.0  # from the epoch's start to the end of its last step
    first_step_s: float = 0.0  # the epoch's first step: its start-up, read and compute
    au_compute_s: float = 0.0  # emulated compute of steps 2..n
    checkpoint_s: float = 0.0  # periodic checkpoints written during the epoch (left out of both clocks)

    def add_step(self, samples: int, size: float, compute: float, elapsed: float) -> None:
        """One more step by MLPerf's account; `elapsed`: from the epoch's start to the step's end."""
        self.all_steps += 1
        self.all_samples += samples
        self.all_bytes += size
        if self.all_steps == 1:
            self.first_step_s = elapsed
        else:
            self.au_compute_s += compute
        self.epoch_s = elapsed - self.checkpoint_s

    @property
    def au(self) -> float:
        return self.compute_s / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def mlperf_au(self) -> Optional[float]:
        """compute of steps 2..n / (epoch time - first step); None without a second step."""
        measured = self.epoch_s - self.first_step_s
        return self.au_compute_s / measured if self.all_steps > 1 and measured > 0 else None

    @property
    def mlperf_samples_per_second(self) -> Optional[float]:
        return self.all_samples / self.epoch_s if self.all_samples and self.epoch_s > 0 else None

    @property
    def steady_samples_per_second(self) -> Optional[float]:
        return self.samples / self.wall_s if self.samples and self.wall_s > 0 else None


@dataclass
class ReaderResult:
    client: int
    epochs: List[EpochStats]
    requests: List[Request] = field(default_factory=list)  # measured requests only
    cpu_s: float = 0.0  # CPU time over the measured window: this process's and its reader processes'
    window_start: float = 0.0  # perf_counter() clock of the process that ran it
    step_times_ms: List[float] = field(default_factory=list)
    evals: List[EpochStats] = field(default_factory=list)  # one per evaluation pass
    checkpoints: List[Dict[str, Any]] = field(default_factory=list)  # one per checkpoint written / read
    checkpoint_error: Optional[str] = None
    checkpoint_cache_drop: str = ""  # how the page cache was dropped between checkpoint writes and reads
    host: str = ""
    node: int = 0  # the host's index among the run's hosts
    run: int = 0  # storage.runs: which measured run (warm-up runs are not reported)
    readers: str = ""  # how its read_threads readers ran: threads or processes ("": no read phase)

    def total(self, name: str) -> float:
        return sum(getattr(e, name) for e in self.epochs)


@dataclass(kw_only=True)
class PrepareFigures(Record):
    """How the dataset was written (or found and reused: prepare_skipped)."""

    prepare_skipped: bool = False
    prepare_seconds: float = 0.0
    prepare_written_bytes: int = 0
    prepare_mb_per_second: Optional[float] = None
    prepare_put_latency_ms_p50: Optional[float] = None
    prepare_put_latency_ms_p99: Optional[float] = None


@dataclass(kw_only=True)
class CachingFigures(Record):
    """Could the page cache serve the reads? (MLPerf: a dataset of at least 5x the hosts' RAM.)"""

    dataset_bytes: int = 0
    client_ram_bytes: int = 0
    potential_caching: bool = shown("caching?", default=False, tag=True)


@dataclass(kw_only=True)
class RunFigures(Record):
    """One measured run's figures (bench.iobench.figures, bench.iobench.checkpoint.add_checkpoint_figures)."""

    # read phase, MLPerf Storage's account (first step in; pass on the mean AU)
    mlperf_samples_per_second: Optional[float] = shown("MLPerf samples/s", "{:.1f}", default=None)
    mlperf_mib_per_second: Optional[float] = shown("MLPerf MiB/s", "{:.1f}", default=None)
    mlperf_au_percent: Optional[float] = shown("MLPerf AU %", "{:.1f}", default=None)
    mlperf_au_pass: Optional[bool] = shown("MLPerf pass", default=None, tag=True)
    # read phase, bench's strict account (the run's first step is warm-up; pass on the minimum); compare
    # judges its samples/s: of each measured run (storage.runs > 1, runs.csv), else the run's own (the
    # per-request latencies overlap across readers and accelerators: not a rate, not sampled)
    samples_per_second: Optional[float] = shown("samples/s", "{:.1f}", default=None, sample={"unit": "samples/s"})
    steady_samples_per_second: Optional[float] = None
    read_mb_per_second: Optional[float] = shown("read MB/s", "{:.1f}", default=None)
    requests_per_second: Optional[float] = None
    read_samples: Optional[int] = None
    read_bytes: Optional[int] = None
    read_requests: Optional[int] = None
    read_steps: Optional[int] = None
    read_seconds: Optional[float] = None
    latency_ms_mean: Optional[float] = None
    latency_ms_p50: Optional[float] = shown("latency p50 ms", "{:.2f}", default=None)
    latency_ms_p90: Optional[float] = None
    latency_ms_p99: Optional[float] = shown("latency p99 ms", "{:.2f}", default=None)
    latency_ms_max: Optional[float] = None
    step_time_ms_p50: Optional[float] = None
    step_time_ms_p99: Optional[float] = None
    data_wait_fraction: Optional[float] = None
    au_percent_mean: Optional[float] = shown("AU mean %", "{:.1f}", default=None)
    au_percent_min: Optional[float] = shown("AU min %", "{:.1f}", default=None)
    au_threshold_percent: Optional[float] = None
    client_cpu_seconds: Optional[float] = None
    client_cpu_percent: Optional[float] = None
    client_cpu_seconds_per_gb: Optional[float] = None
    au_pass: Optional[bool] = shown("AU pass", default=None, tag=True)
    # evaluation passes (MLPerf's rules, no pass mark)
    eval_samples_per_second: Optional[float] = None
    eval_mib_per_second: Optional[float] = None
    eval_au_percent: Optional[float] = None
    eval_seconds: Optional[float] = None
    # checkpoint phase (the slowest client per checkpoint, averaged over checkpoints)
    checkpoint_error: Optional[str] = None
    checkpoint_bytes: Optional[int] = None
    checkpoint_count: Optional[int] = None
    checkpoint_clients: Optional[int] = None
    checkpoint_write_seconds: Optional[float] = None
    checkpoint_write_gbps: Optional[float] = shown("ckpt write GB/s", "{:.2f}", at=1, default=None)  # last column
    checkpoint_serialize_seconds: Optional[float] = None
    checkpoint_store_write_seconds: Optional[float] = None
    checkpoint_store_write_gbps: Optional[float] = None
    checkpoint_read_seconds: Optional[float] = None
    checkpoint_read_gbps: Optional[float] = None
    checkpoint_deserialize_seconds: Optional[float] = None
    checkpoint_store_read_seconds: Optional[float] = None
    checkpoint_store_read_gbps: Optional[float] = None
    checkpoint_cache_drop: Optional[str] = None
    periodic_checkpoints: Optional[int] = None
    periodic_checkpoint_bytes: Optional[int] = None
    periodic_checkpoint_seconds: Optional[float] = None
    periodic_checkpoint_store_write_gbps: Optional[float] = None
    # several measured runs: the spread of MLPerf samples/s over them
    runs_samples_per_second_spread_percent: Optional[float] = None


@dataclass(kw_only=True)
class StorageMetrics(Record):
    """A storage-benchmark run's figures, field by field in the order they are written."""

    mode: str = shown(default="storage", tag=True)
    workload: str = shown("workload", tag=True)
    storage: str = shown("storage", tag=True)
    # the S3 library, or how a local disk was read (posix, o_direct, ...)
    storage_client: str = shown("client", tag=True)
    storage_url: str = shown(tag=True)
    clients: int = shown("clients")  # = accelerators (the name it had first)
    accelerators: int
    hosts: int
    format: str
    verify_records: bool = True  # false: a read ceiling, the records' checks (and their CPU) left out
    read_mode: str
    shuffle: str
    num_files: int
    samples_per_file: int
    record_size: int
    batch_size: int
    read_threads: int
    readers: str = "threads"  # threads or processes (storage.workload.readers, auto resolved); none: no read phase
    prefetch: int
    computation_time: float
    epochs: int
    runs: int
    warmup_runs: int
    prepare: PrepareFigures = field(default_factory=PrepareFigures, metadata=INLINE)
    figures: RunFigures = field(default_factory=RunFigures, metadata=INLINE)
    caching: CachingFigures = field(default_factory=CachingFigures, metadata=INLINE)
    # set last, from the figures above (bench.iobench.figures)
    mlperf_qualifies: Optional[bool] = shown(default=None, tag=True)
    mlperf_min_num_files: Optional[int] = None
    mlperf_not_qualified_because: Optional[str] = None
    fit: FitFigures = field(default_factory=FitFigures, metadata=INLINE)  # last, as in every scenario's record
