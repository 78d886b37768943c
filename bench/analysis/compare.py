"""Regression verdicts: two runs or two sweeps (frames from bench.analysis.runs), matched
configuration by configuration, each pair a throughput ratio with its 95% interval and a verdict.

Matching: two single runs are one pair, whatever their configs (the user chose them). Two
sweeps are matched on the config keys that vary inside either sweep (what was swept); a
configuration only one side has is listed, not compared.

What is sampled, and its unit, is the runs' scenario's (its report class's `view.sample`,
bench.scenarios.Sample): training compares images/s, storage samples/s, inference the per-batch
latency in ms; two runs of different scenarios are refused (ReportError, exit 2). Samples per run
(bench.maths.confidence): the figure of each repeat when both runs have 2 or more (the
statistic is their median); otherwise the timeline where the scenario reads one (a training
run's step times: the pooled throughput, images / summed step time; an inference run's
latencies: their median); otherwise the run's own figure (a point ratio, no interval). The
interval is the 2.5-97.5 percentile range of the ratio over independent bootstrap resamples of
each side. The ratio is candidate / baseline for a throughput, baseline / candidate for a latency
(lower is better), so above 1 is always faster.

Verdict, for a threshold t (default 3%): `slower` when the ratio is below 1 - t AND the whole
interval is below 1 (slower beyond the threshold, and not noise); `faster` the mirror image;
otherwise `same` (within noise: the interval holds 1; or within the threshold). A pair where
either run was not fit to measure (its fit_to_measure is false: bench.machine.fitness) is
`not judged`, whatever its ratio, and its reasons say which side and why.
"""

from __future__ import annotations

import math
import statistics
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np
import pandas as pd

from bench.analysis.cells import absent
from bench.analysis.runs import CONFIG_PREFIX, ENV_PREFIX, NOISE_KEYS, config_of, swept_keys
from bench.analysis.verdicts import FASTER, PLACES, SAME, SLOWER, Comparison, Pair, with_fitness
from bench.errors import ReportError
from bench.machine.fitness import unfit_reason
from bench.maths.confidence import bootstrap, median_rows, pooled_rate_rows, ratio_interval, repeats_needed
from bench.scenarios import DEFAULT_MODE, Sample, mode_name, report_class

TIMELINE_RESAMPLES = 2_000  # step timelines can be long: fewer resamples keep a compare quick


def finished(frame: pd.DataFrame) -> pd.DataFrame:
    return frame[frame["status"].eq("FINISHED")].reset_index(drop=True)


def label_of(row: Dict[str, Any], keys: Sequence[str]) -> str:
    """The swept keys' values; for a single run, its mode (when not training), model, precision and batch."""
    if keys:
        return " ".join(f"{k[len(CONFIG_PREFIX) :]}={row.get(k)}" for k in keys)
    mode = mode_name(_mode(row))
    words = [mode] if mode != DEFAULT_MODE else []
    for prefix, name, fmt in report_class(mode).view.label_columns:  # what names a single run (its report class says)
        if (value := row.get(name)) is not None and not absent(value):
            words.append(prefix + (str(int(float(value))) if fmt == "int" else str(value)))
    return " ".join(words)


def _mode(row: Dict[str, Any]) -> Any:
    return row.get(CONFIG_PREFIX + "mode", row.get("mode"))


def match(baseline: pd.DataFrame, candidate: pd.DataFrame) -> Tuple[List[Tuple[str, dict, dict]], List[str], List[str]]:
    """(label, baseline row, candidate row) per configuration both have; labels only one side has."""
    base_rows, cand_rows = baseline.to_dict("records"), candidate.to_dict("records")
    if len(base_rows) == 1 and len(cand_rows) == 1:
        base_label, cand_label = label_of(base_rows[0], []), label_of(cand_rows[0], [])
        label = base_label if cand_label == base_label else f"{base_label} vs {cand_label}"  # two configs: both named
        return [(label, base_rows[0], cand_rows[0])], [], []
    keys = swept_keys(baseline, candidate)
    by_key = {tuple(str(r.get(k)) for k in keys): r for r in base_rows}
    labelled = [(tuple(str(row.get(k)) for k in keys), label_of(row, keys), row) for row in cand_rows]
    pairs = [(label, by_key[key], row) for key, label, row in labelled if key in by_key]
    seen = {key for key, _, _ in labelled}
    only_baseline = [label_of(r, keys) for k, r in by_key.items() if k not in seen]
    return pairs, only_baseline, [label for key, label, _ in labelled if key not in by_key]


