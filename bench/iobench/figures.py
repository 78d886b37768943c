"""The read phase's figures, merged over simulated accelerators: MLPerf's, and bench's stricter ones.

MLPerf Storage (the headline; DLIO 2.0.0's statistics):
- `mlperf_samples_per_second`: per epoch, every sample over the epoch's time, first step
  included; summed over accelerators, averaged over epochs;
- `mlperf_au_percent`: per epoch, emulated compute of steps 2..n over (epoch time - first step);
  averaged over accelerators, then epochs; `mlperf_au_pass` = that MEAN meets the threshold;
- `mlperf_mib_per_second`: samples/s x the nominal record size, in MiB (what DLIO prints as MB/s).
bench's (strict, the names they always had): the run's first step is warm-up and left out;
`samples_per_second` (also `steady_samples_per_second`), `read_mb_per_second` (decimal MB of
bytes actually read), `au_percent_mean` and `au_percent_min` (min over accelerators x epochs),
`au_pass` = the MIN meets the threshold. Requests and latencies are those of the steps after
the warm-up step, each request counted once (by the step that consumed it), pooled over all
accelerators. A figure with no samples behind it is left out, never 0.

Would the run qualify as an MLPerf Storage result, and how large must the dataset be (`qualification`,
`dataset_size`)? The dataset-size rule (MLPerf Storage submission guidelines, "Minimum dataset size"):
    min_samples_steps_per_epoch = 500 x batch_size x accelerators across all hosts
    min_samples_host_memory     = hosts x memory per host x 5 / record_length
    min_files                   = max(both) / samples_per_file
and the run rules: a warm-up run then 5 runs (their mean is the result, within 5% of each
other), emulated compute, the mean AU at or above the threshold.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, replace
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from bench.config.storage import StorageBenchmarkConfig, StorageWorkloadConfig
from bench.iobench.result import EpochStats, ReaderResult, RunFigures
from bench.maths.stats import mean, on_its_side, percentile, rate

log = logging.getLogger(__name__)

MIB = 2**20


def _total_rate(results: Sequence[ReaderResult], amount: str) -> Optional[float]:
    rates = [rate(r.total(amount) if amount != "requests" else len(r.requests), r.total("wall_s")) for r in results]
    measured = [r for r in rates if r is not None]
    return sum(measured) if measured else None


def per_epoch(
    passes: Sequence[Sequence[EpochStats]],
    figure: Callable[[EpochStats], Optional[float]],
    merge: Callable[[List[float]], Optional[float]],
) -> Dict[int, float]:
    """epoch -> `figure` of each accelerator's pass over it, merged over accelerators (sum or mean)."""
    found: Dict[int, List[float]] = {}
    for stats in passes:
        for epoch in stats:
            if (value := figure(epoch)) is not None:
                found.setdefault(epoch.epoch, []).append(value)
    return {epoch: merged for epoch, values in sorted(found.items()) if (merged := merge(values)) is not None}


def mlperf_figures(
    passes: Sequence[Sequence[EpochStats]], workload: StorageWorkloadConfig, computation_time: float
) -> RunFigures:
    """MLPerf's account of a set of passes (training's, or evaluation's): its mlperf_* figures, None
    where no sample is behind them (the pass mark, on the mean AU, is for training's)."""
    rates = per_epoch(passes, lambda e: e.mlperf_samples_per_second, sum)
    aus = per_epoch(passes, lambda e: e.mlperf_au, mean)
    samples_per_second = mean(list(rates.values()))
    au_mean = mean(list(aus.values()))
    au = 100.0 * au_mean if computation_time > 0 and au_mean is not None else None
    return RunFigures(
        mlperf_samples_per_second=samples_per_second,
        mlperf_mib_per_second=samples_per_second * workload.record_size / MIB if samples_per_second else None,
        mlperf_au_percent=au,
        mlperf_au_pass=bool(au is not None and au >= 100.0 * workload.au_threshold),
    )


def read_figures(results: Sequence[ReaderResult], storage: StorageBenchmarkConfig) -> RunFigures:
    figures = _figures(results, storage.workload)
    if not figures.read_requests or (figures.read_steps or 0) < 2 * len(results):
        log.warning(
            "read: only %d measured steps and %d requests after the warm-up step: too few for stable "
            "figures (raise storage.workload.num_files or epochs); figures without samples are left out",
            figures.read_steps,
            figures.read_requests,
        )
    return figures


