"""`python -m bench.compare A B --rerun N`: a verdict that holds between processes.

Repeats inside one process (benchmark.repeats) miss the run-to-run spread: process start, memory
layout, clocks, neighbours. Two runs of one unchanged config differ by more than their in-process
interval admits, and a CI gate that fails on an unchanged commit gets switched off. Here both
configs are run again as fresh processes, interleaved A-B-B-A (A the baseline, B the candidate:
baseline, candidate, candidate, baseline) for N rounds (2 to MAX_ROUNDS; bench.analysis.rounds),
each run's images/s one figure, and judged against the noise between the processes
(bench.analysis.rerun_verdict: slower, faster, same, can't tell at this noise, or not judged when a
process was not fit to measure).

A and B are run directories (a run's, or a sweep job's): their `.hydra/overrides.yaml` is the
command run again, with tracking off and the outputs under --out/rerun. Each child is started by
bench.api.run_child: it ends when this command is interrupted or killed. A line
says what will run, a tqdm bar (on a terminal) follows the processes, a line per round gives its
figures, and the result is the page a plain compare writes (bench.tools.compare_output): a row per
round (each side's mean, their ratio) under the paired ratio, the median of those ratios.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple

import yaml
from tqdm import tqdm

from bench import api
from bench.analysis.rerun_verdict import judge, unfit_sides
from bench.analysis.rounds import alternate
from bench.analysis.verdicts import Pair, with_fitness
from bench.errors import BenchError, ReportError
from bench.machine.fitness import unfit_reason

RERUN_TIMEOUT_S = 3600  # one run of the config, however large: a hang guard only
MAX_ROUNDS = 20  # 4 fresh processes a round: 80 at most (more rounds narrow the interval slowly)
ORDER = "A-B-B-A (A the baseline, B the candidate)"  # the rounds' order, as the line, the page and the docs name it


def check_rounds(rounds: int) -> None:
    if not 2 <= rounds <= MAX_ROUNDS:
        raise ReportError(
            f"--rerun={rounds} is not valid: accepted 2 to {MAX_ROUNDS} rounds (one round has no spread; "
            f"each round runs 4 fresh processes)"
        )


def rerun_overrides(run_dir: str, what: str) -> List[str]:
    """The overrides the run at `run_dir` was started with (hydra.* ones left out)."""
    path = Path(run_dir) / ".hydra" / "overrides.yaml"
    if not path.is_file():
        raise ReportError(
            f"--rerun needs run directories: {what} {run_dir} has no .hydra/overrides.yaml "
            "(pass the directory of a run or of a sweep's job)"
        )
    return [str(o) for o in yaml.safe_load(path.read_text()) or [] if not str(o).lstrip("+~").startswith("hydra.")]


def rerun_figure(run_dir: str) -> Tuple[str, str]:
    """The figure run again and its unit: the run's scenario's compare sample (steps/s of an echo run,
    samples/s of a storage run), images/s where that sample is a latency (inference) or for training."""
    from bench.scenarios import report_class

    summary = Path(run_dir) / "run_summary.json"
    mode = json.loads(summary.read_text()).get("results", {}).get("mode") if summary.is_file() else None
    sample = report_class(mode).view.sample
    return ("images_per_second", "images/s") if sample.lower_is_better else (sample.figure, sample.unit)


def run_once(overrides: List[str], out_dir: Path, side: str, figure: str) -> Tuple[float, Optional[str]]:
    """One fresh `python -m bench` of the config (bench.api.run_child): its `figure` and why it was not
    fit to measure (None when it was)."""
    try:
        done = api.run_child([*overrides, "tracking.enabled=false"], out_dir, timeout=RERUN_TIMEOUT_S)
        code, error = done.exit_code, done.error
    except subprocess.TimeoutExpired:
        raise ReportError(f"the {side} run again took more than {RERUN_TIMEOUT_S} s (outputs in {out_dir})") from None
    except BenchError as exc:
        code, error = exc.exit_code, f"[ERROR] {exc}"
    if error or done.metrics is None:
        raise ReportError(f"the {side} run again failed (exit {code}): {error} (its outputs in {out_dir})")
    metrics = done.metrics.to_metrics()
    if figure not in metrics:
        raise ReportError(
            f"the {side} run again has no {figure} (mode={metrics.get('mode')}): compare runs of one scenario"
        )
    return float(metrics[figure]), unfit_reason(metrics)


def _print(line: str) -> None:
    tqdm.write(line, file=sys.stdout)  # above the bar on a terminal
    sys.stdout.flush()  # a line per round even into a pipe or a CI log


def rerun_compare(
    sides: Dict[str, List[str]],
    rounds: int,
    threshold: float,
    out: Path,
    judge_unfit: bool = False,
    figure: Tuple[str, str] = ("images_per_second", "images/s"),
) -> Pair:
    """Both configs (`sides`: the baseline's and the candidate's overrides) run again, interleaved,
    `rounds` rounds: the verdict on candidate / baseline, with each round's figures
    (bench.analysis.rerun_verdict.judge)."""
    counts = {name: 0 for name in sides}
    unfit: Dict[str, List[str]] = {name: [] for name in sides}
    _print(
        f"rerun: {rounds} rounds of {ORDER}, {4 * rounds} fresh python -m bench processes, "
        f"their outputs in {out / 'rerun'}"
    )
    bar = tqdm(total=4 * rounds, unit="run", desc="rerun", file=sys.stderr, leave=False, disable=None)

    def measure(name: str) -> Callable[[], float]:
        def once() -> float:
            counts[name] += 1
            bar.set_postfix_str(f"round {(sum(counts.values()) + 3) // 4}/{rounds}: {name}")
            rate, reason = run_once(sides[name], out / "rerun" / f"{name}-{counts[name]}", name, figure[0])
            if reason:
                unfit[name].append(reason)
            bar.update(1)
            return rate

        return once

    try:
        measured = alternate({name: measure(name) for name in sides}, rounds, warmup=0, unit=figure[1], echo=_print)
    finally:
        bar.close()
    return with_fitness(judge(measured, threshold), unfit_sides(unfit, counts), judge_unfit)


def label(sides: Dict[str, List[str]]) -> str:
    """What the candidate's overrides change against the baseline's, the baseline's first ("same
    overrides" when nothing)."""
    base, cand = sides["baseline"], sides["candidate"]
    added, dropped = [o for o in cand if o not in base], [o for o in base if o not in cand]
    if not added and not dropped:
        return "same overrides"
    return f"{' '.join(dropped) or '(none)'} vs {' '.join(added) or '(none)'}"
