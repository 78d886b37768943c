"""bench.compare --rerun's verdict (bench.analysis.verdicts, bench.tools.compare): the
ratio of fresh processes, judged against the noise between them. Here the processes' images/s are
simulated: seeded noise the size this machine shows between processes of one config, or canned
round figures fed through the command in-process (its `python -m bench` children replaced by their
final line); tests/e2e/test_measure_deeper_runs.py and tests/e2e/test_compare_rerun_runs.py run
the real processes."""

from __future__ import annotations

import json
import random
import subprocess
from pathlib import Path
from typing import Callable, Dict, List, Optional

import pytest

import bench.machine.children
from bench.analysis.rounds import Rounds, alternate
from bench.analysis.verdicts import (
    CANT_TELL,
    FASTER,
    SAME,
    SLOWER,
    UNJUDGED,
    judge,
    noise_floor,
    unfit_sides,
    with_fitness,
)
from bench.errors import ReportError
from bench.tools import compare as compare_rerun  # --rerun's code: bench.tools.compare's second half
from bench.tools.compare import MAX_ROUNDS, check_rounds, rerun_overrides
from bench.tools.compare import main as compare


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
    """This machine's spread between processes (5%) is above the 3% threshold: never "slower", and
    never "same" either (issue 28 item 8): the noise cannot resolve 3%."""
    assert [verdict_of(137.7, 137.7, seed) for seed in range(10)] == [CANT_TELL] * 10


def test_the_same_config_on_a_quiet_machine_is_same_every_time_simulated_processes():
    """A spread well inside the threshold (0.3%): the noise floor is below 3%, the verdict "same"."""
    assert [verdict_of(137.7, 137.7, seed, spread=0.003) for seed in range(10)] == [SAME] * 10


def test_a_config_twice_as_slow_is_slower_every_time_simulated_processes():
    assert [verdict_of(137.7, 137.7 / 2, seed) for seed in range(10)] == [SLOWER] * 10
    assert [verdict_of(137.7, 137.7 / 2, seed, spread=0.10) for seed in range(10)] == [SLOWER] * 10
    assert [verdict_of(137.7 / 2, 137.7, seed) for seed in range(10)] == [FASTER] * 10


def test_a_noisier_machine_still_never_calls_the_same_config_slower_simulated_processes():
    """Twice this machine's spread between processes: still no "slower" (nor "same") for an unchanged config."""
    assert [verdict_of(137.7, 137.7, seed, spread=0.10) for seed in range(10)] == [CANT_TELL] * 10


def test_the_noise_floor_is_the_largest_gap_of_a_side_against_itself():
    values = iter([100.0, 90.0, 50.0, 55.0])  # A-B-B-A: candidate 100, baseline 90, baseline 50... per call order
    measured = alternate(
        {"candidate": lambda: next(values), "baseline": lambda: next(values)}, 1, warmup=0, echo=lambda line: None
    )
    # candidate ran 100 then 55, baseline 90 then 50: gaps 100/55 - 1 and 90/50 - 1
    assert noise_floor(measured) == pytest.approx(max(100 / 55, 90 / 50) - 1)


def test_an_interval_that_clears_the_floor_only_past_the_printed_places_is_not_called_beyond_it():
    """CI at 1ee031b: "faster: 1.388× [1.158–1.617], beyond the 0% threshold and the 15.8% noise
    floor": its low end cleared 1 + floor only in the fourth place. The verdict is judged on the
    figures as printed, so the line's own numbers bear it out."""
    floor, low = 0.15796, 1.15804  # 1.158 and 15.8% as printed
    first = 2 * 100 * low / (2 + floor)  # round 1: the candidate's two runs `floor` apart, their mean `low`
    measured = Rounds(
        ["candidate", "baseline"],
        {"candidate": [first, first * (1 + floor), 130.0, 130.0], "baseline": [100.0] * 4},
        {"candidate": [first * (2 + floor) / 2, 130.0], "baseline": [100.0, 100.0]},
    )
    result = judge(measured, 0.0)
    assert result.low == pytest.approx(low) and result.noise_floor == pytest.approx(floor)
    assert result.headline.startswith("can't tell at this noise: 1.229× [1.158–1.300], the 15.8% noise floor"), result
    cleared = Rounds(measured.names, measured.figures, {**measured.per_round, "candidate": [116.0, 130.0]})
    assert judge(cleared, 0.0).headline.startswith("faster: 1.230× [1.160–1.300], beyond the 0% threshold")


