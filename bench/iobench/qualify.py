"""Would this run qualify as an MLPerf Storage result, and how large must the dataset be?

The dataset-size rule (MLPerf Storage submission guidelines, "Minimum dataset size"):
    min_samples_steps_per_epoch = 500 x batch_size x accelerators across all hosts
    min_samples_host_memory     = hosts x memory per host x 5 / record_length
    min_files                   = max(both) / samples_per_file
and the run rules: a warm-up run then 5 runs (their mean is the result, within 5% of each
other), emulated compute, the mean AU at or above the threshold.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import List, Optional, Tuple

from bench.config.storage import StorageBenchmarkConfig
from bench.iobench.result import RunFigures

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
            f"AU: mean {au:.1f}% is below {100 * workload.au_threshold:.0f}%"
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
            f"runs: samples/s spread {spread:.1f}% over the runs, MLPerf wants them within {MAX_SPREAD_PERCENT:.0f}%"
        )
    return not why, size.min_files, "; ".join(why) or None
