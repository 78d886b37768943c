"""Fit to measure (issue 20, part 1), for real: a CPU hog started beside a run flips the run's
verdict, with the reason and its figure, in the final line and the MLflow run; more torch threads
than usable cores are named; benchmark.require_fit=true refuses such a config in one line, and
waits, bounded, for a quiet machine before refusing a busy one. The GPU's checks are unit-tested
against a mocked NVML (tests/unit/test_fitness.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator, List

import pytest

from bench.runtime.fitness import affinity, usable_cores

HOG = "while True: pass"


def cpu_ticks(pid: int) -> int:
    """utime + stime of a process, in clock ticks (/proc/<pid>/stat fields 14 and 15)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


@pytest.fixture
def hogs() -> Iterator[List[subprocess.Popen]]:
    """One busy-looping process per usable core, each seen burning CPU before the test goes on."""
    started = [subprocess.Popen([sys.executable, "-c", HOG]) for _ in range(max(1, int(usable_cores(affinity()))))]
    try:
        for proc in started:  # the event: the kernel has charged the hog CPU time (hang guard only)
            deadline = time.monotonic() + 120
            while cpu_ticks(proc.pid) == 0 and time.monotonic() < deadline:
                time.sleep(0.05)
        yield started
    finally:
        for proc in started:
            proc.kill()
            proc.wait()


def oversubscribed(datasets, root: Path) -> List[str]:
    """A torch thread per usable core and a loader worker beside them: one too many."""
    datasets.image_folder(root, images=24)
    return ["data=imagefolder", f"data.root={root}", f"data.num_classes={datasets.CLASSES}",
            f"cpu_threads={len(affinity())}", "data.num_workers=1"]


def test_a_cpu_hog_beside_a_run_makes_it_unfit_and_oversubscribed_threads_are_named(bench, tiny, datasets, tmp_path,
                                                                                     hogs):
    threads = len(affinity())
    proc = bench.run(*tiny, *oversubscribed(datasets, tmp_path / "images"), "train.steps_per_epoch=6")
    result = bench.metrics(proc)
    assert result["fit_to_measure"] is False
    reasons = result["fit_reasons"]
    assert f"x 1 rank + 1 loader worker = {threads + 1} > " in reasons, reasons
    assert "other processes used " in reasons and " usable cores during the window" in reasons, reasons
    assert result["fit_other_cpu_cores"] > 0.5  # a hog per core: well over half a core used outside the run
    (run,) = bench.runs()
    assert run.data.tags["bench.fit_to_measure"] == "false"
    assert run.data.tags["bench.fit_reasons"] == reasons


def test_require_fit_refuses_an_oversubscribed_config_before_any_run(bench, tiny, datasets, tmp_path):
    threads = len(affinity())
    proc = bench.run(*tiny, *oversubscribed(datasets, tmp_path / "images"), "benchmark.require_fit=true")
    assert proc.returncode == 2, proc.stderr
    line = bench.single_error(proc)
    assert "benchmark.require_fit=true and " in line and f"x 1 rank + 1 loader worker = {threads + 1} > " in line, line
    assert "lower cpu_threads" in line
    assert bench.runs() == []  # refused before MLflow heard of it


def test_require_fit_waits_for_a_quiet_machine_and_refuses_a_busy_one(bench, tiny, hogs):
    proc = bench.run(*tiny, "cpu_threads=1", "benchmark.require_fit=true", "benchmark.require_fit_wait_s=3")
    assert proc.returncode == 2, proc.stderr
    line = bench.single_error(proc)
    assert "benchmark.require_fit=true and the machine was not fit to measure after " \
           "benchmark.require_fit_wait_s=3: other processes used " in line, line
    assert bench.runs() == []
    assert os.path.exists(bench.cwd)  # nothing of the test's directory touched
