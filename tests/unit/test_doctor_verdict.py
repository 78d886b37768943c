"""The doctor's verdict from the ladder's figures (bench.doctor.verdict), its keys, and how a
what-if changes the user's overrides. The ladder itself runs for real in tests/e2e/test_doctor.py."""

from __future__ import annotations

import pytest

from bench.doctor.cli import budget_of, split_keys
from bench.doctor.figures import ALLREDUCE, COMPUTE, FULL, LOADER, STORAGE, Rung
from bench.doctor.verdict import diagnose, top_stage
from bench.doctor.what_ifs import replace
from bench.errors import ConfigError

STAGES = {"read": 0.02, "decode": 0.54, "augment": 0.03, "collate": 0.0, "host_to_device": 0.01}


def ladder(compute=1000.0, loader=None, storage=None, full=950.0, wait=0.0, workers=2, allreduce=None, fit=True):
    rungs = [Rung(COMPUTE, compute, fit=fit, unfit_because="" if fit else "a CPU hog")]
    rungs.append(Rung(LOADER, loader, figures={"stage_cpu_ms": STAGES, "workers": workers}) if loader
                 else Rung(LOADER, skipped="synthetic"))
    rungs.append(Rung(STORAGE, storage, figures={"megabytes_per_second": 12.5, "cache": "cold"}) if storage
                 else Rung(STORAGE, skipped="synthetic"))
    rungs.append(Rung(FULL, full, data_wait=wait, fit=True))
    rungs.append(Rung(ALLREDUCE, figures=allreduce) if allreduce else Rung(ALLREDUCE, skipped="one process"))
    return rungs


def test_a_loader_slower_than_the_model_is_input_bound_with_the_costliest_stage_named():
    verdict, sentence = diagnose(ladder(compute=1900, loader=410, storage=5000, full=400, wait=0.7), cores=8)
    assert verdict == "input-bound"
    assert sentence == ("input-bound: the loader gives 410 img/s, the model could take 1,900; "
                        "decode is 90% of the loader's CPU time")


def test_a_run_waiting_for_a_loader_that_runs_between_its_steps_is_input_bound():
    """num_workers=0: the loader alone is faster than the model, but the two add up."""
    verdict, sentence = diagnose(ladder(compute=2800, loader=7000, storage=12000, full=1460, wait=0.31, workers=0), 2)
    assert verdict == "input-bound"
    assert "waits for data 31% of its time: with data.num_workers=0 the loader runs between the model's steps" in sentence
    assert "decode is 90%" in sentence


def test_storage_slower_than_the_loader_and_the_model_is_storage_bound():
    verdict, sentence = diagnose(ladder(compute=1900, loader=1500, storage=300, full=290, wait=0.8), 8)
    assert verdict == "storage-bound"
    assert sentence.startswith("storage-bound: the files under data.root read at 12 MB/s (cold cache), enough for 300 img/s")


def test_synthetic_data_at_the_ceiling_is_compute_bound():
    verdict, sentence = diagnose(ladder(compute=1000, full=980), 2)
    assert verdict == "compute-bound"
    assert sentence == ("compute-bound: the full run gives 980 img/s, 98% of the compute ceiling (1,000 img/s); "
                        "the data is synthetic (no input pipeline)")


def test_a_fast_enough_loader_at_the_ceiling_is_compute_bound():
    verdict, _ = diagnose(ladder(compute=1000, loader=5000, storage=9000, full=900, wait=0.02), 8)
    assert verdict == "compute-bound"


def test_parts_each_faster_than_the_whole_are_contended():
    verdict, sentence = diagnose(ladder(compute=1000, loader=1100, storage=9000, full=500, wait=0.1), 2)
    assert verdict == "contended"
    assert "the full run gives 500 img/s though the compute alone 1,000, the loader alone 1,100" in sentence


def test_an_all_reduce_taking_most_of_a_step_is_communication_bound():
    comm = {"milliseconds": 60.0, "share_of_step": 0.6, "step_ms": 100.0, "bus_gigabytes_per_second": 1.5}
    verdict, sentence = diagnose(ladder(compute=1000, full=990, allreduce=comm), 8)
    assert verdict == "communication-bound"
    assert "takes 60.0 ms, 60% of the 100.0 ms step (1.50 GB/s bus bandwidth)" in sentence


def test_no_full_run_is_no_verdict_and_says_why():
    rungs = ladder()
    rungs[3] = Rung(FULL, failed="the run exited 1")
    assert diagnose(rungs, 2) == ("unknown", "unknown: the full training run gave no figure (the run exited 1)")


def test_a_rung_measured_on_a_busy_machine_is_named_in_the_sentence():
    _, sentence = diagnose(ladder(compute=1000, full=980, fit=False), 2)
    assert sentence.endswith("(measured on a busy machine: compute ceiling (synthetic data on the device): a CPU hog)")


def test_the_costliest_stage_and_its_share():
    assert top_stage(Rung(LOADER, 1.0, figures={"stage_cpu_ms": STAGES})) == ("decode", pytest.approx(0.9))
    assert top_stage(Rung(LOADER, 1.0)) is None


def test_a_what_if_replaces_the_users_override_of_its_key():
    overrides = ["+experiment=cpu_smoke", "data.num_workers=0", "+data.num_workers=1", "data.batch_size=8"]
    assert replace(overrides, "data.num_workers", "2") == ["+experiment=cpu_smoke", "data.batch_size=8",
                                                           "data.num_workers=2"]
    assert replace(["data=imagefolder", "data.root=/x"], "data", "shards") == ["data.root=/x", "data=shards"]


def test_the_doctors_keys_are_split_from_the_training_overrides():
    own, overrides = split_keys(["doctor.budget_s=60", "model=resnet18", "doctor.what_ifs=false"])
    assert own == {"budget_s": "60", "what_ifs": "false", "out": ""} and overrides == ["model=resnet18"]
    with pytest.raises(ConfigError, match=r"doctor.budget='60' is not valid: accepted one of the doctor's keys"):
        split_keys(["doctor.budget=60"])
    for bad in ("0", "-5", "nan", "inf", "soon"):
        with pytest.raises(ConfigError, match="doctor.budget_s=.* is not valid: accepted a number of seconds above 0"):
            budget_of(bad)
    assert budget_of("90") == 90.0
