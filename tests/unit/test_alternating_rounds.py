"""The one harness every comparison tool alternates its sides with (bench.analysis.rounds):
palindromic order, warm-up passes, per-round ratios with a 95% interval and a verdict that says
when the noise is too large to call a difference. The sides here are labels with canned
figures (the sides are labels with canned figures): no tool or process is run."""

from __future__ import annotations

import itertools

import pytest

from bench.analysis.rounds import CANT_TELL, FASTER, SLOWER, alternate, ratio_of


def recording(calls, name, figures):
    values = iter(figures)

    def measure():
        calls.append(name)
        return next(values)

    return measure


def test_sides_run_a_b_b_a_after_one_warm_up_pass_each():
    calls, resets = [], []
    sides = {"a": recording(calls, "a", itertools.count(10)), "b": recording(calls, "b", itertools.count(100))}
    found = alternate(sides, 2, warmup=1, before=lambda: resets.append(len(calls)), echo=lambda line: None)
    assert calls == ["a", "b"] + ["a", "b", "b", "a"] * 2
    assert resets == list(range(len(calls)))  # `before` ran before every call, warm-up included
    assert found.figures == {"a": [11, 12, 13, 14], "b": [101, 102, 103, 104]}  # the warm-up figure is dropped
    assert found.per_round == {"a": [11.5, 13.5], "b": [101.5, 103.5]}


def test_three_sides_run_a_b_c_c_b_a_and_each_round_is_printed():
    calls, lines = [], []
    sides = {name: recording(calls, name, itertools.repeat(1.0)) for name in ("bench", "tool", "plain")}
    alternate(sides, 1, warmup=0, label="warm", unit="MB/s", echo=lines.append)
    assert calls == ["bench", "tool", "plain", "plain", "tool", "bench"]
    assert lines == ["warm round 1: bench 1.000, 1.000 | tool 1.000, 1.000 | plain 1.000, 1.000 MB/s"]


def test_a_clear_difference_is_called_and_noise_is_not():
    twice = alternate({"ours": lambda: 2.0, "base": lambda: 1.0}, 5, warmup=0, echo=lambda line: None)
    ratio = twice.ratio("base")
    assert ratio.ratio == pytest.approx(2.0) and ratio.low == pytest.approx(2.0) and ratio.verdict == FASTER
    assert ratio_of([1.0] * 4, [2.0] * 4).verdict == SLOWER
    # the same thing measured against itself with +-20% noise: never faster or slower
    noisy = ratio_of([1.0, 1.2, 0.8, 1.1, 0.9], [1.1, 0.9, 1.0, 0.8, 1.2])
    assert noisy.low < 1.0 < noisy.high and noisy.verdict == CANT_TELL
    assert "can't tell at this noise" in noisy.describe("ours")


def test_one_round_has_no_spread_to_judge_by():
    single = ratio_of([3.0], [1.0])
    assert single.ratio == 3.0 and single.verdict == CANT_TELL


def test_summary_names_every_side_and_every_ratio():
    found = alternate(
        {"bench": lambda: 4.0, "tool": lambda: 8.0, "plain": lambda: 2.0}, 2, warmup=0, echo=lambda line: None
    )
    text = found.summary("MB/s", "cold")
    assert "cold bench: median 4.000 MB/s [4.000-4.000]" in text
    assert "cold bench/tool 0.500" in text and "slower" in text and "cold bench/plain 2.000" in text
    assert set(found.ratios()) == {"tool", "plain"}


def test_a_ratio_far_below_one_is_printed_with_its_digits_not_as_zero():
    """A reader ~240x slower than its baseline (under coverage's tracer) printed `0.00 [95% 0.00-0.00]`:
    as if it read nothing. A ratio under 0.01 keeps two significant digits; the others print as before."""
    from bench.analysis.rounds import Ratio
    from bench.tools.ab import said

    assert said(Ratio("baseline", 0.0042, 0.00397, 0.0044, [])) == "0.0042 [95% 0.0040-0.0044] slower"
    assert said(Ratio("baseline", 0.98, 0.95, 1.01, [])) == f"0.98 [95% 0.95-1.01] {CANT_TELL}"
    assert said(Ratio("baseline", 1.5, 1.2, 1.8, []), 3) == f"1.500 [95% 1.200-1.800] {FASTER}"
    assert said(Ratio("baseline", 0.0042, 0.004, 0.0044, []), 3) == f"0.004 [95% 0.004-0.004] {SLOWER}"


