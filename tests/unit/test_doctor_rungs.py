"""The doctor's rungs on the shipped presets (issue 34.3), in-process: every training preset's
compute ceiling, full run and what-ifs compose to a valid config (the ceiling of a pass-based
recipe failed on train.steps_per_epoch=null), the ceiling of a pass-based recipe runs and its log
counts its own window, a rung keeps the user's run length when it is named, and a what-if measured
on a busy machine says so on its row. The ladder itself runs for real in tests/e2e/test_doctor.py."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import torch
from test_fitness import preset_scenario  # tests/unit is on the path (no __init__.py)

from bench.doctor.cli import table, what_if_rows
from bench.doctor.figures import FULL, Diagnosis, WhatIf
from bench.doctor.ladder import candidates, reading_shards
from bench.doctor.training import rung_config, synthetic_twin

# the training presets (the doctor refuses the others, mode=storage, before any rung)
PRESETS = sorted(
    p.stem
    for p in (Path(__file__).resolve().parents[2] / "conf" / "experiment").glob("*.yaml")
    if preset_scenario(p) == "train"
)


def test_the_training_presets_are_found():
    assert {"cpu_smoke", "digits_tta", "a100_bf16", "imagenet_fast"} <= set(PRESETS)
    assert not any(p.startswith("storage_") for p in PRESETS)


@pytest.mark.parametrize("preset", PRESETS)
@pytest.mark.slow  # in-process, but 19 presets x every rung composed once: ~33 CPU-s
def test_every_rung_of_every_training_preset_composes_a_valid_config(compose, preset, tmp_path):
    """What the ladder composes for a preset (bench.doctor.training.rung_config, as TrainingRuns.run
    does), the what-ifs as this machine's device gets them; none raises."""
    overrides = [f"+experiment={preset}"]
    config = compose(*overrides)
    rungs = {"compute": synthetic_twin(overrides, config), FULL: overrides}
    for what_if in candidates(config, overrides, 8.0, input_first=True, on_cpu=not torch.cuda.is_available()):
        rungs[what_if.name] = what_if.overrides or reading_shards(overrides, tmp_path)  # data=shards
    checked = {name: rung_config(rung, 1.0) for name, rung in rungs.items()}  # each rung composed once (~0.3 CPU-s)
    for name, config_of_rung in checked.items():
        assert config_of_rung.benchmark.measure_seconds == 1.0 and config_of_rung.train.eval_every == 0, name
    twin = checked["compute"]
    assert twin.data.synthetic and twin.train.steps_per_epoch and twin.model == config.model


def test_the_ceiling_of_a_pass_based_recipe_runs_and_its_log_counts_its_own_window(compose, caplog):
    """digits_tta's epochs are passes over its folder: the synthetic twin has epochs of a fixed
    length, and its progress lines count toward the window's seconds, not 100000 epochs of steps."""
    from bench.train.loop import train

    user = ["+experiment=digits_tta", "data.batch_size=4", "cpu_threads=1"]
    twin = rung_config([*synthetic_twin(user, compose(*user)), "benchmark.log_every=1"], 0.5)
    assert (twin.train.epochs, twin.train.steps_per_epoch, twin.benchmark.warmup_steps) == (100000, 200, 2)
    with caplog.at_level(logging.INFO, logger="bench.train.epochs"):
        result = train(twin, torch.device("cpu"))
    assert result.measured_steps >= 1 and result.images > 0
    steps = [r.getMessage() for r in caplog.records if r.getMessage().startswith("step ")]
    assert steps and all(" of 0.5 s)" in line and "/" not in line.split()[1] for line in steps), steps


def test_the_doctors_rungs_keep_the_users_run_length_when_it_is_named():
    named = rung_config(["+experiment=cpu_smoke", "train.steps_per_epoch=2"], 1e8)
    assert (named.train.epochs, named.train.steps_per_epoch) == (2, 2)  # cpu_smoke's 2 epochs of 2 steps
    assert rung_config(["+experiment=cpu_smoke"], 5).train.epochs == 100000  # the clock ends it


