"""`python -m bench.compare BASELINE CANDIDATE [--threshold 3%]`: is the candidate slower?

(Documented as `python -m bench.compare`: bench/compare.py. Not `python -m bench.iobench.compare`,
which compares storage read paths.)

BASELINE and CANDIDATE are each a run's directory, a sweep's directory (multirun/<date>/<time>),
or an MLflow run id (a single run, or a sweep's parent run). Two sweeps are matched configuration
by configuration (the keys swept in either); two runs are one pair. Per configuration it prints
the speed ratio (> 1: the candidate is faster) with its 95% interval and a verdict: faster,
slower or same (within noise, or within --threshold). What is compared, in its unit, is the
runs' scenario's: a training run's images/s (bootstrap over the repeats, or over the step times
when a run has one repeat), a storage run's samples/s (over storage.runs' runs), an inference
run's per-batch latency in ms; runs of two scenarios are refused (exit 2). See
bench.analysis.compare for the rule.

Prints the table (two runs of two configs are named baseline first, whole: "small_cnn fp32 bs=4 vs
small_cnn fp32 bs=8"), then the config keys the sides differ in, when they do ("the configs differ:
data.batch_size 4 → 8"; a config A/B is compare's main use: the exit codes are the same), then the
verdict in one sentence ("slower: 0.800× [0.750–0.850], beyond the 3% threshold") and its reasons
a line each; writes the same into compare.md, compare.html (one page,
the plot embedded) and compare.png, in --out (default ./compare: when that holds an earlier compare,
it is kept and this one goes to ./compare-2, -3, ..., said in a line; a folder named with --out is
replaced, said in a line). A path that does not exist, and is not a run id (32 hex digits), is
refused before any store is opened; a store is read only for a run id, and a missing sqlite store
is refused, never created. The same run on both sides is said in a line (its ratio is 1 by
construction). When an input was an MLflow run id, the files are logged to the
candidate's run under compare/ (or the baseline's, when only it came from MLflow), and each
compared candidate run gets the metric throughput_ratio_vs_baseline and a compare.verdict tag.

--rerun N (2 to 20 rounds) runs both configs again as fresh processes, interleaved A-B-B-A (A the
baseline, B the candidate), and judges the paired ratio (the median of the rounds' ratios, each
round a row of the table) against the noise between processes (below,
bench.analysis.verdicts): the same page and exit codes, plus "can't tell at this noise" (exit
3) when the noise floor is larger than the threshold and the interval does not clear it; a fresh
process not fit to measure makes it "not judged" (exit 3) as above. Ctrl-C / SIGTERM stop its
running child and exit 130 / 143.

Exit codes: 0 nothing slower, 1 some configuration slower beyond the threshold (a CI gate),
2 an input or the threshold cannot be used (one `[ERROR] ...` line), 3 nothing slower but some
configuration could not be judged: a side was not fit to measure (its fit_to_measure is false;
the verdict names the side, its reasons follow; run it again on a quiet machine, or pass
--judge-unfit to be given the verdict anyway, its note saying which side was unfit).
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import subprocess
import sys
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple
from urllib.parse import urlparse

import pandas as pd
import yaml
from tqdm import tqdm

from bench import api
from bench.analysis.compare import compare_frames
from bench.analysis.rounds import CANT_TELL, alternate
from bench.analysis.verdicts import UNJUDGED, Comparison, Pair, as_comparison, judge, unfit_sides, with_fitness
from bench.errors import EXIT_FAILED, EXIT_SIGINT, EXIT_SIGTERM, BenchError, Interrupted, ReportError, print_error
from bench.machine.children import exit_without_teardown
from bench.machine.fitness import unfit_reason
from bench.machine.writable import writable_dir_refusal
from bench.secrets import redact, redact_output
from bench.tools.compare_output import log_to_mlflow, own_folder, render_text, verdict_lines, write_outputs
from bench.tracking.store import resolve_tracking_uri, sqlite_path, store_problem

EXIT_UNJUDGED = 3  # nothing slower, but a side was not fit to measure (or, with --rerun, the noise too large)
RUN_ID = re.compile(r"[0-9a-f]{32}")  # an MLflow run id (uuid4 hex)
SAME = "the same {} on both sides"  # run, or sweep


def parse_threshold(text: str) -> float:
    """'3%' or '0.03' -> 0.03; ReportError for anything else."""
    raw = text.strip()
    try:
        value = float(raw[:-1]) / 100.0 if raw.endswith("%") else float(raw)
    except ValueError:
        value = -1.0
    if not 0 <= value < 1:
        raise ReportError(
            f"--threshold={text!r} is not valid: accepted a percentage like 3% or a fraction in [0, 1) like 0.03"
        )
    return value


def is_run_id(what: str, argument: str) -> bool:
    """False for a directory, True for an MLflow run id; ReportError for anything else, before any
    store is opened (a typo is never looked up, and never makes a store)."""
    path = Path(argument)
    if path.is_dir():
        return False
    if not path.exists() and RUN_ID.fullmatch(argument):
        return True
    raise ReportError(
        f"{what} {argument} is not a directory nor an MLflow run id (32 hex digits): pass a run's directory, "
        "a sweep's directory or a run id"
    )


def store_missing(uri: str) -> Optional[str]:
    """Why a local store (a sqlite file, an mlruns folder) cannot hold the run: it does not exist
    (reading it would create it). None for one that exists, and for a server (probed instead)."""
    path = sqlite_path(uri) or (Path(urlparse(uri).path) if urlparse(uri).scheme in ("", "file") else None)
    if path is None or path.exists():
        return None
    return (
        f"there is no MLflow store at {redact(uri)} to read a run id from: name the store that holds it "
        "with --tracking-uri or MLFLOW_TRACKING_URI"
    )


def read_input(what: str, argument: str, tracking_uri: str) -> pd.DataFrame:
    """The frame of its runs (a directory's, or an MLflow run's: is_run_id said which)."""
    from bench.analysis.runs import frame_from_records, read_job_dir, read_mlflow_sweep, read_sweep_dir

    path = Path(argument)
    if not path.is_dir():
        return read_mlflow_sweep(argument, tracking_uri, single=True, argument=what)
    if (path / "run_summary.json").is_file() or not any(path.glob("*/.hydra")):
        if not (path / "run_summary.json").is_file() and not (path / "error.txt").is_file():
            raise ReportError(
                f"{what} {argument} holds no run_summary.json and no job directories: pass a "
                "run's directory, a sweep's directory or an MLflow run id"
            )
        return frame_from_records([read_job_dir(path)])
    return read_sweep_dir(path)


def same_sides(baseline: str, candidate: str, frames: Sequence[pd.DataFrame] = ()) -> bool:
    """Both sides are one run (or one sweep): one path, one id, or the same recorded MLflow runs."""
    if baseline == candidate or Path(baseline).resolve() == Path(candidate).resolve():
        return True
    ids = [{i for i in frame["run_id"] if isinstance(i, str) and i} for frame in frames]
    return len(ids) == 2 and bool(ids[0]) and ids[0] == ids[1]


def said_same(comparison: Comparison, argument: str, what_then: str, what: str = "run") -> str:
    """The same run (or sweep) on both sides: a reason of each pair (the page says it) and a line
    for the terminal."""
    for pair in comparison.pairs:
        pair.reasons.insert(0, SAME.format(what))
    return f"compare: {SAME.format(what)} ({argument}): {what_then}"


def main(argv: Optional[Sequence[str]] = None) -> int:
    redact_output()  # a tracking URI or an endpoint read from the environment may carry a password
    parser = argparse.ArgumentParser(prog="python -m bench.compare", description=__doc__.split("\n\n")[0])
    parser.add_argument("baseline", help="a run's directory, a sweep's directory or an MLflow run id")
    parser.add_argument("candidate", help="the same kinds as the baseline")
    parser.add_argument("--threshold", default="3%", help="what counts as slower or faster (default 3%%)")
    text = "where the files go, replacing an earlier compare there (default ./compare, or ./compare-2, ... "
    parser.add_argument("--out", type=Path, help=text + "when it holds one)")
    text = "give a verdict even where a side was not fit to measure (the note still says so)"
    parser.add_argument("--judge-unfit", action="store_true", help=text)
    text = "run both configs again as fresh processes, A-B-B-A (A the baseline, B the candidate) for N rounds "
    text += "(2 to 20), and judge against the noise between processes (A and B: run directories)"
    parser.add_argument("--rerun", type=int, metavar="N", help=text)
    parser.add_argument("--tracking-uri", help="MLflow store (default: MLFLOW_TRACKING_URI, else sqlite:///mlflow.db)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    if unwritable := writable_dir_refusal("--out", str(args.out or "compare")):  # before any run is read or rerun
        return print_error(unwritable)
    if args.rerun is not None:
        return main_rerun(args)
    uri = args.tracking_uri or resolve_tracking_uri(None, Path.cwd())
    try:
        threshold = parse_threshold(args.threshold)
        base_mlflow, cand_mlflow = is_run_id("baseline", args.baseline), is_run_id("candidate", args.candidate)
        # only then is a store opened
        if (base_mlflow or cand_mlflow) and (problem := store_missing(uri) or store_problem(uri)):
            raise ReportError(problem)
        baseline = read_input("baseline", args.baseline, uri)
        candidate = read_input("candidate", args.candidate, uri)
        comparison = compare_frames(baseline, candidate, threshold, args.judge_unfit)
        if not comparison.pairs:
            raise ReportError(
                f"baseline {args.baseline} and candidate {args.candidate} have no finished configuration in common"
            )
    except ReportError as exc:
        return print_error(str(exc))
    notes = []
    if same_sides(args.baseline, args.candidate, (baseline, candidate)):
        then = "its figures are compared with themselves: the ratio is 1 by construction and says nothing about speed"
        then += " (--rerun N measures a run's config against itself)"
        notes.append(said_same(comparison, args.baseline, then, "sweep" if len(baseline) > 1 else "run"))
    out, moved = own_folder(args.out or Path("compare"), named=args.out is not None)
    for line in filter(None, [moved, *notes]):
        print(line, file=sys.stderr)
    print(render_text(comparison), flush=True)
    files = write_outputs(comparison, out, f"{args.baseline} vs {args.candidate}", notes)
    if target := [x for x, mlflow in ((args.candidate, cand_mlflow), (args.baseline, base_mlflow)) if mlflow]:
        log_to_mlflow(comparison, files, target[0], args.baseline, uri, tag_candidates=cand_mlflow)
    return said(comparison, files)


def said(comparison: Comparison, files: Sequence[Path]) -> int:
    """The page's path and the verdict on stderr; the exit code."""
    print(f"compare: {files[1].resolve()}", file=sys.stderr)  # compare.html
    print("\n".join(verdict_lines(comparison)), file=sys.stderr)
    if comparison.slower:
        return EXIT_FAILED
    return EXIT_UNJUDGED if any(p.verdict in (UNJUDGED, CANT_TELL) for p in comparison.pairs) else 0


