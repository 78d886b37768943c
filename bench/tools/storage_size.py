"""`python -m bench.tools.storage_size`: how many files an MLPerf Storage result needs, for your hosts.

    python -m bench.tools.storage_size +experiment=storage_resnet50_h100 --hosts 4 --host-memory-gb 512 \\
        --accelerators-per-host 8

The workload comes from the same overrides `python -m bench` takes; the rule is MLPerf's
(submission guidelines, "Minimum dataset size"): at least 500 steps per epoch over all
accelerators, and at least 5x the RAM of all hosts (bench.iobench.figures). Prints the figures
and the override to add.
"""

from __future__ import annotations

import argparse
import math
from typing import List, Optional

from bench.config import compose
from bench.errors import BenchError, print_error
from bench.iobench.figures import dataset_size, host_memory
from bench.machine.children import exit_without_teardown
from bench.tools import ab


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.tools.storage_size", description=__doc__.split("\n\n")[0])
    parser.add_argument("--hosts", type=int, default=1)
    said = "RAM per host in GB (default: storage.host_memory_gb, else this machine's)"
    parser.add_argument("--host-memory-gb", type=float, help=said)
    parser.add_argument("--accelerators-per-host", type=int, help="default: storage.accelerators")
    args, overrides = parser.parse_known_args(argv)
    if flags := [o for o in overrides if o.startswith("-")]:  # the rest are overrides of the workload
        parser.error(f"unrecognized arguments: {' '.join(flags)}")
    if problem := ab.below_one(args, "hosts", "accelerators_per_host"):
        return print_error(problem)
    if (memory := args.host_memory_gb) is not None and not (math.isfinite(memory) and memory > 0):
        return print_error(f"--host-memory-gb={memory} is not valid: accepted a number of GB above 0.")
    try:
        config = compose("mode=storage", *overrides)
    except BenchError as exc:
        return print_error(str(exc), exc.exit_code)
    storage, workload = config.storage, config.storage.workload
    if args.host_memory_gb is not None:
        storage.host_memory_gb = args.host_memory_gb
    memory = host_memory(storage)
    per_host = args.accelerators_per_host or storage.accelerators
    accelerators = per_host * args.hosts
    size = dataset_size(storage, accelerators, args.hosts, memory)
    print(
        f"workload {workload.name}: batch {workload.batch_size}, {workload.samples_per_file} samples of "
        f"{workload.record_size} B per file; {args.hosts} host(s) x {memory / 2**30:.1f} GiB RAM, {per_host} "
        f"accelerator(s) each ({accelerators} in all)"
    )
    print(f"  500 steps per epoch needs   {size.by_steps:>14,} samples")
    print(f"  5x the hosts' RAM needs     {size.by_memory:>14,} samples")
    print(
        f"  => at least {size.min_files:,} files, {size.min_bytes / 2**30:,.1f} GiB "
        f"(now {workload.num_files:,}: {'enough' if workload.num_files >= size.min_files else 'too few'})"
    )
    print(f"  storage.workload.num_files={size.min_files}")
    return 0


if __name__ == "__main__":
    exit_without_teardown(main)