def test_rerun_takes_run_directories_and_leaves_hydra_keys_out(tmp_path: Path):
    run = tmp_path / "run"
    (run / ".hydra").mkdir(parents=True)
    (run / ".hydra" / "overrides.yaml").write_text("- +experiment=cpu_smoke\n- hydra.run.dir=/x\n- cpu_threads=1\n")
    assert rerun_overrides(str(run), "baseline") == ["+experiment=cpu_smoke", "cpu_threads=1"]
    with pytest.raises(ReportError, match=r"--rerun needs run directories: candidate 0123abc has no"):
        rerun_overrides("0123abc", "candidate")


@pytest.mark.slow  # starts processes inside bench (workers, readers, a fork)
def test_rerun_measures_each_scenarios_own_figure(tmp_path: Path):
    """Issue 39 probe W5: `bench.compare A B --rerun 2` of two echo runs ended in a KeyError traceback
    (images_per_second). The figure is the scenario's compare sample; a latency sample reruns images/s."""
    for mode, want in [
        ("echo", ("steps_per_second", "steps/s")),
        ("storage", ("samples_per_second", "samples/s")),
        ("inference", ("images_per_second", "images/s")),
        (None, ("images_per_second", "images/s")),  # a training run recorded before `mode` existed
    ]:
        (tmp_path / "run_summary.json").write_text(json.dumps({"results": {"mode": mode}}))
        assert compare_rerun.rerun_figure(str(tmp_path)) == want, mode
    echo = ["scenario=echo", "scenario.steps=3", "scenario.step_s=0.001"]
    rate, _ = compare_rerun.run_once(echo, tmp_path / "echo", "baseline", "steps_per_second")  # a real process
    assert rate > 0


def test_an_unfit_side_is_not_judged_unless_asked_simulated_processes():
    values = iter([50.0, 100.0, 101.0, 51.0, 49.0, 99.0, 100.0, 50.0])
    measured = alternate(
        {"candidate": lambda: next(values), "baseline": lambda: next(values)}, 2, warmup=0, echo=lambda line: None
    )
    slower = judge(measured, 0.03)
    assert slower.verdict == SLOWER
    unfit = {"candidate": ["swap-in 12 MB"], "baseline": []}
    judged = with_fitness(slower, unfit_sides(unfit, {"candidate": 4, "baseline": 4}))
    assert judged.verdict == UNJUDGED
    assert judged.headline == "not judged: the candidate was not fit to measure in 1 of 4 runs"
    assert judged.reasons == ["candidate: swap-in 12 MB", f"measured: {slower.headline}"]
    assert slower.headline.startswith("slower: 0.500× [")
    anyway = with_fitness(slower, unfit_sides(unfit, {"candidate": 4, "baseline": 4}), judge_unfit=True)
    assert anyway.verdict == SLOWER and anyway.headline == slower.headline
    assert anyway.reasons == ["judged although the candidate was not fit to measure in 1 of 4 runs: swap-in 12 MB"]


# ---- the command, in-process, its children's final lines canned ----------------------------------


def run_dir(root: Path, name: str, overrides: List[str]) -> Path:
    (root / name / ".hydra").mkdir(parents=True)
    (root / name / ".hydra" / "overrides.yaml").write_text("".join(f"- {o}\n" for o in overrides))
    return root / name


class CannedChildren:
    """Stands in for bench.machine.children.run_child: each `python -m bench` child's final line and
    run_summary.json (what bench.api.run_child reads back), its images/s the next of its side's canned
    figures (in the order the side runs)."""

    def __init__(self, figures: Dict[str, List[float]], unfit: Optional[Dict[str, str]] = None):
        self.figures = {side: iter(values) for side, values in figures.items()}
        self.unfit = unfit or {}
        self.calls: List[List[str]] = []

    def __call__(self, argv: List[str], timeout: float, **_popen: object) -> subprocess.CompletedProcess:
        self.calls.append(argv)
        run = Path(next(a for a in argv if a.startswith("hydra.run.dir=")).split("=", 1)[1]).name  # candidate-3
        side, _number = run.rsplit("-", 1)
        metrics: Dict[str, object] = {
            "images_per_second": next(self.figures[side]),
            "fit_to_measure": True,
            "fit_reasons": "",
            **dict.fromkeys(("batch_size", "warmup_steps", "measured_steps", "peak_memory_mb", "parameters"), 1),
        }
        if self.unfit.get(run):
            metrics.update(fit_to_measure=False, fit_reasons=self.unfit[run])
        summary = {"results": metrics, "epochs": []}
        (Path(argv[-1].split("=", 1)[1]) / "run_summary.json").write_text(json.dumps(summary))
        return subprocess.CompletedProcess(argv, 0, json.dumps({"radix_metrics": metrics}) + "\n", "")