def test_zero_rounds_is_refused():
    with pytest.raises(ValueError, match="rounds=0"):
        alternate({"a": lambda: 1.0}, 0)


def test_the_ceiling_command_reads_both_as_warm_and_cold():
    from bench.tools.storage_ceiling import modes_of

    assert modes_of("both") == ["warm", "cold"] and modes_of("cold") == ["cold"]
    assert modes_of("warm, cold,warm") == ["warm", "cold"]
    with pytest.raises(SystemExit, match="--modes='hot' is not valid: accepted warm, cold, both"):
        modes_of("hot")


def test_the_ab_tools_flags_are_spellings_of_config_keys_read_as_python_m_bench_reads_them():
    """Issue 41 §2: the A/B tools' sizing flags (bench.overhead --batch-size, storage_ceiling --threads)
    are spellings of config keys, and any other key is taken as `python -m bench` takes it (key=value,
    --key=value, --key value, the seed's names); the tool's own flags stay its own."""
    import argparse

    from bench.tools import ab

    parser = argparse.ArgumentParser()
    ab.spell(parser, "--batch-size", 32)
    ab.spell(parser, "--threads", 4, key="storage.workload.read_threads")
    ab.spell(parser, "--transfer-size", None, key="storage.workload.transfer_size")  # unset: the config's default
    parser.add_argument("--rounds", type=int, default=3)
    argv = ["--batch-size", "8", "--data.num_workers=2", "--rounds", "5", "training.epochs=3", "--model.arch", "vgg11"]
    args, overrides = ab.parse(parser, argv)
    assert args.rounds == 5 and args.batch_size == 8
    assert overrides == [
        "data.batch_size=8",
        "storage.workload.read_threads=4",
        "data.num_workers=2",
        "train.epochs=3",
        "model.arch=vgg11",
    ]
    with pytest.raises(SystemExit) as refused:
        ab.parse(parser, ["--batch-size"])
    assert refused.value.code == 2


def test_a_verdict_holds_for_its_interval_as_printed():
    """An interval whose low end clears 1 only past the printed places (1.0004 prints "1.000") holds 1
    on the line a reader sees, so it is not called faster; each printer judges at its own places."""
    from bench.analysis.rounds import Ratio
    from bench.maths.stats import on_its_side
    from bench.tools.ab import said

    assert Ratio("b", 1.01, 1.0004, 1.02, []).verdict == CANT_TELL
    assert Ratio("b", 1.01, 1.0006, 1.02, []).verdict == FASTER
    assert Ratio("b", 0.99, 0.98, 0.9996, []).verdict == CANT_TELL
    at_two = Ratio("b", 1.01, 1.004, 1.02, [])
    assert at_two.verdict == FASTER and at_two.verdict_at(2) == CANT_TELL
    assert said(at_two) == f"1.01 [95% 1.00-1.02] {CANT_TELL}"
    assert said(at_two, 3) == f"1.010 [95% 1.004-1.020] {FASTER}"
    # a gate's refusal (--min-ratio, the storage ceiling's floors) shows a ratio below it as below it
    assert on_its_side(0.9996, 1.0, 2) == "0.9996" and on_its_side(0.5, 1.0, 2) == "0.50"
    assert on_its_side(0.99949, 0.9995, 2) == "0.999" and on_its_side(1.0, 1.0, 2) == "1.00"
    assert on_its_side(1.10004, 1.1, 3) == "1.10004" and on_its_side(float("nan"), 0.98, 3) == "nan"