def _figures(results: Sequence[ReaderResult], workload: StorageWorkloadConfig) -> RunFigures:
    latencies = [r.latency_ms for result in results for r in result.requests]
    step_times = [t for result in results for t in result.step_times_ms]
    computing = workload.computation_time > 0
    epoch_aus = [e.au for result in results for e in result.epochs if e.steps]
    read_bytes = sum(result.total("bytes") for result in results)
    wall = max((result.total("wall_s") for result in results), default=0.0)
    cpu_s = sum(result.cpu_s for result in results)
    read_mb = _total_rate(results, "bytes")
    steady = _total_rate(results, "samples")
    threshold = 100.0 * workload.au_threshold
    au_mean = mean([a for r in results if (a := rate(r.total("compute_s"), r.total("wall_s"))) is not None])
    au_min = 100.0 * min(epoch_aus) if computing and epoch_aus else None
    figures = replace(
        mlperf_figures([r.epochs for r in results], workload, workload.computation_time),
        samples_per_second=steady,
        steady_samples_per_second=steady,
        read_mb_per_second=read_mb / 1e6 if read_mb is not None else None,
        requests_per_second=_total_rate(results, "requests"),
        read_samples=int(sum(result.total("samples") for result in results)),
        read_bytes=int(read_bytes),
        read_requests=len(latencies),
        read_steps=int(sum(result.total("steps") for result in results)),
        read_seconds=wall,
        latency_ms_mean=mean(latencies),
        latency_ms_p50=percentile(latencies, 50),
        latency_ms_p90=percentile(latencies, 90),
        latency_ms_p99=percentile(latencies, 99),
        latency_ms_max=max(latencies, default=None),
        step_time_ms_p50=percentile(step_times, 50),
        step_time_ms_p99=percentile(step_times, 99),
        data_wait_fraction=rate(sum(r.total("wait_s") for r in results), sum(r.total("wall_s") for r in results)),
        # AU only means something when there is compute to keep busy (computation_time > 0)
        au_percent_mean=100.0 * au_mean if computing and au_mean is not None else None,
        au_percent_min=au_min,
        au_threshold_percent=threshold,
        client_cpu_seconds=cpu_s,
        client_cpu_percent=100.0 * cpu_s / wall if wall > 0 else None,  # of one core, all accelerators
        client_cpu_seconds_per_gb=cpu_s / (read_bytes / 1e9) if read_bytes else None,
        au_pass=bool(computing and epoch_aus and au_min is not None and au_min >= threshold),
    )
    if evals := [r.evals for r in results if r.evals]:
        evaluation = mlperf_figures(evals, workload, workload.eval_computation_time)
        figures.eval_samples_per_second = evaluation.mlperf_samples_per_second
        figures.eval_mib_per_second = evaluation.mlperf_mib_per_second
        figures.eval_au_percent = evaluation.mlperf_au_percent
        figures.eval_seconds = max(sum(e.epoch_s for e in passes) for passes in evals)
    return figures


def epoch_rows(results: Sequence[ReaderResult]) -> List[Dict[str, Any]]:
    """epochs.csv: one row per accelerator x epoch, strict and MLPerf figures side by side."""

    def figure(value: Optional[float], scale: float = 1.0) -> Any:
        return round(scale * value, 3) if value is not None else ""  # an empty cell: no samples behind it

    def seconds(epoch: EpochStats, *names: str) -> Dict[str, float]:
        return {name: round(getattr(epoch, name), 6) for name in names}

    return [
        {
            "client": r.client,
            "epoch": e.epoch,
            "steps": e.steps,
            "samples": e.samples,
            "bytes": int(e.bytes),
            **seconds(e, "wall_s", "compute_s", "wait_s"),
            "au_percent": round(100.0 * e.au, 3),
            "all_steps": e.all_steps,
            "all_samples": e.all_samples,
            "all_bytes": int(e.all_bytes),
            **seconds(e, "epoch_s", "first_step_s", "au_compute_s", "checkpoint_s"),
            "samples_per_second": figure(e.mlperf_samples_per_second),
            "steady_samples_per_second": figure(e.steady_samples_per_second),
            "mlperf_au_percent": figure(e.mlperf_au, 100.0),
        }
        for r in results
        for e in r.epochs
    ]


def client_rows(results: Sequence[ReaderResult], workload: StorageWorkloadConfig) -> List[Dict[str, Any]]:
    """clients.csv: one row per simulated accelerator (what rank 0 gathered from every client): its own
    figures, figured as the run's are (an empty cell: no samples behind it)."""
    rows = []
    for r in results:
        f = _figures([r], workload)
        own = {
            "mlperf_samples_per_second": f.mlperf_samples_per_second,
            "mlperf_au_percent": f.mlperf_au_percent,
            "au_percent": f.au_percent_mean,
            "read_requests": f.read_requests,
            "latency_ms_p50": f.latency_ms_p50,
            "latency_ms_p99": f.latency_ms_p99,
        }
        rows.append({"client": r.client, "host": r.host, "node": r.node, "run": r.run})
        rows[-1].update({column: "" if value is None else value for column, value in own.items()})
    return rows


