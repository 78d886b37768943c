"""What a comparison says (bench.tools.compare, its --rerun too): the verdicts, and one compared
pair with every figure shown of it.

A Pair holds every figure shown of it (the terminal, compare.md/.html and the plot read only these):
the two figures and their ratio, or, for a paired ratio (`compare --rerun`), each round's figures,
whose ratios the ratio is the median of; `basis` says which, `headline` is the verdict in one
sentence ("slower: 0.800× [0.750–0.850], beyond the 3% threshold"), `reasons` the lines after it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import List, Optional, Sequence, Tuple

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
        return headline(self.verdict, self.ratio, self.low, self.high, self.why)

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
    def unjudged(self) -> List[Pair]:
        return [p for p in self.pairs if p.verdict == UNJUDGED]

    @property
    def unit(self) -> str:
        """The pairs' one unit ("" when they differ: each value then carries its own)."""
        units = {p.unit for p in self.pairs}
        return units.pop() if len(units) == 1 else ""


def headline(decided: str, ratio: float, low: Optional[float], high: Optional[float], why: str) -> str:
    """The verdict in one sentence: "slower: 0.800× [0.750–0.850], beyond the 3% threshold"; "not
    judged: the baseline was not fit to measure" (its ratio is on a line of its reasons)."""
    if decided == UNJUDGED:
        return f"{decided}: {why}"
    interval = f" [{low:.3f}–{high:.3f}]" if low is not None and high is not None else ""
    return f"{decided}: {ratio:.3f}×{interval}, {why}"


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