@pytest.fixture
def sides(tmp_path: Path):
    base = run_dir(tmp_path, "base", ["+experiment=cpu_smoke", "data.image_size=32"])
    cand = run_dir(tmp_path, "cand", ["+experiment=cpu_smoke", "data.image_size=160"])
    return base, cand, tmp_path / "out"


def command(monkeypatch, capsys, sides, children: CannedChildren, *extra: str):
    monkeypatch.setattr(bench.machine.children, "run_child", children)  # under bench.api.run_child
    base, cand, out = sides
    code = compare([str(base), str(cand), "--rerun", "2", "--out", str(out), *extra])
    printed = capsys.readouterr()
    return code, printed.out, printed.err


# each side's figures in the order it runs: baseline-1, -2 (round 1), -3, -4 (round 2)
QUIET_BASE = [100.0, 100.5, 99.8, 100.2]


@pytest.mark.parametrize(
    ("candidate", "exit_code", "said"),
    [
        (
            [50.0, 50.4, 49.9, 50.1],
            1,
            "verdict: slower: 0.500× [0.500–0.501], beyond the 3% threshold and the 0.8% noise floor\n",
        ),
        (
            [200.0, 200.4, 199.9, 201.0],
            0,
            "verdict: faster: 2.001× [1.997–2.004], beyond the 3% threshold and the 0.6% noise floor\n",
        ),
        (
            [100.2, 100.1, 99.9, 100.3],
            0,
            "verdict: same: 1.000× [0.999–1.001], within the 3% threshold, at a 0.5% noise floor\n",
        ),
    ],
    ids=["slower", "faster", "same"],
)
@pytest.mark.slow  # in-process, but the page and its chart rendered: 4-5 s each
def test_rerun_verdicts_exit_codes_and_page_canned_rounds(monkeypatch, capsys, sides, candidate, exit_code, said):
    children = CannedChildren({"candidate": candidate, "baseline": QUIET_BASE})
    code, out, err = command(monkeypatch, capsys, sides, children)
    assert code == exit_code and said in err, err
    assert len(children.calls) == 8 and all(
        argv[1:3] == ["-m", "bench"] and "tracking.enabled=false" in argv for argv in children.calls
    )
    lines = out.splitlines()  # what will run first, then a line per round, then the table
    assert lines[0].startswith(
        "rerun: 2 rounds of A-B-B-A (A the baseline, B the candidate), 8 fresh python -m bench processes"
    )
    assert [line.split(":")[0] for line in lines[1:3]] == ["round 1", "round 2"]
    assert lines[1].startswith("round 1: baseline 100.0, 100.5 | candidate ")  # A first: the baseline
    assert children.calls[0][-1].endswith("/rerun/baseline-1")
    assert lines[3].split() == [
        "configuration",
        "baseline",
        "images/s",
        "candidate",
        "images/s",
        "ratio",
        "95%",
        "interval",
        "verdict",
    ]  # the unit is the runs' own (their scenario's view)
    # the plain table: the paired ratio, then the rounds it is the median of
    assert lines[4].startswith("data.image_size=32 vs data.image_size=160 ") and len(lines) == 7  # whole
    assert [line.split()[:1] for line in lines[5:]] == [["round"], ["round"]]
    page = sides[2] / "compare.html"
    assert {p.name for p in sides[2].iterdir()} >= {"compare.md", "compare.html", "compare.png", "rerun"}
    text = page.read_text()
    assert "data:image/png;base64," in text and "2 rounds of fresh processes" in text
    assert "data.image_size=32 vs data.image_size=160" in text  # the pair's label: what the candidate changed
    assert f"compare: {page.resolve()}" in err


@pytest.mark.slow  # in-process, but the page rendered: ~5 s
def test_a_noise_floor_above_the_threshold_is_cant_tell_exit_3_canned_rounds(monkeypatch, capsys, sides):
    """Issue 28 item 8, the busy box: ratio about 0.45, noise floor above 200%: "can't tell at this
    noise", exit 3 (as an unfit machine), never "same"."""
    children = CannedChildren({"candidate": [45.0, 20.0, 60.0, 50.0], "baseline": [100.0, 30.0, 110.0, 95.0]})
    code, out, err = command(monkeypatch, capsys, sides, children)
    assert code == 3, err
    assert (
        "verdict: can't tell at this noise: 0.518× [0.500–0.537], the 233.3% noise floor is larger than the 3% "
        "threshold\n  ratio: candidate / baseline, paired: the median of the ratios of 2 rounds of fresh processes\n"
        "  the interval does not clear 1 by more than the noise floor\n"
    ) in err, err
    assert "same" not in err and "noise floor" not in out  # the table's figures on stdout, the verdict on stderr
    assert (
        " 2 rounds of fresh processes | can't tell at this noise | the 233.3% noise floor is larger"
        in (sides[2] / "compare.md").read_text()
    )
    assert "<td>can&#x27;t tell at this noise</td>" in (sides[2] / "compare.html").read_text()


