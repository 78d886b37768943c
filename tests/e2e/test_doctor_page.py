"""The doctor's page (issue 30, items 2 and 3), built in this process from canned rungs (the ladder
itself runs for real in test_doctor.py) and opened in headless Chromium after it was moved away
from the folder it was written in: the verdict one sentence (a failed rung named with its error's
last line, a busy machine said first), rung cells with a short reason and the traceback folded
away, the budget line honest about the wall time, and the chart embedded (it loads with no file
beside the page)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from bench.doctor import cli as doctor_page  # the page's code: bench.doctor.cli's second half
from bench.doctor.figures import ALLREDUCE, COMPUTE, FULL, LOADER, STORAGE, Diagnosis, LoaderFigures, Rung, WhatIf
from bench.doctor.verdict import diagnose

TRACEBACK = """Traceback (most recent call last):
  File "/work/main/bench/app.py", line 110, in run
    report = scenario.report(launcher.run(scenario, config, out_dir), config)
  File "/work/main/bench/train/loop.py", line 88, in step
    loss = criterion(model(images), labels)
RuntimeError: mat1 and mat2 shapes cannot be multiplied (64x512 and 256x10)
"""
REASON = "RuntimeError: mat1 and mat2 shapes cannot be multiplied (64x512 and 256x10)"
LOADER_FIGURES = LoaderFigures(2.5, 10, 0, None, stage_cpu_ms={"read": 0.1, "decode": 2.0})
BUSY = "other processes used 1.41 of 2 usable cores during the window (limit 0.2)"


def _diagnosis(rungs, cores=2.0, **kw) -> Diagnosis:
    verdict, sentence = diagnose(rungs, cores)
    return Diagnosis(verdict, sentence, rungs, overrides=["model=small_cnn"], **kw)


def _moved(diagnosis: Diagnosis, tmp_path: Path) -> Path:
    """doctor.html written, then moved alone to another folder (the written folder removed)."""
    written = tmp_path / "written"
    doctor_page.write(diagnosis, written)
    moved = tmp_path / "elsewhere" / "page.html"
    moved.parent.mkdir()
    shutil.move(written / "doctor.html", moved)
    shutil.rmtree(written)
    return moved


def _seen(browser, path: Path, tmp_path: Path) -> dict:
    from selenium.webdriver.common.by import By

    page = browser.open(path)
    driver = browser.driver
    verdict = driver.find_element(By.ID, "verdict")
    shot = tmp_path / "screenshot.png"
    assert driver.save_screenshot(str(shot)) and shot.stat().st_size > 1000
    return {
        "page": page,
        "verdict": verdict.text if verdict.is_displayed() else "",
        "budget": driver.find_element(By.ID, "budget").text,
        "visible": driver.find_element(By.TAG_NAME, "body").text,
        "folded": driver.execute_script("return [...document.querySelectorAll('details pre')].map(p => p.textContent)"),
    }


def test_a_failed_rung_is_one_sentence_and_the_page_moves_whole(browser, tmp_path):
    """Before: the verdict 'unknown: the full training run gave no figure (Traceback (most recent call
    last): File ...app.py, line 110 ...)', the traceback in both rung cells, and doctor.png referenced
    as a file (ERR_FILE_NOT_FOUND once the page moved)."""
    rungs = [
        Rung(COMPUTE, failed=TRACEBACK),
        Rung(LOADER, 812.0, seconds=3.0, figures=LOADER_FIGURES),
        Rung(STORAGE, skipped="synthetic data: nothing is read from storage"),
        Rung(FULL, failed=TRACEBACK),
        Rung(ALLREDUCE, skipped="one process: DDP has nothing to all-reduce"),
    ]
    seen = _seen(browser, _moved(_diagnosis(rungs, budget_s=30.0, elapsed_s=12.0), tmp_path), tmp_path)
    page = seen["page"]
    assert seen["verdict"] == f"unknown: the full training run failed (as did the compute ceiling): {REASON}"
    assert page.console_errors == []
    assert len(page.images) == 1 and all(loaded and width > 100 for loaded, width, _ in page.images), page.images
    assert f"failed: {REASON}" in page.cells[3]  # the compute ceiling's row: rung, img/s, of ceiling, figures
    assert sum(cell.startswith(f"failed: {REASON}") for cell in page.cells) == 2
    assert "Traceback" not in seen["visible"] and "line 110" not in seen["visible"]
    assert seen["folded"] == [TRACEBACK.strip(), TRACEBACK.strip()]  # there, folded under the reason
    assert seen["budget"] == "12 s wall time of a 30 s budget"


def test_a_busy_machine_is_said_first_with_the_wall_time_over_budget(browser, tmp_path):
    """Before: 'compute-bound: the full run gives 3 img/s, 159% of the compute ceiling (2 img/s)' and
    '107 s of a 30 s budget' for 163 s of wall time."""
    rungs = [
        Rung(COMPUTE, 2.0, seconds=40.0, fit=False, unfit_because=BUSY),
        Rung(LOADER, skipped="synthetic data: no input pipeline"),
        Rung(STORAGE, skipped="synthetic data: nothing is read from storage"),
        Rung(FULL, 3.18, seconds=58.0, fit=False, unfit_because=BUSY),
        Rung(ALLREDUCE, skipped="one process: DDP has nothing to all-reduce"),
    ]
    what_if = WhatIf("channels_last", [], FULL, 3.18, 3.3)
    diagnosis = _diagnosis(rungs, what_ifs=[what_if], budget_s=30.0, elapsed_s=163.0, setup_s=21.0)
    seen = _seen(browser, _moved(diagnosis, tmp_path), tmp_path)
    assert seen["verdict"].startswith(
        f"not fit to measure: the machine was busy during the compute ceiling ({BUSY}), so no bound is called"
    )
    assert "compute-bound" not in seen["visible"]
    assert seen["budget"].startswith("163 s wall time of a 30 s budget: over by 133 s")
    assert "the rungs 98 s (full run 58 s, compute ceiling 40 s)" in seen["budget"]
    assert seen["page"].images[0][1] > 100 and seen["page"].console_errors == []


def test_the_charts_title_is_the_whole_verdict_wrapped():
    """Before: the title cut at 110 characters ('... the data is synth')."""
    sentence = diagnose([Rung(COMPUTE, 1000.0), Rung(FULL, 980.0)], 2)[1]
    assert len(sentence) > doctor_page.TITLE_CHARS
    title = doctor_page.chart_title(sentence)
    assert title.replace("\n", " ") == sentence and all(
        len(line) <= doctor_page.TITLE_CHARS for line in title.splitlines()
    )


@pytest.mark.slow  # in-process, but renders a chart: ~2.5 CPU-s
def test_a_chart_of_bars_far_apart_has_a_log_axis_labelled_so(tmp_path):
    """Issue 40 §10: storage's 11,997 img/s on the linear axis of 81-120 img/s bars drew them as slivers.
    Bars 20x apart or more get a log axis, its label saying so; bars close together keep a linear one."""
    rungs = [Rung(COMPUTE, 120.0), Rung(LOADER, 81.0), Rung(STORAGE, 11997.0), Rung(FULL, 80.0)]
    axes = doctor_page.bar_chart(_diagnosis(rungs), tmp_path / "far.png")
    assert axes.get_xscale() == "log" and axes.get_xlabel() == "images/s (log scale: the bars span 80 to 11,997)"
    assert sorted(bar.get_width() for bar in axes.patches) == [80.0, 81.0, 120.0, 11997.0]
    axes = doctor_page.bar_chart(_diagnosis([Rung(COMPUTE, 120.0), Rung(FULL, 81.0)]), tmp_path / "near.png")
    assert axes.get_xscale() == "linear" and axes.get_xlabel() == "images/s"


def test_the_doctors_runs_are_named_by_what_they_are_and_two_parents_in_one_second_apart(tmp_path):
    """Issue 40 §10: what-if runs read `small_cnn-fp32-bs64-jobwhat-if-1`; two doctors started in the same
    second made two MLflow parents of one name. A run's name says what it is; a parent's is as distinct
    as its directory (reserved, as two doctors in one second get: <time> and <time>-2)."""
    from bench.doctor.cli import parent_name
    from bench.doctor.training import job_label
    from bench.run_dirs import reserve

    assert job_label("1-compute", COMPUTE) == "doctor 1-compute"
    assert job_label("what-if-1", "data.num_workers=2") == "doctor what-if-1: data.num_workers=2"
    now = __import__("time").time()  # both in one second: doctor/<date>/<time> and <time>-2
    first, second = (reserve(tmp_path / "doctor", now).path for _ in range(2))
    assert parent_name(first).startswith("doctor-20") and parent_name(second) == parent_name(first) + "-2"
    assert parent_name(tmp_path / "mine").endswith("-mine")  # doctor.out=DIR: its name in the parent's
