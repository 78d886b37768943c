"""Regression verdicts in-process (bench.analysis.compare, bench.tools.compare): the verdict rule,
matching two sweeps configuration by configuration, intervals from repeats and from step times,
the command's refusals (exit 2), and the sweep report's repeat error bars. The command on real
runs, its exit code as a gate and its MLflow record are in tests/e2e/test_measure_deeper_runs.py."""

from __future__ import annotations

import json
from typing import Dict, List, Optional

import numpy as np
import pytest

from bench.analysis.compare import FASTER, SAME, SLOWER, compare_frames, match, verdict
from bench.analysis.runs import RunRecord, frame_from_records
from bench.tools.compare import main, parse_threshold


def _run(
    job: str,
    batch: int,
    rates: Optional[List[float]] = None,
    steps: Optional[List[float]] = None,
    threads: str = "2",
    status: str = "FINISHED",
) -> RunRecord:
    config = {
        "data.batch_size": str(batch),
        "model.arch": "resnet18",
        "cpu_threads": threads,
        "tracking.uri": f"sqlite:///{job}.db",
        "seed": "0",
    }
    figures: Dict[str, object] = {
        "images_per_second": float(np.median(rates)) if rates else 100.0,
        "batch_size": batch,
        "global_batch_size": batch,
        "model": "resnet18",
    }
    return RunRecord(
        job, status, "", config, figures if status == "FINISHED" else {}, timeline=steps or [], repeat_rates=rates or []
    )


def _frame(*records: RunRecord):
    return frame_from_records(list(records))


@pytest.mark.parametrize(
    "ratio, low, high, expected, why",
    [
        (0.80, 0.75, 0.85, SLOWER, "beyond the 3% threshold"),
        (0.90, 0.70, 1.05, SAME, "within noise: the interval holds 1"),
        (0.98, 0.975, 0.985, SAME, "within the 3% threshold"),
        (1.20, 1.10, 1.30, FASTER, "beyond the 3% threshold"),
        (0.80, None, None, SLOWER, "beyond the 3% threshold"),  # no samples: the point ratio alone decides
        # beyond only past the printed places ("slower: 0.970× [0.950–0.980]"): judged as printed, within
        (0.96996, 0.95, 0.98, SAME, "within the 3% threshold"),
        (1.03004, 1.02, 1.04, SAME, "within the 3% threshold"),
        (0.90, 0.85, 0.99996, SAME, "within noise: the interval holds 1"),  # printed [0.850–1.000]
        (1.10, 1.00004, 1.15, SAME, "within noise: the interval holds 1"),
    ],
)
def test_the_verdict_rule(ratio, low, high, expected, why):
    decided, said = verdict(ratio, low, high, 0.03)
    assert decided == expected and said == why


def test_repeats_give_the_interval_of_the_ratio_of_medians():
    base = _run("a", 8, rates=[100.0, 102.0, 98.0, 101.0, 99.0])
    same = _run("b", 8, rates=[101.0, 99.0, 100.0, 98.5, 102.0])
    slow = _run("c", 8, rates=[80.0, 81.0, 79.0, 80.5, 79.5])
    (pair,) = compare_frames(_frame(base), _frame(same), 0.03).pairs
    assert pair.samples == "repeats" and pair.verdict == SAME and pair.low < 1 < pair.high
    (pair,) = compare_frames(_frame(base), _frame(slow), 0.03).pairs
    assert pair.verdict == SLOWER and pair.ratio == pytest.approx(0.8) and pair.high < 0.97
    assert pair.label == "resnet18 bs=8"


def test_one_repeat_falls_back_to_a_bootstrap_over_step_times():
    rng = np.random.default_rng(0)
    base = _run("a", 8, steps=list(100 + rng.normal(0, 3, 200)))  # ms per step of 8 images: ~80 images/s
    slow = _run("b", 8, steps=list(125 + rng.normal(0, 3, 200)))
    (pair,) = compare_frames(_frame(base), _frame(slow), 0.03).pairs
    assert pair.samples == "steps" and pair.baseline == pytest.approx(80.0, rel=0.02)
    assert pair.verdict == SLOWER and pair.low <= pair.ratio <= pair.high < 0.9


