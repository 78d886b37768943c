"""`python -m bench.sweep_overhead`: what a sweep and DDP cost on this machine, as printed figures.

1. Per-job overhead of a multirun: the wall time of a 4-job tiny sweep (each job starts its
   own worker process) against 4 x the wall time of one tiny run in its own `python -m
   bench` process, alternating A-B-B-A. The difference per job is what the launcher adds.
2. 1 vs 2 CPU processes with gloo: throughput of a small DDP workload at nproc_per_node=1
   and 2, each its own run, A-B-B-A, and the scaling efficiency (speedup / 2).
Both through bench.analysis.rounds: medians of per-round ratios with a 95% interval and verdict.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import List, Sequence

from bench.analysis.rounds import alternate
from bench.api import RunResult, TrainMetrics, run_child
from bench.errors import print_error
from bench.machine.children import exit_without_teardown
from bench.machine.children import run_child as run_process
from bench.tools import ab


def workload(image_size: int, batch_size: int, steps: int, warmup: int) -> List[str]:
    """A resnet18 training run on the CPU, one epoch, untracked."""
    sizes = [f"data.image_size={image_size}", f"data.batch_size={batch_size}"]
    return ["+experiment=cpu_smoke", "model=resnet18", *sizes, *ab.one_epoch(steps, warmup)]


TINY = workload(32, 4, steps=3, warmup=1)


def _bench(args: Sequence[str], run_dir: Path) -> RunResult:
    """One `python -m bench` in its own process (bench.api.run_child); a failure ends the command."""
    done = run_child(args, run_dir, cwd=run_dir.parent)
    if not done.ok:
        sys.exit(f"[ERROR] python -m bench {' '.join(args)} failed (exit {done.exit_code}): {done.error}")
    return done


def _sweep(args: Sequence[str], cwd: Path) -> float:
    """A multirun's wall time: a sweep is not one run (bench.api runs one), so its process is started here."""
    start = time.perf_counter()
    proc = run_process([sys.executable, "-m", "bench", "-m", *args], cwd=cwd)
    if proc.returncode != 0:
        sys.exit(f"[ERROR] python -m bench -m {' '.join(args)} failed (exit {proc.returncode}):\n{proc.stderr[-2000:]}")
    return time.perf_counter() - start


def job_overhead(rounds: int, work: Path) -> None:
    """Jobs per second of a 4-job sweep vs 4 separate runs (rates, so the harness's ratio reads
    "sweep / separate": below 1 is what a sweep job costs more)."""
    runs = iter(range(1_000_000))

    def sweep() -> float:
        return 4 / _sweep([*TINY, "distributed=ddp", "seed=0,1,2,3", f"hydra.sweep.dir={work}/sweep{next(runs)}"], work)

    def separate() -> float:
        number = next(runs)
        return 4 / sum(_bench([*TINY, f"seed={seed}"], work / f"single{number}-{seed}").seconds for seed in range(4))

    found = alternate({"sweep": sweep, "separate": separate}, rounds, warmup=0, unit="jobs/s")
    per_sweep_job, per_run = 1 / found.median("sweep"), 1 / found.median("separate")
    print(f"\nper-job overhead of a multirun (median of {rounds} A-B-B-A rounds):")
    print(f"  4-job sweep: {4 * per_sweep_job:.2f} s = {per_sweep_job:.2f} s per job")
    print(f"  4 x one run in its own process: {4 * per_run:.2f} s = {per_run:.2f} s per run")
    print(
        f"  a sweep job costs {per_sweep_job - per_run:+.2f} s vs a separate `python -m bench` run "
        f"(rate ratio sweep/separate {ab.said(found.ratio('separate'))})"
    )


def gloo_scaling(rounds: int, work: Path, steps: int) -> None:
    ddp = [*workload(64, 16, steps, warmup=3), "distributed=ddp"]
    runs = iter(range(1_000_000))

    def throughput(processes: int) -> float:
        done = _bench([*ddp, f"distributed.nproc_per_node={processes}"], work / f"scaling{next(runs)}-{processes}")
        assert isinstance(done.metrics, TrainMetrics)
        return done.metrics.images_per_second

    sides = {"2 processes": lambda: throughput(2), "1 process": lambda: throughput(1)}
    found = alternate(sides, rounds, warmup=0, unit="img/s")
    speedup = found.ratio("1 process")
    t1, t2 = found.median("1 process"), found.median("2 processes")
    print(f"\n1 vs 2 CPU processes, gloo, resnet18 64x64 batch 16 per process (median of {rounds} A-B-B-A rounds):")
    print(
        f"  1 process {t1:.1f} img/s, 2 processes {t2:.1f} img/s: speedup {speedup.ratio:.2f} "
        f"[95% {speedup.low:.2f}-{speedup.high:.2f}], scaling efficiency {speedup.ratio / 2:.1%} "
        f"(weak scaling; {os.cpu_count()} cores shared by both ranks)"
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.sweep_overhead", description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--steps", type=int, default=30, help="measured steps per run in the gloo scaling check")
    parser.add_argument("--only", choices=["overhead", "scaling"], help="run one of the two checks")
    args = parser.parse_args(argv)
    if problem := ab.below_one(args, "rounds", "steps"):
        return print_error(problem)
    with tempfile.TemporaryDirectory(prefix="bench-sweep-overhead-") as tmp:
        if args.only in (None, "overhead"):
            job_overhead(args.rounds, Path(tmp))
        if args.only in (None, "scaling"):
            gloo_scaling(args.rounds, Path(tmp), args.steps)
    return 0


if __name__ == "__main__":
    exit_without_teardown(main)