def test_a_what_if_measured_on_a_busy_machine_says_so_on_its_row():
    busy = "other processes used 1.62 of 2 usable cores during the window (limit 0.2)"
    unfit = WhatIf("channels_last", [], FULL, before=20.0, images_per_second=13.0, fit=False, unfit_because=busy)
    fit = WhatIf("precision=bf16", [], FULL, before=20.0, images_per_second=30.0, fit=True)
    rows = what_if_rows([unfit, fit])
    assert rows[0] == ["channels_last", "13", "0.65x (unfit)", f"measured as the full run; not fit to measure: {busy}"]
    assert rows[1] == ["precision=bf16", "30", "1.50x", "measured as the full run"]
    page = table(Diagnosis("compute-bound", "compute-bound: ...", [], [unfit, fit]))  # stdout and doctor.md
    assert "| channels_last | 13 | 0.65x (unfit) | measured as the full run; not fit to measure: other" in page


def test_on_the_cpu_more_loader_workers_take_their_cores_from_the_models_threads(compose):
    """The workers what-if on a CPU keeps threads + workers within the cores (as many workers as
    cores, beside the model's threads, would be unfit by construction); on a GPU: one per core."""
    user = ["+experiment=digits_tta"]
    config = compose(*user, "cpu_threads=3", "data.num_workers=1")
    on_cpu = [w.name for w in candidates(config, user, 4.0, input_first=True, on_cpu=True)]
    assert on_cpu[0] == "data.num_workers=2 cpu_threads=2"
    assert candidates(config, user, 4.0, input_first=True)[0].name == "data.num_workers=4"
    two_cores = compose(*user, "cpu_threads=1", "data.num_workers=1")  # bench's own split of 2 cores
    assert not any("num_workers" in w.name for w in candidates(two_cores, user, 2.0, True, on_cpu=True))


@pytest.mark.slow  # starts processes inside bench (workers, readers, a fork)
def test_a_rung_whose_set_up_runs_far_past_the_budget_is_stopped_and_says_so(tmp_path):
    """Issue 40.2: a rung ran on for minutes in its set-up (ResNet-50 at batch 512, a 90 s budget).
    Its limit here (no set-up allowed past a 0.3 s window) is passed before any training step: the
    run is stopped, its worker with it, and its row says why instead of a rate."""
    import os

    from bench.doctor.figures import COMPUTE
    from bench.doctor.training import TrainingRuns

    runs = TrainingRuns(tmp_path, tmp_path, None, budget_s=12)
    assert runs.setup_s == 60.0  # the budget, at least a minute
    runs.setup_s = 0.0
    rung = runs.run("1-compute", COMPUTE, ["+experiment=cpu_smoke", "tracking.enabled=false"], 0.3)
    assert rung.skipped.startswith("its set-up (building, compiling, warming up the model) ran past 0 s, far past ")
    assert rung.skipped.endswith("doctor.budget_s=12: stopped after 0 s, not measured") and not rung.measured
    assert not (tmp_path / "1-compute" / "run_summary.json").exists()
    for pid_file in (tmp_path / "1-compute").glob("workers/*/rank*.pid"):  # no worker left training
        pid = int(pid_file.read_text().split()[0])
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    # the later training rungs build the same model: not started, and their rows say why
    full = runs.run("4-full", "full", ["+experiment=cpu_smoke", "tracking.enabled=false"], 0.3)
    assert full.skipped == "not run: 1-compute's set-up ran past 0 s and this run builds the same model; not measured"
    assert not (tmp_path / "4-full").exists() and not full.measured


def test_a_set_up_stop_swallowed_in_a_callback_is_raised_again():
    """The rung's stop (SIGALRM -> SetupOverrun) landing inside a __del__ is swallowed by Python ("Exception
    ignored in ..."): the run went on and wrote its results though the rung said it was stopped (seen once
    in the suite). Now the rung's timer fires again and the stop reaches the run."""
    import time

    from bench.doctor.training import stopped_after
    from bench.machine.children import sigterm_raises

    class SlowToCollect:
        def __del__(self):
            time.sleep(1.0)  # the stop lands in here

    finished = False
    with sigterm_raises(), stopped_after(0.1, "stopped") as fired:
        SlowToCollect()  # collected at once: its __del__ swallows the first stop
        time.sleep(30)  # the second one ends this
        finished = True
    assert len(fired) == 2 and not finished


