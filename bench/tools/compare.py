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

Writes compare.md, compare.html (one page, the plot embedded) and compare.png into --out
(default ./compare). When an input was an MLflow run id, the files are logged to the
candidate's run under compare/ (or the baseline's, when only it came from MLflow), and each
compared candidate run gets the metric throughput_ratio_vs_baseline and a compare.verdict tag.

--rerun N (2 to 20 rounds) runs both configs again as fresh processes, interleaved A-B-B-A, and
judges the ratio against the noise between processes (bench.tools.compare_rerun,
bench.analysis.rerun_verdict): the same page and exit codes, plus "can't tell at this noise" (exit
3) when the noise floor is larger than the threshold and the interval does not clear it; a fresh
process not fit to measure makes it "could not judge" (exit 3) as above. Ctrl-C / SIGTERM stop its
running child and exit 130 / 143.

Exit codes: 0 nothing slower, 1 some configuration slower beyond the threshold (a CI gate),
2 an input or the threshold cannot be used (one `[ERROR] ...` line), 3 nothing slower but some
configuration could not be judged: a side was not fit to measure (its fit_to_measure is false;
the verdict line names the side and the reasons; run it again on a quiet machine, or pass
--judge-unfit to be given the verdict anyway, its note saying which side was unfit).
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import List, Optional, Sequence, Tuple

import pandas as pd

from bench.analysis.compare import SLOWER, Comparison, compare_frames
from bench.errors import EXIT_CONFIG, EXIT_FAILED, EXIT_SIGINT, EXIT_SIGTERM, Interrupted, ReportError
from bench.machine.writable import writable_dir_refusal
from bench.output_redaction import install as redact_output
from bench.tools.compare_output import log_to_mlflow, write_outputs
from bench.tools.report import default_tracking_uri
from bench.tracking.probe import store_problem

log = logging.getLogger("bench")
EXIT_UNJUDGED = 3  # nothing slower, but a side was not fit to measure (or, with --rerun, the noise too large)


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


def read_input(what: str, argument: str, tracking_uri: str) -> Tuple[pd.DataFrame, bool]:
    """(the frame of its runs, whether it came from MLflow)."""
    from bench.analysis.mlflow_sweep import read_mlflow_sweep
    from bench.analysis.runs import frame_from_records, read_job_dir, read_sweep_dir

    path = Path(argument)
    if path.is_dir():
        if (path / "run_summary.json").is_file() or not any(path.glob("*/.hydra")):
            if not (path / "run_summary.json").is_file() and not (path / "error.txt").is_file():
                raise ReportError(
                    f"{what} {argument} holds no run_summary.json and no job directories: pass a "
                    "run's directory, a sweep's directory or an MLflow run id"
                )
            return frame_from_records([read_job_dir(path)]), False
        return read_sweep_dir(path), False
    if path.exists() or "/" in argument:
        raise ReportError(f"{what} {argument} is not a directory nor an MLflow run id")
    return read_mlflow_sweep(argument, tracking_uri, single=True, argument=what), True


def render_text(comparison: Comparison) -> str:
    unit = comparison.unit  # the sampled figure's unit (its scenario's); "" when pairs differ: on each value
    base, cand = (f"baseline {unit}", f"candidate {unit}") if unit else ("baseline", "candidate")
    lines = [f"{'configuration':<40} {base:>20} {cand:>20} {'ratio':>7}  {'95% interval':<17} verdict"]
    for p in comparison.pairs:
        interval = f"[{p.low:.3f}, {p.high:.3f}]" if p.low is not None else "n/a"
        b, c = (
            (f"{p.baseline:.1f}", f"{p.candidate:.1f}")
            if unit
            else (f"{p.baseline:.1f} {p.unit}", f"{p.candidate:.1f} {p.unit}")
        )
        lines.append(f"{p.label[:40]:<40} {b:>20} {c:>20} {p.ratio:>7.3f}  {interval:<17} {p.verdict} ({p.note})")
    lines += [f"only in the baseline: {label}" for label in comparison.only_baseline]
    lines += [f"only in the candidate: {label}" for label in comparison.only_candidate]
    return "\n".join(lines)