def _items_per_step(row: Dict[str, Any], sample: Sample) -> Optional[float]:
    # the first of these figures the run has: a timeline entry's items
    return next((float(row[key]) for key in sample.per_step if not absent(row.get(key))), None)


def _samples(row: Dict[str, Any], kind: str, sample: Sample) -> Tuple[np.ndarray, Any, float]:
    """(values, bootstrap statistic, point estimate) of one run for this kind of sample."""
    if kind == "repeats":
        values = np.asarray(row["repeat_rates"], dtype=float)
        return values, median_rows, float(np.median(values))
    values = np.asarray(row["timeline"], dtype=float)
    if sample.timeline_is_figure:  # the entries are the figure (a latency): their median
        return values, median_rows, float(np.median(values))
    items = _items_per_step(row, sample)
    assert items, "_kind picks the timeline only where the items per step are known"
    return values, pooled_rate_rows(items), items * len(values) / (values.sum() / 1000.0)


def _kind(base: Dict[str, Any], cand: Dict[str, Any], sample: Sample) -> str:
    def has(row: Dict[str, Any], name: str, at_least: int) -> bool:
        value = row.get(name)
        return isinstance(value, list) and len(value) >= at_least

    if sample.from_repeats and has(base, "repeat_rates", 2) and has(cand, "repeat_rates", 2):
        return "repeats"
    readable = sample.timeline_is_figure or (_items_per_step(base, sample) and _items_per_step(cand, sample))
    return "steps" if readable and has(base, "timeline", 2) and has(cand, "timeline", 2) else "none"


def sample_of(base: Dict[str, Any], cand: Dict[str, Any]) -> Sample:
    """What the two runs' scenario samples; runs of two scenarios are refused (their figures differ)."""
    modes = mode_name(_mode(base)), mode_name(_mode(cand))
    if modes[0] != modes[1]:
        raise ReportError(
            f"the baseline is a mode={modes[0]} run and the candidate a mode={modes[1]} run: "
            "compare runs of one scenario (their figures measure different things)"
        )
    return report_class(modes[0]).view.sample


def verdict(ratio: float, low: Optional[float], high: Optional[float], threshold: float) -> Tuple[str, str]:
    """(the verdict, why: the words after the ratio in its headline)."""
    low, high = (ratio, ratio) if low is None or high is None else (low, high)  # no samples: the point ratio alone
    pct = f"{100 * threshold:g}%"
    # judged on the figures and on the figures as printed (verdicts.PLACES), so that the headline's own
    # numbers bear its verdict out: "slower: 0.970×" is not beyond 3%
    ratio_low, ratio_high = sorted((ratio, round(ratio, PLACES)))
    low, high = min(low, round(low, PLACES)), max(high, round(high, PLACES))
    if ratio_high < 1 - threshold and high < 1:
        return SLOWER, f"beyond the {pct} threshold"
    if ratio_low > 1 + threshold and low > 1:
        return FASTER, f"beyond the {pct} threshold"
    return SAME, "within noise: the interval holds 1" if low <= 1 <= high else f"within the {pct} threshold"


