"""The doctor's verdict from the ladder's figures (bench.doctor.verdict), its keys, and how a
what-if changes the user's overrides. The ladder itself runs for real in tests/e2e/test_doctor.py."""

from __future__ import annotations

from dataclasses import fields

import pytest

from bench.doctor.cli import budget_of, split_keys
from bench.doctor.figures import (
    ALLREDUCE,
    COMPUTE,
    FULL,
    LOADER,
    STORAGE,
    AllreduceFigures,
    Diagnosis,
    LoaderFigures,
    Rung,
    StorageFigures,
    WhatIf,
)
from bench.doctor.training import replace
from bench.doctor.verdict import budget_line, diagnose, figures_verdict, short_reason, top_stage
from bench.errors import ConfigError

STAGES = {"read": 0.02, "decode": 0.54, "augment": 0.03, "collate": 0.0, "host_to_device": 0.01}


def ladder(compute=1000.0, loader=None, storage=None, full=950.0, wait=0.0, workers=2, allreduce=None, fit=True):
    rungs = [Rung(COMPUTE, compute, fit=fit, unfit_because="" if fit else "a CPU hog")]
    rungs.append(
        Rung(LOADER, loader, figures=LoaderFigures(1.0, 10, workers, None, stage_cpu_ms=STAGES))
        if loader
        else Rung(LOADER, skipped="synthetic")
    )
    rungs.append(
        Rung(STORAGE, storage, figures=StorageFigures(cache="cold", megabytes_per_second=12.5))
        if storage
        else Rung(STORAGE, skipped="synthetic")
    )
    rungs.append(Rung(FULL, full, data_wait=wait, fit=True))
    rungs.append(Rung(ALLREDUCE, figures=allreduce) if allreduce else Rung(ALLREDUCE, skipped="one process"))
    return rungs


def test_a_loader_slower_than_the_model_is_input_bound_with_the_costliest_stage_named():
    verdict, sentence = diagnose(ladder(compute=1900, loader=410, storage=5000, full=400, wait=0.7), cores=8)
    assert verdict == "input-bound"
    assert sentence == (
        "input-bound: the loader gives 410 img/s, the model could take 1,900; decode is 90% of the loader's CPU time"
    )


def test_a_run_waiting_for_a_loader_that_runs_between_its_steps_is_input_bound():
    """num_workers=0: the loader alone is faster than the model, but the two add up."""
    verdict, sentence = diagnose(ladder(compute=2800, loader=7000, storage=12000, full=1460, wait=0.31, workers=0), 2)
    assert verdict == "input-bound"
    assert (
        "waits for data 31% of its time: with data.num_workers=0 the loader runs between the model's steps" in sentence
    )
    assert "decode is 90%" in sentence


def test_storage_slower_than_the_loader_and_the_model_is_storage_bound():
    verdict, sentence = diagnose(ladder(compute=1900, loader=1500, storage=300, full=290, wait=0.8), 8)
    assert verdict == "storage-bound"
    assert sentence.startswith(
        "storage-bound: the files under data.root read at 12 MB/s (cold cache), enough for 300 img/s"
    )


def test_synthetic_data_at_the_ceiling_is_compute_bound():
    verdict, sentence = diagnose(ladder(compute=1000, full=980), 2)
    assert verdict == "compute-bound"
    assert sentence == (
        "compute-bound: the full run gives 980 img/s, 98% of the compute ceiling (1,000 img/s); "
        "the data is synthetic (no input pipeline)"
    )


def test_a_fast_enough_loader_at_the_ceiling_is_compute_bound():
    verdict, _ = diagnose(ladder(compute=1000, loader=5000, storage=9000, full=900, wait=0.02), 8)
    assert verdict == "compute-bound"


def test_parts_each_faster_than_the_whole_are_contended():
    verdict, sentence = diagnose(ladder(compute=1000, loader=1100, storage=9000, full=500, wait=0.1), 2)
    assert verdict == "contended"
    assert "the full run gives 500 img/s though the compute alone 1,000, the loader alone 1,100" in sentence


def test_an_all_reduce_taking_most_of_a_step_is_communication_bound():
    comm = AllreduceFigures(
        60.0, 40.0, 2, "gloo", bus_gigabytes_per_second=1.5, step_ms=100.0, share_of_step=0.6, nodes_measured=None
    )
    verdict, sentence = diagnose(ladder(compute=1000, full=990, allreduce=comm), 8)
    assert verdict == "communication-bound"
    assert "takes 60.0 ms, 60% of the 100.0 ms step (1.50 GB/s bus bandwidth)" in sentence


