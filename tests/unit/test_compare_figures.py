"""Issue 34 §2: every figure `python -m bench.compare` shows (the terminal, compare.md, compare.html,
compare.png) comes from one definition, the verdict is one sentence then its reasons, and the chart
draws the threshold and the noise floor the verdict used. In-process: the rerun's rounds are
constructed (no child process), the plain compare's runs are run directories written here."""

from __future__ import annotations

import html
import json
import re
import statistics
from pathlib import Path
from typing import List

import pytest

from bench.analysis.rounds import Rounds
from bench.analysis.runs import RunRecord, frame_from_records
from bench.analysis.verdicts import CANT_TELL, Comparison, as_comparison, judge
from bench.tools.compare import main
from bench.tools.compare_output import draw, render_text, table, verdict_lines, write_outputs


def rounds_of(baseline: List[float], candidate: List[float]) -> Rounds:
    """What `alternate` measures, A-B-B-A: each side's runs in order, two a round."""
    per_round = {
        side: [statistics.fmean(values[i : i + 2]) for i in range(0, len(values), 2)]
        for side, values in (("baseline", baseline), ("candidate", candidate))
    }
    return Rounds(["baseline", "candidate"], {"baseline": baseline, "candidate": candidate}, per_round)


def axes_of(comparison: Comparison):
    from bench.analysis.plots import _pyplot

    plt = _pyplot()
    fig, ax = plt.subplots()
    draw(comparison, ax)
    plt.close(fig)
    return ax


def drawn(ax, label: str) -> List[float]:
    """The x values of what the chart drew under `label` (a line's points, or vertical lines)."""
    for line in ax.lines:
        if line.get_label() == label:
            return [float(x) for x in line.get_xdata()]
    for collection in ax.collections:
        if collection.get_label() == label:
            return sorted(float(segment[0][0]) for segment in collection.get_segments())
    raise AssertionError(f"nothing drawn as {label!r}: {[a.get_label() for a in ax.lines + ax.collections]}")


def band(ax) -> List[float]:
    """The threshold band's two edges, in data coordinates."""
    (patch,) = ax.patches
    xs = patch.get_patch_transform().transform(patch.get_path().vertices)[:, 0]
    return [float(min(xs)), float(max(xs))]


def test_a_paired_ratio_is_shown_with_its_rounds_everywhere_never_with_side_medians(tmp_path):
    """The issue's case: the sides' medians (12.5 and 8.5 images/s: 0.68) point one way, the median
    of the per-round ratios (0.45 and 1.6: 1.025) the other. Every place shows the paired ratio and
    the rounds it is the median of, and no place shows the two medians."""
    measured = rounds_of([20.0, 20.4, 5.0, 5.1], [9.0, 9.2, 8.0, 8.2])
    assert statistics.median(measured.figures["candidate"]) / statistics.median(measured.figures["baseline"]) < 0.7
    result = judge(measured, 0.03)
    comparison = as_comparison(result, "data.image_size=64 vs data.image_size=32", 0.03)
    (pair,) = comparison.pairs
    assert pair.ratio == pytest.approx(statistics.median(pair.round_ratios)) and pair.ratio > 1
    ratio, rounds = f"{pair.ratio:.3f}", [f"{r:.3f}" for r in pair.round_ratios]

    text = render_text(comparison).splitlines()  # the terminal
    assert text[1].split()[-4] == ratio and [line.split()[-1] for line in text[2:]] == rounds
    assert [line.split()[:2] for line in text[2:]] == [["round", "1"], ["round", "2"]]
    assert [float(x) for x in text[2].split()[2:4]] == pytest.approx([20.2, 9.1])  # each side's mean in round 1
    shown = table(comparison)  # the page's table
    assert list(shown["ratio"]) == [ratio, *rounds] and list(shown["verdict"])[1:] == ["", ""]
    assert shown["ratio of"][0].startswith("candidate / baseline, paired: the median of the ratios of 2 rounds")
    assert verdict_lines(comparison)[0].startswith(f"verdict: {pair.verdict}: {ratio}× [{pair.low:.3f}–")
    md, page, _ = write_outputs(comparison, tmp_path, "a title")
    cells = re.findall(r"<td>(.*?)</td>", page.read_text())
    assert ratio in cells and all(r in cells for r in rounds) and f"verdict: {pair.verdict}: {ratio}×" in md.read_text()
    for said in ("\n".join(text), md.read_text(), page.read_text()):
        assert "12.5" not in said and "8.5" not in said and "0.68" not in said  # no pair of medians
    ax = axes_of(comparison)  # the plot
    (bars,) = ax.containers
    assert float(bars.lines[0].get_xdata()[0]) == pytest.approx(pair.ratio)
    assert sorted(bars.lines[2][0].get_segments()[0][:, 0]) == pytest.approx([pair.low, pair.high])
    assert drawn(ax, "each round's ratio") == pytest.approx(pair.round_ratios)