def compare_pair(
    label: str, base: Dict[str, Any], cand: Dict[str, Any], threshold: float, judge_unfit: bool = False
) -> Pair:
    sample = sample_of(base, cand)  # what their scenario samples, in its unit
    kind = _kind(base, cand, sample)
    low = high = None
    reasons = []
    if kind == "none":
        b, c = float(base[sample.figure]), float(cand[sample.figure])  # the runs' own figure
        reasons.append("no repeats or step times: no interval")
    else:
        (bv, bstat, b), (cv, cstat, c) = _samples(base, kind, sample), _samples(cand, kind, sample)
        resamples = {"resamples": TIMELINE_RESAMPLES} if kind == "steps" else {}
        boots = bootstrap(bv, bstat, seed=1, **resamples), bootstrap(cv, cstat, seed=2, **resamples)
        low, high = ratio_interval(*(boots[::-1] if sample.lower_is_better else boots))
    over, under = (b, c) if sample.lower_is_better else (c, b)  # > 1: the candidate is faster
    ratio = over / under if under > 0 else math.inf
    decided, why = verdict(ratio, low, high, threshold)
    run_id = None if absent(cand.get("run_id")) else cand["run_id"]
    measured = Pair(label, run_id, b, c, ratio, low, high, kind, decided, why, reasons, sample.unit)
    unfit = [
        (side, "", reason) for side, row in (("baseline", base), ("candidate", cand)) if (reason := unfit_reason(row))
    ]
    pair = with_fitness(measured, unfit, judge_unfit)
    if kind == "repeats" and pair.verdict == SAME and low is not None and high is not None and low < 1 < high:
        cvs = [statistics.stdev(r["repeat_rates"]) / statistics.mean(r["repeat_rates"]) for r in (base, cand)]
        needed = repeats_needed(max(cvs), threshold)
        if needed and needed > min(len(base["repeat_rates"]), len(cand["repeat_rates"])):
            pair.reasons.append(f"about {needed} repeats per side would resolve {100 * threshold:g}%")
    differences = provenance_differences(base, cand)
    pair.reasons += [differences] if differences else []
    pair.basis = basis_of(kind, base, cand, sample)
    return pair


def basis_of(kind: str, base: Dict[str, Any], cand: Dict[str, Any], sample: Sample) -> str:
    """What the ratio is of, in words: the definition the table, the page and the plot share."""
    ratio = "baseline / candidate (lower is faster)" if sample.lower_is_better else "candidate / baseline"
    if kind == "repeats":
        of = f"the medians of {len(base['repeat_rates'])} and {len(cand['repeat_rates'])} repeats"
    elif kind == "steps" and sample.timeline_is_figure:
        of = f"the medians of {len(base['timeline'])} and {len(cand['timeline'])} batches"
    elif kind == "steps":
        of = f"the pooled rates of {len(base['timeline'])} and {len(cand['timeline'])} steps"
    else:
        of = "the runs' own figures"
    return f"{ratio} of {of}"


def provenance_differences(base: Dict[str, Any], cand: Dict[str, Any]) -> str:
    """Where the two runs ran other code or packages (what each recorded of it; '' when the same or unknown)."""

    def of(row: Dict[str, Any], name: str) -> Any:
        value = row.get(ENV_PREFIX + name)
        return None if absent(value) or value == "" else str(value)

    said = []
    for name, what in (
        ("bench_version", "bench {} vs {}"),
        ("git_commit", "code differs: commit {} vs {}"),
        ("packages_sha256", "packages differ: {} vs {} (packages.txt of each run)"),
    ):
        b, c = of(base, name), of(cand, name)
        if b and c and b != c:
            said.append(what.format(b[:12], c[:12]))
    dirty = [
        side for side, row in (("baseline", base), ("candidate", cand)) if of(row, "git_dirty") in ("True", "true")
    ]
    if dirty:
        said.append(f"{' and '.join(dirty)} ran from a checkout with uncommitted changes")
    return "; ".join(said)


def config_differences(pairs: Sequence[Tuple[str, dict, dict]]) -> List[str]:
    """The config keys whose value differs between a pair's sides ("precision.name fp32 → bf16"), each
    once (its values in the first pair that differs in it); a key one side lacks, or noise, is not said."""
    said: Dict[str, str] = {}
    for b, c in ((config_of(base), config_of(cand)) for _, base, cand in pairs):
        differ = [k for k in sorted(b.keys() & c.keys()) if not k.startswith(NOISE_KEYS) and str(b[k]) != str(c[k])]
        said = {**{k: f"{k} {b[k]} → {c[k]}" for k in differ}, **said}  # the first pair's values win
    return sorted(said.values())


def compare_frames(
    baseline: pd.DataFrame, candidate: pd.DataFrame, threshold: float, judge_unfit: bool = False
) -> Comparison:
    pairs, only_baseline, only_candidate = match(finished(baseline), finished(candidate))
    judged = [compare_pair(label, b, c, threshold, judge_unfit) for label, b, c in pairs]
    return Comparison(judged, threshold, only_baseline, only_candidate, differs=config_differences(pairs))