TRACEBACK = """Traceback (most recent call last):
  File "/work/main/bench/app.py", line 110, in run
    report = scenario.report(launcher.run(scenario, config, out_dir), config)
  File "/work/main/bench/train/loop.py", line 88, in step
    loss = criterion(model(images), labels)
RuntimeError: mat1 and mat2 shapes cannot be multiplied (64x512 and 256x10)
"""


def test_no_full_run_is_no_verdict_and_says_why():
    rungs = ladder()
    rungs[3] = Rung(FULL, failed="the run exited 1; see /tmp/doctor/4-full")
    assert diagnose(rungs, 2) == (
        "unknown",
        "unknown: the full training run failed: the run exited 1; see /tmp/doctor/4-full",
    )


def test_a_failed_run_is_one_sentence_naming_the_rung_and_the_errors_last_line():
    """Issue 30.2: before, 'unknown: the full training run gave no figure (Traceback (most recent call
    last): File ...app.py, line 110 ...)'."""
    rungs = ladder()
    rungs[0] = Rung(COMPUTE, failed=TRACEBACK)
    rungs[3] = Rung(FULL, failed=TRACEBACK)
    verdict, sentence = diagnose(rungs, 2)
    assert verdict == "unknown"
    assert sentence == (
        "unknown: the full training run failed (as did the compute ceiling): "
        "RuntimeError: mat1 and mat2 shapes cannot be multiplied (64x512 and 256x10)"
    )
    assert "\n" not in sentence and "Traceback" not in sentence
    rungs[0] = Rung(COMPUTE, failed="WorkerFailure: worker rank 0 (pid 14054) exited with code 1: RuntimeError: small")
    rungs[3] = Rung(FULL, failed="WorkerFailure: worker rank 0 (pid 14117) exited with code 1: RuntimeError: small")
    assert diagnose(rungs, 2)[1] == (
        "unknown: the full training run failed (as did the compute ceiling): "
        "WorkerFailure: worker rank 0 (pid 14117) exited with code 1: RuntimeError: small"
    )


def test_a_short_reason_is_a_tracebacks_exception_line_or_the_last_line():
    assert short_reason(TRACEBACK) == "RuntimeError: mat1 and mat2 shapes cannot be multiplied (64x512 and 256x10)"
    chained = (
        TRACEBACK
        + "\nDuring handling of the above exception, another exception occurred:\n\n"
        + TRACEBACK.replace("RuntimeError: mat1", "ValueError: mat1")
    )
    assert short_reason(chained).startswith("ValueError: mat1")
    assert short_reason("data.root='/x' is not valid\naccepted: a folder") == "accepted: a folder"
    assert short_reason("one line") == "one line" and short_reason("") == ""
    assert len(short_reason("x" * 500)) == 200


def test_a_rung_measured_on_a_busy_machine_says_so_first_and_calls_no_bound():
    """Issue 30.3: a busy machine is named before any figure and no bound is called."""
    verdict, sentence = diagnose(ladder(compute=1000, full=980, fit=False), 2)
    assert verdict == "unfit"
    assert sentence.startswith(
        "not fit to measure: the machine was busy during the compute ceiling (a CPU hog), "
        "so no bound is called from these figures (img/s: compute ceiling 1,000, full run 980)"
    )
    assert "-bound" not in sentence
    assert figures_verdict(ladder(compute=1000, full=980, fit=False), 2)[0] == "compute-bound"


def test_a_full_run_above_the_ceiling_is_inconsistent_not_compute_bound():
    """Issue 30.3: before, 'compute-bound: the full run gives 3 img/s, 159% of the compute ceiling (2 img/s)'."""
    verdict, sentence = diagnose(ladder(compute=2.0, full=3.18), 2)
    assert verdict == "inconsistent"
    assert sentence.startswith(
        "inconsistent: the full run gives 3 img/s, 59% above the compute ceiling (2 img/s) "
        "it cannot exceed: the figures are noise"
    )
    assert diagnose(ladder(compute=1000, full=1150), 2)[0] == "compute-bound"  # within the noise


def diagnosis(elapsed, setup=0.0, rung_seconds=(), what_ifs=()):
    rungs = [Rung(name, 1.0, seconds=seconds) for name, seconds in rung_seconds]
    return Diagnosis("compute-bound", "s", rungs, list(what_ifs), budget_s=30.0, elapsed_s=elapsed, setup_s=setup)