def main(argv: Optional[Sequence[str]] = None) -> int:
    redact_output()  # a tracking URI or an endpoint read from the environment may carry a password
    parser = argparse.ArgumentParser(prog="python -m bench.compare", description=__doc__.split("\n\n")[0])
    parser.add_argument("baseline", help="a run's directory, a sweep's directory or an MLflow run id")
    parser.add_argument("candidate", help="the same kinds as the baseline")
    parser.add_argument("--threshold", default="3%", help="what counts as slower or faster (default 3%%)")
    parser.add_argument("--out", type=Path, default=Path("compare"), help="where the files go (default ./compare)")
    parser.add_argument(
        "--judge-unfit",
        action="store_true",
        help="give a verdict even where a side was not fit to measure (the note still says so)",
    )
    parser.add_argument(
        "--rerun",
        type=int,
        metavar="N",
        help="run both configs again as fresh processes, A-B-B-A for N rounds (2 to 20), and judge against the noise "
        "between processes (A and B: run directories)",
    )
    parser.add_argument("--tracking-uri", help="MLflow store (default: MLFLOW_TRACKING_URI, else sqlite:///mlflow.db)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    uri = args.tracking_uri or default_tracking_uri()
    unwritable = writable_dir_refusal("--out", str(args.out))  # before any run is read or rerun
    if unwritable:
        print(f"[ERROR] {unwritable}", file=sys.stderr)
        return EXIT_CONFIG
    if args.rerun is not None:
        return main_rerun(args)
    try:
        threshold = parse_threshold(args.threshold)
        if not (Path(args.baseline).exists() and Path(args.candidate).exists()):  # one of them is a run id
            problem = store_problem(uri)
            if problem:
                raise ReportError(problem)
        baseline, base_mlflow = read_input("baseline", args.baseline, uri)
        candidate, cand_mlflow = read_input("candidate", args.candidate, uri)
        comparison = compare_frames(baseline, candidate, threshold, args.judge_unfit)
        if not comparison.pairs:
            raise ReportError(
                f"baseline {args.baseline} and candidate {args.candidate} have no finished configuration in common"
            )
    except ReportError as exc:
        print(f"[ERROR] {exc}", file=sys.stderr)
        return EXIT_CONFIG
    print(render_text(comparison), flush=True)
    files = write_outputs(comparison, args.out, f"{args.candidate} vs {args.baseline}")
    target: List[str] = [
        x for x, from_mlflow in ((args.candidate, cand_mlflow), (args.baseline, base_mlflow)) if from_mlflow
    ]
    if target:
        log_to_mlflow(comparison, files, target[0], args.baseline, uri, tag_candidates=cand_mlflow)
    print(f"compare: {files[1].resolve()}", file=sys.stderr)  # compare.html
    slower = [p.label for p in comparison.pairs if p.verdict == SLOWER]
    if slower:
        print(
            f"verdict: slower beyond {100 * threshold:g}% in {len(slower)} configuration(s): {', '.join(slower)}",
            file=sys.stderr,
        )
        return EXIT_FAILED
    if comparison.unjudged:
        print(
            f"verdict: could not judge {len(comparison.unjudged)} configuration(s), a side was not fit to measure: "
            + "; ".join(f"{p.label}: {p.note}" for p in comparison.unjudged),
            file=sys.stderr,
        )
        return EXIT_UNJUDGED
    return 0


def main_rerun(args: argparse.Namespace) -> int:
    """--rerun N: the verdict from fresh processes of both configs (bench.tools.compare_rerun).
    SIGTERM or Ctrl-C stops the running child (it gets SIGTERM if this process is killed) and
    ends with one line, exit 143 / 130."""
    from bench.analysis.rerun_verdict import CANT_TELL, UNJUDGED
    from bench.machine.children import sigterm_raises
    from bench.tools.compare_rerun import as_comparison, check_rounds, label, rerun_compare, said

    try:
        with sigterm_raises():
            threshold = parse_threshold(args.threshold)
            check_rounds(args.rerun)
            measured, result = rerun_compare(
                args.baseline, args.candidate, args.rerun, threshold, args.out, args.judge_unfit
            )
            comparison = as_comparison(measured, result, label(args.baseline, args.candidate), threshold)
            files = write_outputs(comparison, args.out, f"{args.candidate} vs {args.baseline}, {args.rerun} rounds")
    except ReportError as exc:
        print(f"[ERROR] {exc}", file=sys.stderr)
        return EXIT_CONFIG
    except (KeyboardInterrupt, Interrupted) as exc:
        name = exc.signal_name if isinstance(exc, Interrupted) else "SIGINT"
        print(
            f"[ERROR] bench.compare --rerun interrupted by {name}: a running python -m bench child was stopped; "
            f"the runs so far are in {args.out / 'rerun'}",
            file=sys.stderr,
        )
        return EXIT_SIGINT if name == "SIGINT" else EXIT_SIGTERM
    print(render_text(comparison), flush=True)  # the plain compare's table
    print(f"compare: {files[1].resolve()}", file=sys.stderr)  # compare.html
    print(f"verdict: {said(result)}", file=sys.stderr)
    if result.verdict == SLOWER:
        return EXIT_FAILED
    return EXIT_UNJUDGED if result.verdict in (CANT_TELL, UNJUDGED) else 0


if __name__ == "__main__":
    sys.exit(main())