def main_rerun(args: argparse.Namespace) -> int:
    """--rerun N: the verdict from fresh processes of both configs (rerun_compare, below).
    SIGTERM or Ctrl-C stops the running child (it gets SIGTERM if this process is killed) and
    ends with one line, exit 143 / 130."""
    from bench.machine.children import sigterm_raises

    out = args.out or Path("compare")
    try:
        with sigterm_raises():
            threshold = parse_threshold(args.threshold)
            check_rounds(args.rerun)
            # refused before a folder is made
            sides = {side: rerun_overrides(getattr(args, side), side) for side in ("baseline", "candidate")}
            out, moved = own_folder(out, named=args.out is not None)
            same = same_sides(args.baseline, args.candidate)
            then = "its config runs against itself, so the verdict measures this machine's noise between processes"
            for line in (moved, f"compare: {SAME.format('run')} ({args.baseline}): {then}" if same else ""):
                if line:
                    print(line, file=sys.stderr, flush=True)
            result = rerun_compare(sides, args.rerun, threshold, out, args.judge_unfit, rerun_figure(args.baseline))
            comparison = as_comparison(result, label(sides), threshold)
            notes = [said_same(comparison, args.baseline, then)] if same else []
            title = f"{args.baseline} vs {args.candidate}, {args.rerun} rounds of {ORDER} in fresh processes"
            files = write_outputs(comparison, out, title, notes)
    except ReportError as exc:
        return print_error(str(exc))
    except (KeyboardInterrupt, Interrupted) as exc:
        name = exc.signal_name if isinstance(exc, Interrupted) else "SIGINT"
        return print_error(
            f"bench.compare --rerun interrupted by {name}: a running python -m bench child was stopped; "
            f"the runs so far are in {out / 'rerun'}",
            EXIT_SIGINT if name == "SIGINT" else EXIT_SIGTERM,
        )
    print(render_text(comparison), flush=True)  # the plain compare's table, a row per round under the ratio
    return said(comparison, files)