def test_two_sweeps_are_matched_on_what_they_swept():
    """The candidate changed cpu_threads everywhere: that is the change under test, not a
    configuration; batch 32 ran only in the baseline."""
    baseline = _frame(
        _run("0", 8, rates=[100, 101, 99]), _run("1", 16, rates=[180, 182, 178]), _run("2", 32, rates=[300, 301, 299])
    )
    candidate = _frame(
        _run("0", 8, rates=[70, 71, 69], threads="1"),
        _run("1", 16, rates=[181, 179, 180], threads="1"),
        _run("2", 64, status="FAILED", threads="1"),
    )
    pairs, only_base, only_cand = match(baseline, candidate)
    assert [label for label, _, _ in pairs] == ["data.batch_size=8", "data.batch_size=16"]
    assert only_base == ["data.batch_size=32"] and only_cand == ["data.batch_size=64"]
    comparison = compare_frames(baseline, candidate, 0.03)  # FAILED jobs are not compared
    assert [p.verdict for p in comparison.pairs] == [SLOWER, SAME] and comparison.only_baseline == [
        "data.batch_size=32"
    ]


def test_the_threshold_is_a_percentage_or_a_fraction():
    assert parse_threshold("3%") == pytest.approx(0.03) and parse_threshold("0.05") == 0.05
    for bad in ("3", "x%", "-1%", "150%"):
        with pytest.raises(Exception, match="--threshold"):
            parse_threshold(bad)


def test_the_command_refuses_what_it_cannot_read_in_one_line(tmp_path, capsys):
    assert main([str(tmp_path), str(tmp_path), "--threshold", "3x"]) == 2
    assert main([str(tmp_path / "nope" / "deeper"), str(tmp_path)]) == 2
    assert main([str(tmp_path), str(tmp_path), "--out", str(tmp_path / "out")]) == 2  # an empty directory
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("[ERROR]")]
    assert len(errors) == 3 and "--threshold='3x' is not valid" in errors[0]
    assert "is not a directory nor an MLflow run id" in errors[1] and "holds no run_summary.json" in errors[2]
    assert not (tmp_path / "out").exists()


def test_sweep_plots_draw_the_repeats_spread_as_error_bars(tmp_path):
    from matplotlib.container import ErrorbarContainer

    from bench.analysis.plots import _pyplot, draw_line

    plt = _pyplot()
    fig, ax = plt.subplots()
    points = [
        {"batch_size": 8, "images_per_second": 100.0, "images_per_second_min": 95.0, "images_per_second_max": 104.0},
        {"batch_size": 16, "images_per_second": 180.0},
    ]
    draw_line(ax, points, "batch_size", "images_per_second", "fp32")
    (bars,) = [c for c in ax.containers if isinstance(c, ErrorbarContainer)]
    segments = bars.lines[2][0].get_segments()
    assert [tuple(s[:, 1]) for s in segments] == [(95.0, 104.0), (180.0, 180.0)]
    fig2, ax2 = plt.subplots()
    draw_line(ax2, [{"batch_size": 8, "images_per_second": 100.0}], "batch_size", "images_per_second", "fp32")
    assert not ax2.containers  # no repeats: a plain line
    plt.close(fig)
    plt.close(fig2)


def test_a_comparison_says_when_the_two_runs_ran_other_code_or_packages():
    """Issue 21: every result records bench's version, the git commit (and a dirty tree) and a hash
    of the package list; compare names what differs beside the verdict."""
    base, cand = _run("a", 32, rates=[100.0, 101.0, 99.0]), _run("b", 32, rates=[100.0, 100.5, 99.5])
    base.provenance = {
        "bench_version": "0.1.0",
        "git_commit": "a" * 40,
        "git_dirty": False,
        "packages_sha256": "1" * 16,
    }
    cand.provenance = {"bench_version": "0.1.0", "git_commit": "b" * 40, "git_dirty": True, "packages_sha256": "2" * 16}
    (pair,) = compare_frames(_frame(base), _frame(cand), 0.03).pairs
    assert "code differs: commit aaaaaaaaaaaa vs bbbbbbbbbbbb" in pair.note
    assert "packages differ: 111111111111 vs 222222222222" in pair.note
    assert "candidate ran from a checkout with uncommitted changes" in pair.note and "bench 0.1.0" not in pair.note
    cand.provenance = dict(base.provenance)
    (same,) = compare_frames(_frame(base), _frame(cand), 0.03).pairs
    assert "differ" not in same.note and "uncommitted" not in same.note