def test_the_chart_draws_the_threshold_band_and_the_noise_floor_the_verdict_used():
    """The issue's quiet machine: ratio about 1, the whole interval inside the ±3% band, but a
    noise floor of about 3.8% above the threshold: "can't tell". The chart now draws the floor's
    lines, outside the band, where the verdict put them; a plain compare draws its own band."""
    measured = rounds_of([100.0, 103.8, 101.0, 100.5], [100.2, 100.0, 101.5, 100.9])
    result = judge(measured, 0.03)
    assert result.verdict == CANT_TELL and result.noise_floor == pytest.approx(0.038)
    comparison = as_comparison(result, "same overrides", 0.03)
    ax = axes_of(comparison)
    assert band(ax) == pytest.approx([1 / 1.03, 1.03])  # the rerun verdict's rule: 1 / (1 + t) to 1 + t
    floor = drawn(ax, f"noise floor ±{100 * result.noise_floor:.1f}%")
    assert floor == pytest.approx([1 / (1 + result.noise_floor), 1 + result.noise_floor])
    assert floor[0] < band(ax)[0] <= result.low and result.high <= band(ax)[1] < floor[1]
    assert "the 3.8% noise floor is larger than the 3% threshold" in result.headline

    plain = Comparison([], 0.05)
    assert band(axes_of(plain)) == pytest.approx([0.95, 1.05])  # bench.analysis.compare's rule: 1 ± t


def _run_dir(root: Path, name: str, rates: List[float], fit: bool = True) -> Path:
    run = root / name
    run.mkdir()
    results = {"images_per_second": rates[0], "batch_size": 8, "model": "resnet18", "fit_to_measure": fit}
    results["fit_reasons"] = "" if fit else "swap-in 12 MB"
    config = {"data": {"batch_size": 8}, "model": {"arch": "resnet18"}}
    (run / "run_summary.json").write_text(json.dumps({"results": results, "config": config}))
    (run / "repeats.csv").write_text(
        "repeat,images,seconds,images_per_second\n" + "".join(f"{i},8,1.0,{r}\n" for i, r in enumerate(rates, 1))
    )
    return run


SENTENCE = re.compile(r"^verdict: (slower|faster|same|not judged): [^()]+$")  # one sentence, no parentheses


@pytest.mark.parametrize(
    ("candidate", "fit", "code", "first"),
    [
        ([80.0, 81.0, 79.5], True, 1, "verdict: slower: 0.800× [0.78"),
        ([130.0, 131.0, 129.0], True, 0, "verdict: faster: 1.300× [1.2"),
        ([100.5, 99.5, 100.0], True, 0, "verdict: same: 1.000× [0.9"),
        ([80.0, 81.0, 79.5], False, 3, "verdict: not judged: the candidate was not fit to measure"),
    ],
    ids=["slower", "faster", "same", "not judged"],
)
def test_the_verdict_is_one_sentence_then_its_reasons(tmp_path, capsys, candidate, fit, code, first):
    base, cand = _run_dir(tmp_path, "base", [100.0, 101.0, 99.0]), _run_dir(tmp_path, "cand", candidate, fit)
    assert main([str(base), str(cand), "--out", str(tmp_path / "out")]) == code
    err = capsys.readouterr().err.splitlines()
    verdict = err.index(next(line for line in err if line.startswith("verdict: ")))
    sentence, reasons = err[verdict], err[verdict + 1 :]
    assert sentence.startswith(first) and SENTENCE.match(sentence), sentence
    assert reasons[0] == "  ratio: candidate / baseline of the medians of 3 and 3 repeats"
    assert all(line.startswith("  ") and line.strip() for line in reasons), reasons
    if not fit:
        assert reasons[1:] == [
            "  candidate: swap-in 12 MB",
            "  measured: slower: 0.800× [0.787–0.818], beyond the 3% threshold",
            "  run it again on a quiet machine, or pass --judge-unfit for a verdict anyway",
        ]


