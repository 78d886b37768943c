"""bench.compare --rerun's verdict (bench.tools.compare_rerun): the ratio of fresh processes, judged
against the noise between them. Here the processes' images/s are simulated (seeded noise the
size this machine shows between processes of one config); tests/e2e/test_measure_deeper_runs.py
runs the real processes."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Callable

import pytest

from bench.analysis.rounds import alternate
from bench.errors import ReportError
from bench.tools.compare_rerun import SAME, SLOWER, judge, noise_floor, rerun_overrides


def simulated_process(rng: random.Random, rate: float, spread: float) -> Callable[[], float]:
    """A fresh process's images/s: `rate` times log-normal noise of `spread` (5.4% is what two runs
    of one cpu_smoke config differed by here, issue 20)."""
    return lambda: rate * rng.lognormvariate(0.0, spread)


def verdict_of(base_rate: float, cand_rate: float, seed: int, spread: float = 0.05, rounds: int = 3) -> str:
    rng = random.Random(seed)
    measured = alternate(
        {"candidate": simulated_process(rng, cand_rate, spread), "baseline": simulated_process(rng, base_rate, spread)},
        rounds,
        warmup=0,
        echo=lambda line: None,
    )
    return judge(measured, 0.03).verdict


def test_the_same_config_against_itself_ten_times_is_never_slower_simulated_processes():
    assert [verdict_of(137.7, 137.7, seed) for seed in range(10)] == [SAME] * 10


def test_a_config_twice_as_slow_is_slower_every_time_simulated_processes():
    assert [verdict_of(137.7, 137.7 / 2, seed) for seed in range(10)] == [SLOWER] * 10


def test_a_noisier_machine_still_never_calls_the_same_config_slower_simulated_processes():
    """Twice this machine's spread between processes: still no "slower" for an unchanged config."""
    assert [verdict_of(137.7, 137.7, seed, spread=0.10) for seed in range(10)] == [SAME] * 10


def test_the_noise_floor_is_the_largest_gap_of_a_side_against_itself():
    values = iter([100.0, 90.0, 50.0, 55.0])  # A-B-B-A: candidate 100, baseline 90, baseline 50... per call order
    measured = alternate({"candidate": lambda: next(values), "baseline": lambda: next(values)}, 1, warmup=0,
                         echo=lambda line: None)
    # candidate ran 100 then 55, baseline 90 then 50: gaps 100/55 - 1 and 90/50 - 1
    assert noise_floor(measured) == pytest.approx(max(100 / 55, 90 / 50) - 1)


def test_rerun_takes_run_directories_and_leaves_hydra_keys_out(tmp_path: Path):
    run = tmp_path / "run"
    (run / ".hydra").mkdir(parents=True)
    (run / ".hydra" / "overrides.yaml").write_text("- +experiment=cpu_smoke\n- hydra.run.dir=/x\n- cpu_threads=1\n")
    assert rerun_overrides(str(run), "baseline") == ["+experiment=cpu_smoke", "cpu_threads=1"]
    with pytest.raises(ReportError, match=r"--rerun needs run directories: candidate 0123abc has no"):
        rerun_overrides("0123abc", "candidate")
