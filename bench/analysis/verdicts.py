"""What a comparison says (bench.tools.compare, its --rerun too): the verdicts, and one compared
pair with every figure shown of it.

A Pair holds every figure shown of it (the terminal, compare.md/.html and the plot read only these):
the two figures and their ratio, or, for a paired ratio (`compare --rerun`), each round's figures,
whose ratios the ratio is the median of; `basis` says which, `headline` is the verdict in one
sentence ("slower: 0.800× [0.750–0.850], beyond the 3% threshold"), `reasons` the lines after it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Dict, List, Optional, Sequence, Tuple

from bench.analysis.rounds import CANT_TELL, PLACES, Rounds

SLOWER, FASTER, SAME, UNJUDGED = "slower", "faster", "same", "not judged"


@dataclass
class Pair:
    """One configuration, compared."""

    label: str
    candidate_run: Optional[str]  # its MLflow run, when known: compare tags it with the verdict
    baseline: Optional[float]  # the sampled figure (the statistic of its samples), in `unit`; None when paired
    candidate: Optional[float]
    ratio: float  # candidate / baseline; baseline / candidate for a latency: > 1 is faster
    low: Optional[float]  # the 95% interval of the ratio (None without samples)
    high: Optional[float]
    samples: str  # "repeats", "steps", "none", or "rounds" (paired: compare --rerun)
    verdict: str
    why: str  # the words that end its headline: "beyond the 3% threshold"
    reasons: List[str] = field(default_factory=list)  # the lines after the headline
    unit: str = "images/s"  # the sampled figure's (its scenario's Sample.unit)
    basis: str = ""  # what the ratio is of: "candidate / baseline of the medians of 5 and 5 repeats"
    rounds: List[Tuple[float, float]] = field(default_factory=list)  # paired: (baseline, candidate) per round
    noise_floor: Optional[float] = None  # the noise floor the verdict used (compare --rerun), a fraction

    @property
    def headline(self) -> str:
        """The verdict in one sentence: "slower: 0.800× [0.750–0.850], beyond the 3% threshold"; "not
        judged: the baseline was not fit to measure" (its ratio is on a line of its reasons)."""
        if self.verdict == UNJUDGED:
            return f"{self.verdict}: {self.why}"
        interval = "" if self.low is None or self.high is None else f" [{self.low:.{PLACES}f}–{self.high:.{PLACES}f}]"
        return f"{self.verdict}: {self.ratio:.{PLACES}f}×{interval}, {self.why}"

    @property
    def note(self) -> str:
        """The why and the reasons in one line (the page's "why" column)."""
        return "; ".join([self.why, *self.reasons])

    @property
    def round_ratios(self) -> List[float]:
        """Each round's candidate / baseline: a paired ratio is their median."""
        return [cand / base for base, cand in self.rounds]


@dataclass
class Comparison:
    pairs: List[Pair]
    threshold: float
    only_baseline: List[str] = field(default_factory=list)
    only_candidate: List[str] = field(default_factory=list)
    band: Optional[Tuple[float, float]] = None  # the ratios the verdict calls within the threshold
    differs: List[str] = field(default_factory=list)  # the config keys the two sides differ in, with their values

    @property
    def edges(self) -> Tuple[float, float]:
        """The threshold band the verdict used (1 ± t unless the rule says otherwise, as --rerun's does)."""
        return self.band or (1 - self.threshold, 1 + self.threshold)

    @property
    def slower(self) -> List[Pair]:
        return [p for p in self.pairs if p.verdict == SLOWER]

    @property
    def unit(self) -> str:
        """The pairs' one unit ("" when they differ: each value then carries its own)."""
        units = {p.unit for p in self.pairs}
        return units.pop() if len(units) == 1 else ""


def with_fitness(pair: Pair, unfit: Sequence[Tuple[str, str, str]], judge_unfit: bool = False) -> Pair:
    """The pair judged on its sides' fitness to measure (bench.machine.fitness). `unfit`: a
    (side, in how many of its runs: "" for one run, its first reason) per side that was not fit.
    Such a pair is "not judged" ("the baseline was not fit to measure in 4 of 4 runs, the candidate
    in 1 of 4"), whatever its ratio, its reasons saying which side, why, and what was measured;
    `judge_unfit` (a shared CI box) keeps the verdict, its reasons saying what it stands on."""
    if not unfit:
        return pair
    if judge_unfit:
        judged = [f"judged although the {side} was not fit to measure{_in(n)}: {why}" for side, n, why in unfit]
        return replace(pair, reasons=[*pair.reasons, *judged])
    (first, many, _), *rest = unfit
    why = f"the {first} was not fit to measure{_in(many)}" + "".join(f", the {side}{_in(n)}" for side, n, _ in rest)
    if rest and not any(n for _, n, _ in unfit):  # two single runs: one whole sentence
        why = "the baseline and the candidate were not fit to measure"
    reasons = [*(f"{side}: {why}" for side, _, why in unfit), f"measured: {pair.headline}", *pair.reasons]
    return replace(pair, verdict=UNJUDGED, why=why, reasons=reasons)


def _in(runs: str) -> str:
    return f" in {runs}" if runs else ""


