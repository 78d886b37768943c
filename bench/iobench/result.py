"""What a storage-benchmark run reports, typed: the `radix_metrics` contract of mode=storage.

`RunFigures` are one measured run's figures (read phase, evaluation, checkpoints), merged over
`storage.runs` by bench.iobench.session; `StorageMetrics` is the whole record: the settings, the
prepare phase, the (merged) run figures, the caching verdict (each an inline record: its fields
are written in its place), MLPerf's qualification and the fit-to-measure verdict (every scenario's
bench.results.FitFigures). Field order is key order in the final line; a None field is left out
(a figure with no samples behind it, or a phase that did not run), never written as 0."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from bench.results import INLINE, FitFigures, Record, shown


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
    storage_client: str = shown(
        "client", tag=True
    )  # the S3 library, or how a local disk was read (posix, o_direct, ...)
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
    mlperf_qualifies: Optional[bool] = shown(
        default=None, tag=True
    )  # set last, from the figures above (bench.iobench.qualify)
    mlperf_min_num_files: Optional[int] = None
    mlperf_not_qualified_because: Optional[str] = None
    fit: FitFigures = field(default_factory=FitFigures, metadata=INLINE)  # last, as in every scenario's record