def test_a_set_up_stop_landing_inside_loggings_lock_leaves_it_free_for_the_next_rung():
    """The rung's stop is raised wherever the main thread is: landing between logging's acquire and release of
    its module lock (Manager._clear_cache, which Hydra's job logging calls, has no `finally`) it left the lock
    held, and a later thread that logged, or forked (the lock is taken around every fork), waited for good (a
    CI run hung so in another test, 2026-11-30). Here the stop's handler is called inside that region, as Python
    calls it between two lines; after the rung a thread logs at once."""
    import inspect
    import signal
    import sys
    import threading

    from bench.doctor.training import stopped_after

    clear_cache = logging.Manager._clear_cache.__code__
    source, first = inspect.getsourcelines(logging.Manager._clear_cache)
    inside = first + next(i for i, line in enumerate(source) if "root._cache.clear()" in line)
    landed = []

    def at_line(frame, event, _arg):
        if event == "line" and frame.f_code is clear_cache and frame.f_lineno == inside and not landed:
            landed.append(True)
            signal.getsignal(signal.SIGALRM)(signal.SIGALRM, frame)  # the rung's stop, as Python delivers it
        return at_line

    with stopped_after(600, "stopped") as fired:
        tracer = sys.gettrace()  # put back after, not removed: coverage's or a debugger's
        sys.settrace(lambda frame, _event, _arg: at_line if frame.f_code is clear_cache else None)
        try:
            logging.getLogger("bench.test.rung").setLevel(logging.INFO)  # clears the loggers' level caches
        finally:
            sys.settrace(tracer)
    assert landed and fired
    logger = threading.Thread(target=logging.getLogger, args=("bench.test.after",), daemon=True)
    logger.start()
    logger.join(60)  # a hang guard: it takes microseconds
    assert not logger.is_alive(), "logging's module lock was left held by the stopped rung"


def test_a_set_up_stop_due_inside_an_import_waits_for_it_to_end(tmp_path, monkeypatch):
    """The rung's stop raised inside an import left that import's submodules in sys.modules, unbound to a
    parent made again at the next import: a later rung's (or test's) torch.compile failed with "module
    'sympy' has no attribute 'logic'" (seen in the suite after gpu_check's --budget-s stop). Now a stop
    due while the main thread imports is raised once the import has ended; the module is whole."""
    import signal
    import sys
    import time

    from bench.doctor.training import stopped_after

    package = tmp_path / "rung_import_probe"
    package.mkdir()
    (package / "part.py").write_text("VALUE = 1\n")
    # the stop is delivered half-way through the package's import, as a timer would deliver it
    (package / "__init__.py").write_text(
        "import signal\nfrom . import part\nsignal.raise_signal(signal.SIGALRM)\nWHOLE = True\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in ("rung_import_probe", "rung_import_probe.part"):
        monkeypatch.delitem(sys.modules, name, raising=False)

    imported = False
    with stopped_after(600, "stopped") as fired:
        import rung_import_probe

        imported = True
        assert fired == []  # not raised inside the import
        while not fired:  # the stop, a moment later: it ends this block
            time.sleep(0.01)
    assert imported and fired == [True]
    assert rung_import_probe.WHOLE and rung_import_probe.part.VALUE == 1
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)


def test_a_rungs_own_failure_is_its_rows_reason_and_a_signal_inside_it_ends_the_ladder():
    """bench.doctor.ladder._guarded: a loader that cannot read (OSError), a rung bench refuses (its own
    error's sentence) is that rung's `failed`, and the ladder goes on; a stop a library turned into its
    own error (interruption_in) still ends the ladder with the stop."""
    from bench.doctor.ladder import _guarded
    from bench.errors import ConfigProblem, Interrupted

    def raises(exc: BaseException):
        def measure():
            raise exc

        return measure

    assert (
        _guarded("loader", raises(OSError(5, "Input/output error"))).failed == "OSError: [Errno 5] Input/output error"
    )
    assert _guarded("storage", raises(ConfigProblem("storage.root: no such folder"))).failed == (
        "storage.root: no such folder"
    )

    def stopped_inside_a_library():
        try:
            raise Interrupted("SIGTERM")
        except Interrupted:
            raise RuntimeError("the process group could not form") from None

    with pytest.raises(Interrupted):
        _guarded("allreduce", stopped_inside_a_library)
