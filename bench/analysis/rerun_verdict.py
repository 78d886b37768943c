"""The verdict of `python -m bench.compare A B --rerun N`: candidate / baseline from fresh processes,
run A-B-B-A for N rounds (bench.analysis.rounds), judged against the noise between processes.

- the ratio is the median of the per-round ratios, with its 95% interval;
- the noise floor is what a config does against itself: the largest gap between the two runs of
  one side within a round (A against A, B against B), as a fraction;
- **slower** (faster): the ratio beyond the threshold and the whole interval beyond the noise
  floor, i.e. its high end below 1 / (1 + floor) (its low end above 1 + floor);
- **can't tell at this noise**: otherwise, when the noise floor is larger than the threshold (this
  machine cannot resolve the threshold: a difference the size of the threshold hides in the
  noise), or when the interval holds 1 but the ratio is beyond the threshold, or the ratio is
  beyond the threshold but the interval reaches within the floor of 1;
- **same**: the noise floor within the threshold and the ratio within the threshold.
- **not judged** ("could not judge"): a fresh process of either side was not fit to measure (its
  fit_to_measure is false, bench.machine.fitness), whatever the figures say, as a plain compare
  does; `judge_unfit` gives the verdict anyway, its note naming the unfit side.

bench.tools.compare exits 1 on slower, 3 on can't tell and not judged (as on an unfit machine), 0
on same or faster.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Dict, List

from bench.analysis.compare import FASTER, SAME, SLOWER, UNJUDGED
from bench.analysis.rounds import CANT_TELL, Rounds

__all__ = [
    "CANT_TELL",
    "FASTER",
    "SAME",
    "SLOWER",
    "UNJUDGED",
    "RerunVerdict",
    "judge",
    "noise_floor",
    "said",
    "with_fitness",
]


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
    """The verdict on candidate / baseline from the figures alone (fitness: `with_fitness`)."""
    ratio = rounds.ratio("baseline", "candidate")
    floor = noise_floor(rounds)
    r, low, high = ratio.ratio, ratio.low, ratio.high
    margin = max(threshold, floor)
    pct = f"{100 * threshold:g}%"
    beyond = f"beyond the {pct} threshold, the whole interval beyond the {100 * floor:.1f}% noise floor"

    def given(verdict: str, why: str) -> RerunVerdict:
        return RerunVerdict(r, low, high, floor, verdict, why)

    if r < 1 / (1 + margin) and high < 1 / (1 + floor) and high < 1:
        return given(SLOWER, f"slower by {100 * (1 - r):.1f}% ({beyond})")
    if r > 1 + margin and low > 1 + floor and low > 1:
        return given(FASTER, f"faster by {100 * (r - 1):.1f}% ({beyond})")
    if floor > threshold:
        return given(
            CANT_TELL,
            f"the noise floor {100 * floor:.1f}% is larger than the {pct} threshold and the interval "
            f"[{low:.3f}, {high:.3f}] does not clear 1 by more than it (a quieter machine, more rounds, "
            f"or a threshold above the floor)",
        )
    within = 1 / (1 + threshold) <= r <= 1 + threshold
    if within:
        held = "the interval holds 1" if low <= 1 <= high else f"the interval [{low:.3f}, {high:.3f}]"
        return given(SAME, f"within the {pct} threshold ({held}; noise floor {100 * floor:.1f}%)")
    if low <= 1 <= high:
        return given(CANT_TELL, f"the ratio is beyond the {pct} threshold but the interval holds 1 (more rounds)")
    return given(CANT_TELL, f"the ratio is beyond the {pct} threshold but the interval comes within the noise floor")


def with_fitness(
    result: RerunVerdict, unfit: Dict[str, List[str]], runs: Dict[str, int], judge_unfit: bool = False
) -> RerunVerdict:
    """`unfit`: per side, the reasons of its fresh processes that were not fit to measure; `runs`:
    how many each side ran. An unfit side makes the pair "not judged" unless `judge_unfit`."""
    sides = [
        f"the {side} was not fit to measure in {len(reasons)} of {runs.get(side, len(reasons))} runs ({reasons[0]})"
        for side, reasons in unfit.items()
        if reasons
    ]
    if not sides:
        return result
    if judge_unfit:  # asked for a verdict anyway (a shared CI box): it says what it stands on
        return replace(result, why=f"{result.why}; judged although {'; '.join(sides)}")
    return replace(result, verdict=UNJUDGED, why=f"could not judge: {'; '.join(sides)} (measured: {said(result)})")


def said(result: RerunVerdict) -> str:
    """The verdict in words: "slower by 76.8% (beyond ...)", "same (within ...)", "can't tell at this
    noise: ...", "could not judge: ..."."""
    if result.verdict == SAME:
        return f"same ({result.why})"
    if result.verdict == CANT_TELL:
        return f"{CANT_TELL}: {result.why}"
    return result.why