def test_the_budget_line_says_the_wall_time_and_where_it_went_when_over():
    """Issue 30.3: before, '107 s of a 30 s budget' for a 163 s wall."""
    assert budget_line(diagnosis(29.0, 3.0, [(COMPUTE, 8.0), (FULL, 9.0)])) == "29 s wall time of a 30 s budget"
    over = budget_line(
        diagnosis(
            163.0, 21.0, [(COMPUTE, 40.0), (LOADER, 9.0), (FULL, 58.0)], [WhatIf("channels_last", [], FULL, 1.0, 2.0)]
        )
    )
    assert over.startswith(
        "163 s wall time of a 30 s budget: over by 133 s, as the budget sets each rung's "
        "measuring window but not the set-up around it"
    )
    assert over.endswith(
        "start-up before the first rung 21 s; the rungs 107 s (full run 58 s, compute ceiling 40 s); "
        "1 what-if run 35 s (the first runs whatever is left)"
    )
    paged = diagnosis(163.0, 21.0, [(FULL, 100.0)])
    paged.wall_s = 170.0  # the chart and the page drawn after the ladder
    assert budget_line(paged).startswith("170 s wall time of a 30 s budget: over by 140 s")
    assert budget_line(paged).endswith("the rungs 100 s (full run 100 s); the chart and page 7 s")


def test_the_costliest_stage_and_its_share():
    loader = Rung(LOADER, 1.0, figures=LoaderFigures(1.0, 10, 2, None, stage_cpu_ms=STAGES))
    assert top_stage(loader) == ("decode", pytest.approx(0.9))
    assert top_stage(Rung(LOADER, 1.0)) is None


def test_a_what_if_replaces_the_users_override_of_its_key():
    overrides = ["+experiment=cpu_smoke", "data.num_workers=0", "+data.num_workers=1", "data.batch_size=8"]
    assert replace(overrides, "data.num_workers", "2") == [
        "+experiment=cpu_smoke",
        "data.batch_size=8",
        "data.num_workers=2",
    ]
    assert replace(["data=imagefolder", "data.root=/x"], "data", "shards") == ["data.root=/x", "data=shards"]


def test_the_doctors_keys_are_split_from_the_training_overrides():
    own, overrides = split_keys(["doctor.budget_s=60", "model=resnet18", "doctor.what_ifs=false"])
    assert own == {"budget_s": "60", "what_ifs": "false", "out": ""} and overrides == ["model=resnet18"]
    with pytest.raises(ConfigError, match=r"doctor.budget='60' is not valid: accepted one of the doctor's keys"):
        split_keys(["doctor.budget=60"])
    for bad in ("0", "-5", "nan", "inf", "soon"):
        with pytest.raises(ConfigError, match=r"doctor.budget_s=.* is not valid: accepted a number of seconds above 0"):
            budget_of(bad)
    assert budget_of("90") == 90.0


def test_typed_rung_figures_keep_doctor_json_keys_and_order():
    """doctor.json's "figures" of each rung: the keys and order they had as dicts; a loader's note
    only where its stages were not split, a store only for a remote read, a skipped rung's {}."""
    split = LoaderFigures(1.0, 10, 2, 30, stage_cpu_ms=STAGES)
    noted = LoaderFigures(1.0, 10, None, None, stage_note="not split")
    local = StorageFigures(cache="warm", megabytes_per_second=5.0, files_read=3, dataset_files=3, threads=2)
    remote = StorageFigures(cache="remote", store="s3://b/shards")
    comm = AllreduceFigures(60.0, 40.0, 2, "gloo", 1.5, step_ms=None, share_of_step=None, nodes_measured=None)
    rungs = [Rung(LOADER, 1.0, figures=split), Rung(STORAGE, skipped="synthetic"), Rung(ALLREDUCE, figures=comm)]
    written = Diagnosis("compute-bound", "", rungs).to_json()["rungs"]
    assert [rung["figures"] for rung in written] == [split.to_json(), {}, comm.to_json()]
    assert list(written[0]) == [f.name for f in fields(Rung)]  # the rung's own keys unchanged
    assert list(split.to_json()) == ["cpu_ms_per_image", "batches", "workers", "dataset_size", "stage_cpu_ms"]
    assert list(noted.to_json()) == ["cpu_ms_per_image", "batches", "workers", "dataset_size", "stage_note"]
    tail = ["megabytes_per_second", "cold_megabytes_per_second", "warm_megabytes_per_second", "files_read"]
    tail += ["dataset_files", "dataset_megabytes", "threads", "readers"]
    assert list(local.to_json()) == ["cache", *tail] and list(remote.to_json()) == ["cache", "store", *tail]
    assert list(comm.to_json()) == [
        "milliseconds",
        "megabytes",
        "processes",
        "backend",
        "bus_gigabytes_per_second",
        "step_ms",
        "share_of_step",
        "nodes_measured",
    ]
