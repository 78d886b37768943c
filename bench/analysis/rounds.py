"""One way to compare speeds on a shared machine: alternate the sides in rounds, then give the
ratio with its 95% interval and a verdict that admits noise.

Every tool that measures bench against a baseline (overhead, sweep_overhead, train_costs,
bench.data bench-loader, iobench_compare, storage_ceiling) runs its sides through `alternate`:

- a warm-up pass of every side first (imports, page cache, allocator, connection pools);
- then rounds in palindromic order, A-B-B-A (A-B-C-C-B-A with three sides), so a drift in the
  machine's speed during a round hits every side alike;
- each round gives one ratio per other side: the mean of the first side's two figures over the
  mean of the other's, and the summary is the median of the per-round ratios with its 95%
  percentile-bootstrap interval (bench.maths.confidence);
- the verdict says "can't tell at this noise" when the interval holds 1: more rounds, or a
  quieter machine, would be needed to call it.

Figures are rates (bigger is better: images/s, MB/s); pass a `before` to reset state before
every timed call (the storage ceiling drops the page cache for its cold rounds).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Callable, Dict, List, Mapping, Optional, Sequence

from bench.maths.confidence import bootstrap, interval

Measure = Callable[[], float]
FASTER, SLOWER, CANT_TELL = "faster", "slower", "can't tell at this noise"
PLACES = 3  # a ratio and its interval as the headlines print them; verdicts hold for the printed figures too


def figure(value: float) -> str:
    """A rate for a round line: one decimal from 10 up, three below (GB/s reads 1.397, not 1.4)."""
    return f"{value:.1f}" if abs(value) >= 10 else f"{value:.3f}"


@dataclass(frozen=True)
class Ratio:
    """first side / `other`: the median of per-round ratios, its 95% interval and a verdict."""

    other: str
    ratio: float
    low: float
    high: float
    per_round: List[float]

    @property
    def verdict(self) -> str:
        return self.verdict_at(PLACES)

    def verdict_at(self, places: int) -> str:
        """The verdict the interval printed to `places` decimals bears out: an end that prints as 1 holds
        1 (a low end of 1.0004 is "1.000" on the line, so not "faster"). An end that clears 1 printed
        clears it unrounded too."""
        low, high = round(self.low, places), round(self.high, places)
        return FASTER if low > 1.0 else SLOWER if high < 1.0 else CANT_TELL

    def describe(self, name: str) -> str:
        rounds = " ".join(f"{r:.3f}" for r in self.per_round)
        interval = f"{self.ratio:.{PLACES}f} [95% {self.low:.{PLACES}f}-{self.high:.{PLACES}f}]"
        return f"{name}/{self.other} {interval} {self.verdict} (rounds {rounds})"


def ratio_of(ours: Sequence[float], theirs: Sequence[float], other: str = "baseline") -> Ratio:
    """Per-round ratios of two sides measured the same number of times in each round."""
    if not (per_round := [o / t for o, t in zip(ours, theirs, strict=True) if t > 0]):
        return Ratio(other, float("nan"), float("nan"), float("nan"), [])
    median = statistics.median(per_round)
    if len(per_round) < 2:  # one round: no spread to judge by
        return Ratio(other, median, 0.0, float("inf"), per_round)
    low, high = interval(bootstrap(per_round))
    return Ratio(other, median, low, high, per_round)


@dataclass
class Rounds:
    """What `alternate` measured: every figure of every side, in order, and per round."""

    names: List[str]
    figures: Dict[str, List[float]]
    per_round: Dict[str, List[float]]  # each side's mean figure in each round

    def median(self, name: str) -> float:
        return statistics.median(self.figures[name])

    def ratio(self, other: str, name: Optional[str] = None) -> Ratio:
        """`name` (default: the first side) / `other`, round by round."""
        return ratio_of(self.per_round[name or self.names[0]], self.per_round[other], other)

    def ratios(self) -> Dict[str, Ratio]:
        """The first side against every other side."""
        return {other: self.ratio(other) for other in self.names[1:]}

    def summary(self, unit: str, label: str = "") -> str:
        """One line per side (median and range), then one per ratio with its interval and verdict."""
        head = f"{label} " if label else ""
        lines = [
            f"{head}{name}: median {figure(self.median(name))} {unit} [{figure(min(values))}-{figure(max(values))}]"
            for name, values in self.figures.items()
        ]
        lines += [f"{head}{ratio.describe(self.names[0])}" for ratio in self.ratios().values()]
        return "\n".join(lines)


def alternate(
    sides: Mapping[str, Measure],
    rounds: int,
    *,
    warmup: int = 1,
    before: Callable[[], None] = lambda: None,
    label: str = "",
    unit: str = "",
    echo: Callable[[str], None] = print,
) -> Rounds:
    """Measure every side `rounds` times twice, in A-B-B-A order, after `warmup` untimed passes."""
    if rounds < 1:
        raise ValueError(f"rounds={rounds}: at least 1 round is needed")
    names = list(sides)
    for _ in range(warmup):
        for name in names:
            before()
            sides[name]()
    figures: Dict[str, List[float]] = {name: [] for name in names}
    per_round: Dict[str, List[float]] = {name: [] for name in names}
    for number in range(1, rounds + 1):
        this_round: Dict[str, List[float]] = {name: [] for name in names}
        for name in names + names[::-1]:
            before()
            this_round[name].append(float(sides[name]()))
        for name, values in this_round.items():
            figures[name].extend(values)
            per_round[name].append(statistics.fmean(values))
        head = f"{label} " if label else ""
        sides_text = " | ".join(f"{name} " + ", ".join(figure(v) for v in this_round[name]) for name in names)
        echo(f"{head}round {number}: " + sides_text + (f" {unit}" if unit else ""))
    return Rounds(names, figures, per_round)