def test_a_sweep_whose_jobs_ran_other_code_shows_it_per_job():
    from bench.analysis.render import columns_of

    one, two = _run("0", 16), _run("1", 32)
    one.provenance = {"git_commit": "a" * 40, "packages_sha256": "1" * 16}
    two.provenance = {"git_commit": "b" * 40, "packages_sha256": "1" * 16}
    headers = [header for header, _, _ in columns_of(_frame(one, two))]
    assert "code" in headers and "packages" not in headers and headers[-1] == "error"
    two.provenance = dict(one.provenance)
    assert "code" not in [header for header, _, _ in columns_of(_frame(one, two))]


def test_two_different_configurations_are_both_named_and_the_plot_title_is_wrapped_not_cut(tmp_path):
    """Issue 39 item 5: the label ran candidate first, against the columns (baseline, candidate), and the
    table cut it at 40 characters; the keys the configs differ in were not said. Now baseline first,
    whole, and the differing keys (values baseline → candidate) come above the verdict."""
    from bench.tools.compare_output import plot, render_text, verdict_lines

    small, large = _run("a", 16, rates=[100.0, 101.0]), _run("b", 64, rates=[300.0, 303.0])
    comparison = compare_frames(_frame(small), _frame(large), 0.03)
    assert comparison.pairs[0].label == "resnet18 bs=16 vs resnet18 bs=64"
    header, row = render_text(comparison).splitlines()
    assert row.startswith("resnet18 bs=16 vs resnet18 bs=64 ") and row.split()[5:7] == ["100.5", "301.5"]
    assert header.index("baseline") < header.index("candidate") and header.index(" ratio") + 1 == row.index("3.000")
    assert verdict_lines(comparison)[:2] == [
        "the configs differ: data.batch_size 16 → 64",  # tracking.uri differs too: noise, not said
        "verdict: faster: 3.000× [2.970–3.030], beyond the 3% threshold",
    ]
    long = _run("d", 16, rates=[100.0, 101.0])
    long.metrics["model"] = "a_model_with_a_name_longer_than_forty_characters"
    header, row = render_text(compare_frames(_frame(small), _frame(long), 0.03)).splitlines()
    assert row.startswith("resnet18 bs=16 vs a_model_with_a_name_longer_than_forty_characters bs=16 ")
    assert header.index(" ratio") + 1 == row.index("1.000") > 70  # the columns widen to the whole label
    title = "/a/very/long/path/to/the/baseline/run/directory/2026-11-25/10-00-00 " * 3
    image = plot(comparison, tmp_path / "compare.png", title)
    assert image.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    same = compare_frames(_frame(small), _frame(_run("c", 16, rates=[100.0, 99.0])), 0.03)
    assert same.pairs[0].label == "resnet18 bs=16"


