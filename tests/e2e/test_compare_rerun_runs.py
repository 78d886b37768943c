"""`python -m bench.compare A B --rerun 2` in real processes (issue 28 item 8): its 8 fresh
`python -m bench` children report fit_to_measure, and an unfit pair is "not judged", exit 3, as
without --rerun. The slower branch in real processes is in tests/e2e/test_measure_deeper_runs.py;
every branch with canned figures in tests/unit/test_compare_rerun.py."""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import List

from bench.machine.fitness import affinity, usable_cores


def run_dir(root: Path, name: str, overrides: List[str]) -> Path:
    """A run's directory as --rerun reads it: the overrides it was started with."""
    (root / name / ".hydra").mkdir(parents=True)
    (root / name / ".hydra" / "overrides.yaml").write_text("".join(f"- {o}\n" for o in overrides))
    return root / name


def test_unfit_fresh_processes_make_it_could_not_judge_exit_3_and_the_noise_cant_tell(bench, tiny, datasets, tmp_path):
    """One config against itself, a torch thread per usable core and a loader worker beside them
    (oversubscribed: unfit on any machine, as in test_fit_to_measure.py), at a 0% threshold: "not
    judged", exit 3, naming both sides' unfit runs;
    what was measured is the same config against itself, so its verdict is the noise's: "can't tell
    at this noise" (the floor of two real processes is above 0%) unless the interval clears 1 by
    more than the floor, which the figures printed decide (checked against the rule either way)."""
    threads = max(1, math.floor(usable_cores(affinity())))
    datasets.image_folder(tmp_path / "images", images=8)
    # one measured step and no warmup: each fresh child is its imports and one step (~0.8 CPU-s less a
    # child than tiny's 1 + 3 steps, 8 children); its verdict and fit_to_measure do not depend on the count
    steps = [o for o in tiny if not o.startswith(("train.steps_per_epoch=", "benchmark.warmup_steps="))]
    config = [
        *steps,
        "train.steps_per_epoch=1",
        "benchmark.warmup_steps=0",
        "data=imagefolder",
        f"data.root={tmp_path / 'images'}",
        f"data.num_classes={datasets.CLASSES}",
        f"cpu_threads={threads}",
        "data.num_workers=1",
    ]
    base, cand = run_dir(tmp_path, "base", config), run_dir(tmp_path, "cand", config)
    out = tmp_path / "out"
    proc = bench.run(
        str(base), str(cand), "--rerun", "2", "--threshold", "0%", "--out", str(out), module="bench.compare"
    )
    assert proc.returncode == 3, proc.stdout + proc.stderr
    err = proc.stderr.splitlines()
    (at,) = [n for n, line in enumerate(err) if line.startswith("verdict: ")]
    assert err[at] == (
        "verdict: not judged: the baseline was not fit to measure in 4 of 4 runs, the candidate in 4 of 4 runs"
    ), proc.stderr
    baseline, candidate, measured = err[at + 2 : at + 5]  # after the ratio's definition
    oversubscribed = re.compile(r"torch threads? x 1 rank \+ 1 loader worker = \d+ > [\d.]+ usable cores")
    assert baseline.startswith("  baseline: ") and oversubscribed.search(baseline), proc.stderr
    assert candidate.startswith("  candidate: ") and oversubscribed.search(candidate), proc.stderr
    _ratio, low, high, floor = map(
        float, re.search(r"measured: .*: ([\d.]+)× \[([\d.]+)–([\d.]+)\], .*?([\d.]+)% noise floor", measured).groups()
    )
    floor /= 100
    assert floor > 0, proc.stderr
    cant_tell = measured.startswith("  measured: can't tell at this noise: ") and (
        f"the {100 * floor:.1f}% noise floor is larger than the 0% threshold" in measured
    )
    # the printed figures are rounded (to 0.0005, the floor to 0.05%): within that of the edge, the
    # verdict may fall either way (the unit tests pin the edge itself)
    edge = 0.0005 + 0.0005
    if high < 1 / (1 + floor) - edge:
        assert measured.startswith("  measured: slower: "), measured
    elif low > 1 + floor + edge:
        assert measured.startswith("  measured: faster: "), measured
    elif high >= 1 / (1 + floor) and low <= round(1 + floor, 3):  # as printed, not beyond: 1.158 is not beyond 15.8%
        assert cant_tell, measured
    else:
        assert cant_tell or measured.startswith(("  measured: slower: ", "  measured: faster: ")), measured
    assert "Traceback" not in proc.stderr
    assert {p.name for p in out.iterdir()} == {"compare.md", "compare.html", "compare.png", "rerun"}
    assert "<td>not judged</td>" in (out / "compare.html").read_text()