# ---- compare --rerun's verdict ----
# The verdict of `python -m bench.compare A B --rerun N`: candidate / baseline from fresh processes,
# run A-B-B-A (A the baseline, B the candidate) for N rounds (bench.analysis.rounds), judged against
# the noise between processes.
#
# - the ratio is paired: the median of the per-round ratios (a round's candidate / baseline, each
#   side's mean of its two runs in the round), with its 95% interval;
# - the noise floor is what a config does against itself: the largest gap between the two runs of
#   one side within a round (A against A, B against B), as a fraction;
# - **slower** (faster): the ratio beyond the threshold and the whole interval beyond the noise
#   floor, i.e. its high end below 1 / (1 + floor) (its low end above 1 + floor);
# - **can't tell at this noise**: otherwise, when the noise floor is larger than the threshold (this
#   machine cannot resolve the threshold: a difference the size of the threshold hides in the
#   noise), or when the interval holds 1 but the ratio is beyond the threshold, or the ratio is
#   beyond the threshold but the interval reaches within the floor of 1;
# - **same**: the noise floor within the threshold and the ratio within the threshold (1 / (1 + t)
#   to 1 + t: the band compare.png draws, with the noise floor's lines);
# - **not judged**: a fresh process of either side was not fit to measure (its
#   fit_to_measure is false, bench.machine.fitness), whatever the figures say, as a plain compare
#   does; `judge_unfit` gives the verdict anyway, its reasons naming the unfit side.
#
# bench.tools.compare exits 1 on slower, 3 on can't tell and not judged (as on an unfit machine), 0
# on same or faster.
def noise_floor(rounds: Rounds) -> float:
    """The largest gap between a side's two runs within one round (A-B-B-A: each side runs twice)."""
    pairs = [pair for values in rounds.figures.values() for pair in zip(values[0::2], values[1::2], strict=True)]
    return max((max(pair) / min(pair) - 1 for pair in pairs if min(pair) > 0), default=0.0)


def judge(rounds: Rounds, threshold: float) -> Pair:
    """The verdict on candidate / baseline from the figures alone (fitness: `unfit_sides`), as a
    plain compare's pair: the paired ratio with each round's figures (each side's mean of its two
    runs), whose ratios it is the median of, and the noise floor."""
    ratio = rounds.ratio("baseline", "candidate")
    r, low, high, floor = ratio.ratio, ratio.low, ratio.high, noise_floor(rounds)
    margin = max(threshold, floor)
    pct, noise = f"{100 * threshold:g}%", f"{100 * floor:.{PLACES - 2}f}%"  # a fraction to PLACES
    each = list(zip(rounds.per_round["baseline"], rounds.per_round["candidate"], strict=True))
    basis = f"candidate / baseline, paired: the median of the ratios of {len(each)} rounds of fresh processes"

    def given(verdict: str, why: str, *reasons: str) -> Pair:
        return Pair(
            "", None, None, None, r, low, high, "rounds", verdict, why, list(reasons), "images/s", basis, each, floor
        )

    # the interval clears the floor in its figures and in the figures as printed, so that the line's
    # own numbers bear its verdict out ("[1.158–1.617]" is not beyond a 15.8% floor)
    shown_low, shown_high, shown_floor = round(low, PLACES), round(high, PLACES), round(floor, PLACES)
    if r < 1 / (1 + margin) and max(high, shown_high) < min(1 / (1 + floor), 1 / (1 + shown_floor)) and high < 1:
        return given(SLOWER, f"beyond the {pct} threshold and the {noise} noise floor")
    if r > 1 + margin and min(low, shown_low) > max(1 + floor, round(1 + shown_floor, PLACES)) and low > 1:
        return given(FASTER, f"beyond the {pct} threshold and the {noise} noise floor")
    if floor > threshold:
        return given(
            CANT_TELL,
            f"the {noise} noise floor is larger than the {pct} threshold",
            "the interval does not clear 1 by more than the noise floor",
            "a quieter machine, more rounds, or a threshold above the floor would tell",
        )
    if 1 / (1 + threshold) <= r <= 1 + threshold:
        return given(SAME, f"within the {pct} threshold, at a {noise} noise floor")
    if low <= 1 <= high:
        return given(CANT_TELL, f"beyond the {pct} threshold, but the interval holds 1", "more rounds would tell")
    return given(CANT_TELL, f"beyond the {pct} threshold, but the interval comes within the {noise} noise floor of 1")


def unfit_sides(unfit: Dict[str, List[str]], runs: Dict[str, int]) -> List[tuple]:
    """`unfit`: per side, the reasons of its fresh processes that were not fit to measure; `runs`: how
    many each side ran. As with_fitness takes them: (side, "N of M runs", reason)."""
    return [(side, f"{len(why)} of {runs.get(side, len(why))} runs", why[0]) for side, why in unfit.items() if why]


def as_comparison(result: Pair, label: str, threshold: float) -> Comparison:
    """The rerun as a plain compare's one pair, for its page (bench.tools.compare_output)."""
    return Comparison([replace(result, label=label)], threshold, band=(1 / (1 + threshold), 1 + threshold))
