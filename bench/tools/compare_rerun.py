"""`python -m bench.compare A B --rerun N`: a verdict that holds between processes.

Repeats inside one process (benchmark.repeats) miss the run-to-run spread: process start, memory
layout, clocks, neighbours. Two runs of one unchanged config differ by more than their in-process
interval admits, and a CI gate that fails on an unchanged commit gets switched off. Here both
configs are run again as fresh processes, interleaved A-B-B-A for N rounds
(bench.analysis.rounds), each run's images/s one figure:

- the ratio candidate / baseline is the median of the per-round ratios, with its 95% interval;
- the noise floor is what a config does against itself: the largest gap between the two runs of
  one side within a round (A against A, B against B);
- slower (faster) needs the ratio beyond both the threshold and the noise floor, and the whole
  interval below (above) 1; anything else is "same": a difference this noise cannot tell.

A and B are run directories (a run's, or a sweep job's): their `.hydra/overrides.yaml` is the
command run again, with tracking off and the outputs under --out/rerun.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, List

import yaml

from bench.analysis.rounds import Rounds, alternate, figure
from bench.errors import ReportError

SLOWER, FASTER, SAME = "slower", "faster", "same"
RERUN_TIMEOUT_S = 3600  # one run of the config, however large: a hang guard only


def rerun_overrides(run_dir: str, what: str) -> List[str]:
    """The overrides the run at `run_dir` was started with (hydra.* ones left out)."""
    path = Path(run_dir) / ".hydra" / "overrides.yaml"
    if not path.is_file():
        raise ReportError(
            f"--rerun needs run directories: {what} {run_dir} has no .hydra/overrides.yaml "
            "(pass the directory of a run or of a sweep's job)"
        )
    overrides = yaml.safe_load(path.read_text()) or []
    return [str(o) for o in overrides if not str(o).lstrip("+~").startswith("hydra.")]


@dataclass
class RerunVerdict:
    ratio: float  # candidate / baseline, the median of the per-round ratios
    low: float
    high: float
    noise_floor: float  # the largest A-against-A (or B-against-B) gap within a round, as a fraction
    verdict: str
    why: str


def noise_floor(rounds: Rounds) -> float:
    """The largest gap between a side's two runs within one round (A-B-B-A: each side runs twice)."""
    gaps = []
    for values in rounds.figures.values():
        for first, second in zip(values[0::2], values[1::2], strict=True):
            if min(first, second) > 0:
                gaps.append(max(first, second) / min(first, second) - 1)
    return max(gaps, default=0.0)


def judge(rounds: Rounds, threshold: float) -> RerunVerdict:
    """The verdict on candidate / baseline: beyond the threshold, the noise floor and the interval, or same."""
    ratio = rounds.ratio("baseline", "candidate")
    floor = noise_floor(rounds)
    margin = max(threshold, floor)
    said = f"beyond the {100 * threshold:g}% threshold and the {100 * floor:.1f}% noise floor"
    if ratio.ratio < 1 / (1 + margin) and ratio.high < 1:
        return RerunVerdict(
            ratio.ratio, ratio.low, ratio.high, floor, SLOWER, f"slower by {100 * (1 - ratio.ratio):.1f}% ({said})"
        )
    if ratio.ratio > 1 + margin and ratio.low > 1:
        return RerunVerdict(
            ratio.ratio, ratio.low, ratio.high, floor, FASTER, f"faster by {100 * (ratio.ratio - 1):.1f}% ({said})"
        )
    why = (
        "within noise: the interval holds 1"
        if ratio.low <= 1 <= ratio.high
        else f"within the {100 * margin:.1f}% the threshold and the noise floor allow"
    )
    return RerunVerdict(ratio.ratio, ratio.low, ratio.high, floor, SAME, why)


def run_once(overrides: List[str], out_dir: Path, side: str) -> float:
    """One fresh `python -m bench` of the config; its images/s (from its final line)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        [sys.executable, "-m", "bench", *overrides, "tracking.enabled=false", f"hydra.run.dir={out_dir}"],
        capture_output=True,
        text=True,
        timeout=RERUN_TIMEOUT_S,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith('{"radix_metrics"')]
    if done.returncode != 0 or not lines:
        errors = [line for line in done.stderr.splitlines() if line.startswith("[ERROR]")]
        raise ReportError(
            f"the {side} run again failed (exit {done.returncode}): "
            f"{errors[-1] if errors else done.stderr.strip()[-300:]} (its outputs in {out_dir})"
        )
    metrics = json.loads(lines[-1])["radix_metrics"]
    return float(metrics["images_per_second"])


def rerun_compare(
    baseline: str, candidate: str, rounds: int, threshold: float, out: Path, echo: Callable[[str], None] = print
) -> RerunVerdict:
    """Both configs run again, interleaved, `rounds` rounds; the verdict on candidate / baseline."""
    if rounds < 2:
        raise ReportError(f"--rerun={rounds} is not valid: accepted 2 or more rounds (one round has no spread)")
    sides = {"candidate": rerun_overrides(candidate, "candidate"), "baseline": rerun_overrides(baseline, "baseline")}
    counts = {name: 0 for name in sides}

    def measure(name: str) -> Callable[[], float]:
        def once() -> float:
            counts[name] += 1
            return run_once(sides[name], out / "rerun" / f"{name}-{counts[name]}", name)

        return once

    measured = alternate({name: measure(name) for name in sides}, rounds, warmup=0, unit="images/s", echo=echo)
    result = judge(measured, threshold)
    echo(
        f"baseline median {figure(measured.median('baseline'))}, candidate median "
        f"{figure(measured.median('candidate'))} images/s over {rounds} rounds of fresh processes; "
        f"ratio {result.ratio:.3f} [95% {result.low:.3f}-{result.high:.3f}], noise floor "
        f"{100 * result.noise_floor:.1f}%"
    )
    return result


def said(result: RerunVerdict) -> str:
    """The verdict in words: "slower by 76.8% (beyond ...)", or "same (within noise: ...)"."""
    return result.why if result.verdict != SAME else f"same ({result.why})"
