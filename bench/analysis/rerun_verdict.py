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

from dataclasses import replace
from typing import Dict, List

from bench.analysis.rounds import CANT_TELL, Rounds
from bench.analysis.verdicts import FASTER, SAME, SLOWER, UNJUDGED, Comparison, Pair

__all__ = ["CANT_TELL", "FASTER", "SAME", "SLOWER", "UNJUDGED", "as_comparison", "judge", "noise_floor", "unfit_sides"]


def noise_floor(rounds: Rounds) -> float:
    """The largest gap between a side's two runs within one round (A-B-B-A: each side runs twice)."""
    pairs = [pair for values in rounds.figures.values() for pair in zip(values[0::2], values[1::2], strict=True)]
    return max((max(pair) / min(pair) - 1 for pair in pairs if min(pair) > 0), default=0.0)


def judge(rounds: Rounds, threshold: float) -> Pair:
    """The verdict on candidate / baseline from the figures alone (fitness: `unfit_sides`), as a
    plain compare's pair: the paired ratio with each round's figures (each side's mean of its two
    runs), whose ratios it is the median of, and the noise floor."""
    ratio = rounds.ratio("baseline", "candidate")
    floor = noise_floor(rounds)
    r, low, high = ratio.ratio, ratio.low, ratio.high
    margin = max(threshold, floor)
    pct, noise = f"{100 * threshold:g}%", f"{100 * floor:.1f}%"
    each = list(zip(rounds.per_round["baseline"], rounds.per_round["candidate"], strict=True))
    basis = f"candidate / baseline, paired: the median of the ratios of {len(each)} rounds of fresh processes"

    def given(verdict: str, why: str, *reasons: str) -> Pair:
        return Pair(
            "", None, None, None, r, low, high, "rounds", verdict, why, list(reasons), "images/s", basis, each, floor
        )

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


def unfit_sides(unfit: Dict[str, List[str]], runs: Dict[str, int]) -> List[tuple]:
    """`unfit`: per side, the reasons of its fresh processes that were not fit to measure; `runs`: how
    many each side ran. As bench.analysis.verdicts.with_fitness takes them: (side, "N of M runs", reason)."""
    return [(side, f"{len(why)} of {runs.get(side, len(why))} runs", why[0]) for side, why in unfit.items() if why]


def as_comparison(result: Pair, label: str, threshold: float) -> Comparison:
    """The rerun as a plain compare's one pair, for its page (bench.tools.compare_output)."""
    return Comparison([replace(result, label=label)], threshold, band=(1 / (1 + threshold), 1 + threshold))