# ---- MLPerf's qualification
MIN_STEPS_PER_EPOCH = 500
HOST_MEMORY_MULTIPLIER = 5
MEASURED_RUNS, WARMUP_RUNS = 5, 1
MAX_SPREAD_PERCENT = 5.0


@dataclass(frozen=True)
class DatasetSize:
    min_files: int
    min_bytes: int
    by_steps: int  # samples the 500-steps rule needs
    by_memory: int  # samples the 5x-RAM rule needs

    def explain(self, hosts: int, memory_bytes: float, accelerators: int) -> str:
        rule = "5x the hosts' RAM" if self.by_memory >= self.by_steps else f"{MIN_STEPS_PER_EPOCH} steps per epoch"
        return (
            f"at least {self.min_files} files ({self.min_bytes / 2**30:.1f} GiB; set by {rule}: {hosts} host(s) x "
            f"{memory_bytes / 2**30:.1f} GiB, {accelerators} accelerator(s))"
        )


def dataset_size(storage: StorageBenchmarkConfig, accelerators: int, hosts: int, memory_bytes: float) -> DatasetSize:
    workload = storage.workload
    by_steps = MIN_STEPS_PER_EPOCH * workload.batch_size * accelerators
    by_memory = math.ceil(hosts * memory_bytes * HOST_MEMORY_MULTIPLIER / workload.record_size)
    samples = max(by_steps, by_memory)
    files = math.ceil(samples / workload.samples_per_file)
    return DatasetSize(files, samples * workload.record_size, by_steps, by_memory)


def host_memory(storage: StorageBenchmarkConfig) -> float:
    """Bytes of RAM per host for the sizing rule: storage.host_memory_gb (in GB as MLPerf's script
    counts them, x 1024^3), else this machine's."""
    if storage.host_memory_gb is not None:
        return storage.host_memory_gb * 2**30
    import psutil

    return float(psutil.virtual_memory().total)


def au_shown(au: Optional[float], threshold: float) -> str:
    """An AU % to one place, or to as many as keep it on its side of the threshold: 89.96 printed
    "90.0%" reads as meeting 90%."""
    return "n/a" if au is None else f"{on_its_side(au, threshold, 1)}%"


def qualification(
    figures: RunFigures, storage: StorageBenchmarkConfig, accelerators: int, hosts: int
) -> Tuple[bool, int, Optional[str]]:
    """(mlperf_qualifies, the number of files it needed, and every reason why not; None when it does)."""
    workload = storage.workload
    memory = host_memory(storage)
    size = dataset_size(storage, accelerators, hosts, memory)
    why: List[str] = []
    if workload.checkpoint_only:
        why.append("a checkpoint-only run is not a training result")
    if workload.num_files < size.min_files:
        why.append(f"dataset: {workload.num_files} files, MLPerf needs {size.explain(hosts, memory, accelerators)}")
    if workload.computation_time <= 0:
        why.append("computation_time=0: an I/O ceiling, no emulated accelerator to keep busy")
    elif not figures.mlperf_au_pass:
        au = figures.mlperf_au_percent
        why.append(
            f"AU: mean {au_shown(au, 100 * workload.au_threshold)} is below {100 * workload.au_threshold:g}%"
            if au is not None
            else "AU: no step after the first of an epoch was measured"
        )
    if not workload.verify_records:
        why.append("verify_records=false: records read but not checked as their loader would check them")
    if workload.max_steps is not None:
        why.append("storage.workload.max_steps cuts the epochs short")
    if storage.runs < MEASURED_RUNS or storage.warmup_runs < WARMUP_RUNS:
        why.append(
            f"runs: MLPerf wants {WARMUP_RUNS} warm-up run then {MEASURED_RUNS} runs "
            f"(storage.warmup_runs={WARMUP_RUNS} storage.runs={MEASURED_RUNS}); this was "
            f"{storage.warmup_runs} + {storage.runs}"
        )
    if (spread := figures.runs_samples_per_second_spread_percent) is not None and spread > MAX_SPREAD_PERCENT:
        why.append(
            f"runs: samples/s spread {on_its_side(spread, MAX_SPREAD_PERCENT, 1)}% over the runs, "
            f"MLPerf wants them within {MAX_SPREAD_PERCENT:g}%"
        )
    return not why, size.min_files, "; ".join(why) or None