def test_two_sweeps_give_one_sentence_then_each_configuration():
    def run(job: str, batch: int, rates: List[float]) -> RunRecord:
        config = {"data.batch_size": str(batch), "model.arch": "resnet18"}
        return RunRecord(job, "FINISHED", "", config, {"images_per_second": rates[0]}, repeat_rates=rates)

    from bench.analysis.compare import compare_frames

    base = frame_from_records([run("0", 8, [100, 101, 99]), run("1", 16, [180, 182, 178])])
    cand = frame_from_records([run("0", 8, [70, 71, 69]), run("1", 16, [181, 179, 180])])
    lines = verdict_lines(compare_frames(base, cand, 0.03))
    assert lines[0] == "verdict: slower: 1 of 2 configurations, beyond the 3% threshold"
    assert lines[1].startswith("  data.batch_size=8: slower: 0.700× [") and lines[2].startswith("    ratio: ")
    assert lines[3].startswith("  data.batch_size=16: same: 1.000× [")


def test_noisy_repeats_that_hold_1_say_how_many_repeats_would_resolve_the_threshold():
    """Repeats ~10% apart and a 3% threshold: "same", within noise, and about how many repeats a side
    would make the interval that narrow (bench.maths.confidence.repeats_needed), not a bare "same"."""
    from bench.analysis.compare import compare_frames
    from bench.maths.confidence import repeats_needed

    def run(rates: List[float]) -> RunRecord:
        return RunRecord(
            "0", "FINISHED", "", {"model.arch": "resnet18"}, {"images_per_second": rates[0]}, repeat_rates=rates
        )

    (pair,) = compare_frames(
        frame_from_records([run([100, 110, 90])]), frame_from_records([run([101, 90, 111])]), 0.03
    ).pairs
    assert (pair.verdict, pair.why) == ("same", "within noise: the interval holds 1")
    noisier = max(statistics.stdev(rates) / statistics.mean(rates) for rates in ([100, 110, 90], [101, 90, 111]))
    needed = repeats_needed(noisier, 0.03)  # the noisier side's spread sets it
    assert needed > 3 and f"about {needed} repeats per side would resolve 3%" in pair.reasons


def test_the_same_run_on_both_sides_is_said(tmp_path, capsys):
    """Issue 33 §5: `compare D D` said nothing. It says so, and what the figures then mean."""
    run = _run_dir(tmp_path, "run", [100.0, 101.0, 99.0])
    other = _run_dir(tmp_path, "other", [100.0, 101.0, 99.0])
    assert main([str(run), f"{tmp_path}/./run/", "--out", str(tmp_path / "out")]) == 0
    err = capsys.readouterr().err
    assert err.splitlines()[0] == (
        f"compare: the same run on both sides ({run}): its figures are compared with themselves: the ratio is 1 "
        "by construction and says nothing about speed (--rerun N measures a run's config against itself)"
    )
    assert "verdict: same: 1.000× [" in err and "\n  the same run on both sides\n" in err
    page = html.unescape((tmp_path / "out" / "compare.html").read_text())
    assert "the same run on both sides" in page
    assert main([str(run), str(other), "--out", str(tmp_path / "out")]) == 0
    assert "the same run" not in capsys.readouterr().err  # two runs of one config are two runs


def test_each_compare_keeps_its_own_folder_or_says_it_replaces_one(tmp_path, capsys, monkeypatch):
    """Issue 34 §2: a second compare in one folder overwrote ./compare without a word."""
    base, cand = _run_dir(tmp_path, "base", [100.0, 101.0, 99.0]), _run_dir(tmp_path, "cand", [80.0, 81.0, 79.5])
    monkeypatch.chdir(tmp_path)
    assert main([str(base), str(cand)]) == 1
    first = (tmp_path / "compare" / "compare.html").read_text()
    assert main([str(base), str(base)]) == 0  # the default folder holds a compare: kept, the next one used
    err = capsys.readouterr().err
    assert "compare: compare holds an earlier compare (kept); this one goes to compare-2\n" in err
    assert (tmp_path / "compare" / "compare.html").read_text() == first
    assert f"compare: {tmp_path / 'compare-2' / 'compare.html'}\n" in err
    (tmp_path / "out" / "rerun" / "baseline-1").mkdir(parents=True)  # an earlier --rerun's children
    (tmp_path / "out" / "notes.txt").write_text("the user's")
    (tmp_path / "out" / "compare.md").write_text("an earlier compare")
    assert main([str(base), str(cand), "--out", "out"]) == 1  # a folder the user named: replaced, and said
    assert "compare: replacing the earlier compare in out (compare.md, rerun)\n" in capsys.readouterr().err
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        "compare.html",
        "compare.md",
        "compare.png",
        "notes.txt",
    ]
