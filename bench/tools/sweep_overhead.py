"""`python -m bench.sweep_overhead`: what a sweep and DDP cost on this machine, as printed figures.

1. Per-job overhead of a multirun: the wall time of a 4-job tiny sweep (each job starts its
   own worker process) against 4 x the wall time of one tiny run in its own `python -m
   bench` process, alternating A-B-B-A. The difference per job is what the launcher adds.
2. 1 vs 2 CPU processes with gloo: throughput of a small DDP workload at nproc_per_node=1
   and 2 (swept in both orders), and the scaling efficiency the report computes.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Sequence

TINY = ["+experiment=cpu_smoke", "model=resnet18", "data.image_size=32", "data.batch_size=4", "train.epochs=1",
        "train.steps_per_epoch=3", "benchmark.warmup_steps=1", "benchmark.progress=false", "tracking.enabled=false"]


def _bench(args: Sequence[str], cwd: Path) -> float:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "bench", *args], cwd=cwd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"[ERROR] python -m bench {' '.join(args)} failed (exit {proc.returncode}):\n{proc.stderr[-2000:]}")
    return time.perf_counter() - start


def job_overhead(rounds: int, work: Path) -> None:
    sweep_args = ["-m", *TINY, "distributed=ddp", "seed=0,1,2,3"]
    sweeps: List[float] = []
    singles: List[float] = []
    for index in range(rounds):
        order = ("sweep", "single") if index % 2 == 0 else ("single", "sweep")
        for what in order:
            if what == "sweep":
                sweeps.append(_bench([*sweep_args, f"hydra.sweep.dir={work}/sweep{index}"], work))
            else:
                singles.append(sum(_bench([*TINY, f"seed={seed}", f"hydra.run.dir={work}/single{index}-{seed}"], work)
                                   for seed in range(4)))
        print(f"round {index + 1}: 4-job sweep {sweeps[-1]:.2f} s, 4 single runs {singles[-1]:.2f} s", flush=True)
    sweep, single = statistics.median(sweeps), statistics.median(singles)
    print(f"\nper-job overhead of a multirun (median of {rounds} rounds):")
    print(f"  4-job sweep: {sweep:.2f} s = {sweep / 4:.2f} s per job")
    print(f"  4 x one run in its own process: {single:.2f} s = {single / 4:.2f} s per run")
    print(f"  a sweep job costs {sweep / 4 - single / 4:+.2f} s vs a separate `python -m bench` run "
          f"(ratio {sweep / single:.2f})")


def _throughputs(sweep_dir: Path) -> Dict[int, float]:
    found = {}
    for summary in sweep_dir.glob("*/run_summary.json"):
        results = json.loads(summary.read_text())["results"]
        found[int(results["world_size"])] = float(results["images_per_second"])
    return found


def gloo_scaling(rounds: int, work: Path, steps: int) -> None:
    workload = ["+experiment=cpu_smoke", "model=resnet18", "data.image_size=64", "data.batch_size=16",
                "train.epochs=1", f"train.steps_per_epoch={steps}", "benchmark.warmup_steps=3",
                "benchmark.progress=false", "tracking.enabled=false", "distributed=ddp"]
    one: List[float] = []
    two: List[float] = []
    for index in range(rounds):
        counts = "1,2" if index % 2 == 0 else "2,1"
        sweep_dir = work / f"scaling{index}"
        _bench(["-m", *workload, f"distributed.nproc_per_node={counts}", f"hydra.sweep.dir={sweep_dir}"], work)
        found = _throughputs(sweep_dir)
        one.append(found[1])
        two.append(found[2])
        print(f"round {index + 1} ({counts}): 1 process {found[1]:.1f} img/s, 2 processes {found[2]:.1f} img/s, "
              f"efficiency {found[2] / (2 * found[1]):.1%}", flush=True)
    t1, t2 = statistics.median(one), statistics.median(two)
    print(f"\n1 vs 2 CPU processes, gloo, resnet18 64x64 batch 16 per process (median of {rounds} rounds):")
    print(f"  1 process {t1:.1f} img/s, 2 processes {t2:.1f} img/s: speedup {t2 / t1:.2f}, "
          f"scaling efficiency {t2 / (2 * t1):.1%} (weak scaling; {os.cpu_count()} cores shared by both ranks)")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.sweep_overhead", description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--steps", type=int, default=30, help="measured steps per run in the gloo scaling check")
    parser.add_argument("--only", choices=["overhead", "scaling"], help="run one of the two checks")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-sweep-overhead-") as tmp:
        if args.only in (None, "overhead"):
            job_overhead(args.rounds, Path(tmp))
        if args.only in (None, "scaling"):
            gloo_scaling(args.rounds, Path(tmp), args.steps)


if __name__ == "__main__":
    main()
