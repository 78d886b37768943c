"""The verdict of `python -m bench.compare A B --rerun N`: candidate / baseline from fresh processes,
run A-B-B-A (A the baseline, B the candidate) for N rounds (bench.analysis.rounds), judged against
the noise between processes.

- the ratio is paired: the median of the per-round ratios (a round's candidate / baseline, each
  side's mean of its two runs in the round), with its 95% interval;
- the noise floor is what a config does against itself: the largest gap between the two runs of
  one side within a round (A against A, B against B), as a fraction;
- **slower** (faster): the ratio beyond the threshold and the whole interval beyond the noise
  floor, i.e. its high end below 1 / (1 + floor) (its low end above 1 + floor);
- **can't tell at this noise**: otherwise, when the noise floor is larger than the threshold (this
  machine cannot resolve the threshold: a difference the size of the threshold hides in the
  noise), or when the interval holds 1 but the ratio is beyond the threshold, or the ratio is
  beyond the threshold but the interval reaches within the floor of 1;
- **same**: the noise floor within the threshold and the ratio within the threshold (1 / (1 + t)
  to 1 + t: the band compare.png draws, with the noise floor's lines);
- **not judged**: a fresh process of either side was not fit to measure (its
  fit_to_measure is false, bench.machine.fitness), whatever the figures say, as a plain compare
  does; `judge_unfit` gives the verdict anyway, its reasons naming the unfit side.

bench.tools.compare exits 1 on slower, 3 on can't tell and not judged (as on an unfit machine), 0
on same or faster.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Dict, List

from bench.analysis.rounds import CANT_TELL, Rounds
from bench.analysis.verdicts import FASTER, SAME, SLOWER, UNJUDGED, headline, not_fit

__all__ = ["CANT_TELL", "FASTER", "SAME", "SLOWER", "UNJUDGED", "RerunVerdict", "judge", "noise_floor", "with_fitness"]


@dataclass
class RerunVerdict:
    ratio: float  # candidate / baseline, the median of the per-round ratios
    low: float
    high: float
    noise_floor: float  # the largest A-against-A (or B-against-B) gap within a round, as a fraction
    verdict: str
    why: str  # the words that end its headline: "beyond the 3% threshold and the 0.5% noise floor"
    reasons: List[str] = field(default_factory=list)  # the lines after the headline

    @property
    def headline(self) -> str:
        """The verdict in one sentence: "slower: 0.500× [0.499–0.501], beyond the 3% threshold and ..."."""
        return headline(self.verdict, self.ratio, self.low, self.high, self.why)


def noise_floor(rounds: Rounds) -> float:
    """The largest gap between a side's two runs within one round (A-B-B-A: each side runs twice)."""
    gaps = []
    for values in rounds.figures.values():
        for first, second in zip(values[0::2], values[1::2], strict=True):
            if min(first, second) > 0:
                gaps.append(max(first, second) / min(first, second) - 1)
    return max(gaps, default=0.0)


def judge(rounds: Rounds, threshold: float) -> RerunVerdict:
    """The verdict on candidate / baseline from the figures alone (fitness: `with_fitness`)."""
    ratio = rounds.ratio("baseline", "candidate")
    floor = noise_floor(rounds)
    r, low, high = ratio.ratio, ratio.low, ratio.high
    margin = max(threshold, floor)
    pct, noise = f"{100 * threshold:g}%", f"{100 * floor:.1f}%"

    def given(verdict: str, why: str, *reasons: str) -> RerunVerdict:
        return RerunVerdict(r, low, high, floor, verdict, why, list(reasons))

    if r < 1 / (1 + margin) and high < 1 / (1 + floor) and high < 1:
        return given(SLOWER, f"beyond the {pct} threshold and the {noise} noise floor")
    if r > 1 + margin and low > 1 + floor and low > 1:
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


def with_fitness(
    result: RerunVerdict, unfit: Dict[str, List[str]], runs: Dict[str, int], judge_unfit: bool = False
) -> RerunVerdict:
    """`unfit`: per side, the reasons of its fresh processes that were not fit to measure; `runs`:
    how many each side ran. An unfit side makes the pair "not judged" unless `judge_unfit`."""
    sides = [(side, reasons) for side, reasons in unfit.items() if reasons]
    if not sides:
        return result
    if judge_unfit:  # asked for a verdict anyway (a shared CI box): it says what it stands on
        judged = [
            f"judged although the {side} was not fit to measure in {len(why)} of {runs.get(side, len(why))} runs: "
            f"{why[0]}"
            for side, why in sides
        ]
        return replace(result, reasons=[*result.reasons, *judged])
    return replace(
        result,
        verdict=UNJUDGED,
        why=not_fit([(side, f"{len(why)} of {runs.get(side, len(why))} runs") for side, why in sides]),
        reasons=[*(f"{side}: {why[0]}" for side, why in sides), f"measured: {result.headline}", *result.reasons],
    )