def test_a_side_that_was_not_fit_to_measure_is_not_judged(tmp_path, capsys):
    """The issue's case: the 2-thread baseline ran beside other load, the 1-thread candidate did
    not; "faster by 439%" said nothing of why. Now the pair is not judged, the note names the side
    and its reasons, and the command exits 3 (not judged), not 0."""
    from bench.analysis.verdicts import UNJUDGED

    reason = "other processes used 0.97 of 2 usable cores during the window (limit 0.2)"
    base = _run("a", 8, rates=[26.0, 25.5, 26.5])
    base.metrics.update(fit_to_measure=False, fit_reasons=reason)
    cand = _run("b", 8, rates=[141.0, 140.0, 142.0])
    cand.metrics.update(fit_to_measure=True, fit_reasons="")
    (pair,) = compare_frames(_frame(base), _frame(cand), 0.03).pairs
    assert pair.verdict == UNJUDGED and pair.ratio == pytest.approx(141 / 26)
    assert pair.headline == "not judged: the baseline was not fit to measure"
    assert pair.reasons == [f"baseline: {reason}", "measured: faster: 5.423× [5.283–5.569], beyond the 3% threshold"]
    fit_base = _run("c", 8, rates=[26.0, 25.5, 26.5])
    fit_base.metrics.update(fit_to_measure=1.0)  # as MLflow gives it back
    assert compare_frames(_frame(fit_base), _frame(cand), 0.03).pairs[0].verdict == FASTER
    older = _run("d", 8, rates=[141.0, 140.0, 142.0])  # recorded before the verdict existed: judged as before
    assert compare_frames(_frame(older), _frame(cand), 0.03).pairs[0].verdict == SAME
    (judged,) = compare_frames(_frame(base), _frame(cand), 0.03, judge_unfit=True).pairs  # a shared CI box asks anyway
    assert judged.verdict == FASTER and judged.headline == "faster: 5.423× [5.283–5.569], beyond the 3% threshold"
    assert judged.reasons == [f"judged although the baseline was not fit to measure: {reason}"]

    for name, record in (("base", base), ("cand", cand)):
        job = tmp_path / name
        job.mkdir()
        (job / "run_summary.json").write_text(json.dumps({"results": record.metrics, "config": {}}))
        (job / "repeats.csv").write_text(
            "repeat,images,seconds,images_per_second\n"
            + "".join(f"{i},8,1.0,{rate}\n" for i, rate in enumerate(record.repeat_rates, start=1))
        )
    assert main([str(tmp_path / "base"), str(tmp_path / "cand"), "--out", str(tmp_path / "out")]) == 3
    err = capsys.readouterr().err
    assert (
        "verdict: not judged: the baseline was not fit to measure\n"
        f"  ratio: candidate / baseline of the medians of 3 and 3 repeats\n  baseline: {reason}\n" in err
    ), err
    assert main([str(tmp_path / "cand"), str(tmp_path / "cand"), "--out", str(tmp_path / "out")]) == 0
    # both sides unfit: one whole sentence (issue 40 §10: it read "..., the candidate" as if cut)
    (both,) = compare_frames(_frame(base), _frame(base), 0.03).pairs
    assert both.headline == "not judged: the baseline and the candidate were not fit to measure"
    assert main([str(tmp_path / "base"), str(tmp_path / "cand"), "--out", str(tmp_path / "out"), "--judge-unfit"]) == 0


def test_an_inference_pair_compares_the_per_batch_latency_in_ms_lower_being_faster():
    """issue 29: what compare samples is the scenario's (its report class's view.sample): an inference
    run's per-batch latency, in ms, its median; the ratio stays "> 1: faster" (baseline / candidate)."""
    rng = np.random.default_rng(0)
    runs = []
    for job, ms in (("a", 10.0), ("b", 12.5)):
        run = _run(job, 8, steps=list(ms + rng.normal(0, 0.2, 200)))
        run.config["mode"] = "inference"
        run.metrics.update(mode="inference", latency_ms_p50=ms)
        runs.append(run)
    (pair,) = compare_frames(_frame(runs[0]), _frame(runs[1]), 0.03).pairs
    assert pair.unit == "ms" and pair.samples == "steps" and pair.verdict == SLOWER
    assert pair.baseline == pytest.approx(10.0, abs=0.1) and pair.candidate == pytest.approx(12.5, abs=0.1)
    assert pair.ratio == pytest.approx(10.0 / 12.5, abs=0.02) and pair.high < 1
    assert pair.label == "inference resnet18 bs=8"


def test_runs_of_two_scenarios_or_of_an_unknown_one_are_refused_in_one_line():
    from bench.errors import ReportError
    from bench.scenarios import report_class

    train, storage = _run("a", 8, rates=[100.0, 101.0]), _run("b", 8)
    storage.config["mode"] = "storage"
    with pytest.raises(ReportError, match=r"the baseline is a mode=train run and the candidate a mode=storage run"):
        compare_frames(_frame(train), _frame(storage), 0.03)
    with pytest.raises(ReportError, match=r"mode=count has no scenario here \(conf/scenario/: .*train.*\): its"):
        report_class("count")  # no quiet fallback to training's figures
    assert report_class(None) is report_class("train")  # recorded before modes existed: training