@pytest.mark.slow  # in-process, but the page rendered: ~6 s
def test_a_slowdown_within_the_noise_floor_is_cant_tell_not_slower_canned_rounds(monkeypatch, capsys, sides):
    """The interval excludes 1, but not by more than the noise floor (20%): not "slower"."""
    children = CannedChildren({"candidate": [90.0, 75.0, 88.0, 74.0], "baseline": [100.0, 98.0, 99.0, 101.0]})
    code, _, err = command(monkeypatch, capsys, sides, children, "--threshold", "5%")
    assert code == 3 and "verdict: can't tell at this noise: 0.822× [0.810–0.833], the 20.0% noise floor is" in err, err


@pytest.mark.slow  # in-process, but the page rendered: ~7 s
def test_an_unfit_process_makes_it_could_not_judge_exit_3_canned_rounds(monkeypatch, capsys, sides):
    """The runs' fit_to_measure count with --rerun as without it: a clear slowdown, but one candidate
    process was not fit to measure: "not judged", exit 3; --judge-unfit gives the verdict (exit 1)."""
    figures = {"candidate": [50.0, 50.4, 49.9, 50.1], "baseline": QUIET_BASE}
    reason = {"candidate-2": "other processes used 1.50 of 2 usable cores during the window (limit 0.2)"}
    code, _, err = command(monkeypatch, capsys, sides, CannedChildren(figures, reason))
    assert code == 3, err
    assert err.splitlines()[1:] == [
        "verdict: not judged: the candidate was not fit to measure in 1 of 4 runs",
        "  ratio: candidate / baseline, paired: the median of the ratios of 2 rounds of fresh processes",
        "  candidate: other processes used 1.50 of 2 usable cores during the window (limit 0.2)",
        "  measured: slower: 0.500× [0.500–0.501], beyond the 3% threshold and the 0.8% noise floor",
        "  run it again on a quiet machine, or pass --judge-unfit for a verdict anyway",
    ], err
    code, _, err = command(monkeypatch, capsys, sides, CannedChildren(figures, reason), "--judge-unfit")
    assert code == 1 and "verdict: slower: 0.500×" in err and "  judged although the candidate was not fit" in err


@pytest.mark.parametrize("rounds", ["1000", "21", "1", "0", "-3"])
def test_rerun_rounds_are_capped_in_one_line_before_any_work(monkeypatch, capsys, sides, rounds):
    """Issue 28 item 4: `--rerun 1000` was 4,000 fresh processes. One [ERROR] line, exit 2, no child."""
    children = CannedChildren({"candidate": [], "baseline": []})
    monkeypatch.setattr(bench.machine.children, "run_child", children)  # under bench.api.run_child
    base, cand, out = sides
    assert compare([str(base), str(cand), "--rerun", rounds, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert (
        err == f"[ERROR] --rerun={rounds} is not valid: accepted 2 to {MAX_ROUNDS} rounds (one round has no "
        "spread; each round runs 4 fresh processes)\n"
    )
    assert children.calls == [] and not out.exists()
    check_rounds(MAX_ROUNDS)  # the cap itself is accepted


@pytest.mark.slow  # in-process, but the page rendered: ~4 s
def test_the_same_run_on_both_sides_is_said_and_measures_the_noise_canned_rounds(monkeypatch, capsys, sides):
    """Issue 33 §5: `compare D D --rerun` said nothing of both sides being one run; it runs the config
    against itself (the noise between processes, a real use) and says so, on the terminal and the page."""
    base, _, out = sides
    children = CannedChildren({"candidate": [100.1, 99.9, 100.3, 100.0], "baseline": QUIET_BASE})
    monkeypatch.setattr(bench.machine.children, "run_child", children)  # under bench.api.run_child
    assert compare([str(base), str(base), "--rerun", "2", "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert err.splitlines()[0] == (
        f"compare: the same run on both sides ({base}): its config runs against itself, so the verdict measures "
        "this machine's noise between processes"
    )
    assert (
        "\n  the same run on both sides\n" in err and "the same run on both sides" in (out / "compare.md").read_text()
    )