# ---- --rerun ----
# `python -m bench.compare A B --rerun N`: a verdict that holds between processes.
#
# Repeats inside one process (benchmark.repeats) miss the run-to-run spread: process start, memory
# layout, clocks, neighbours. Two runs of one unchanged config differ by more than their in-process
# interval admits, and a CI gate that fails on an unchanged commit gets switched off. Here both
# configs are run again as fresh processes, interleaved A-B-B-A (A the baseline, B the candidate:
# baseline, candidate, candidate, baseline) for N rounds (2 to MAX_ROUNDS; bench.analysis.rounds),
# each run's images/s one figure, and judged against the noise between the processes
# (bench.analysis.verdicts.judge: slower, faster, same, can't tell at this noise, or not judged when a
# process was not fit to measure).
#
# A and B are run directories (a run's, or a sweep job's): their `.hydra/overrides.yaml` is the
# command run again, with tracking off and the outputs under --out/rerun. Each child is started by
# bench.api.run_child: it ends when this command is interrupted or killed. A line
# says what will run, a tqdm bar (on a terminal) follows the processes, a line per round gives its
# figures, and the result is the page a plain compare writes (bench.tools.compare_output): a row per
# round (each side's mean, their ratio) under the paired ratio, the median of those ratios.
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
    (bench.analysis.verdicts.judge)."""
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


if __name__ == "__main__":
    exit_without_teardown(main)
