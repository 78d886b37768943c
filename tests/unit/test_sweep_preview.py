"""`python -m bench -m ... --cfg job` lists the sweep's jobs instead of Hydra's traceback
("Only one of --run, --multirun, --cfg, ... can be specified"): the jobs as -m runs them,
expanded by Hydra's own sweeper."""

from __future__ import annotations

import io

from bench.launch.preview import jobs_of, overrides_of, preview, wants_preview


def test_only_multirun_with_cfg_is_a_preview():
    assert wants_preview(["-m", "seed=1,2", "--cfg", "job"]) and wants_preview(["--multirun", "--cfg=all", "a=1"])
    assert not wants_preview(["seed=1", "--cfg", "job"]) and not wants_preview(["-m", "seed=1,2"])


def test_hydras_flags_and_their_values_are_not_overrides():
    argv = ["-m", "--cfg", "job", "--package", "data", "--resolve", "data.batch_size=1,2", "+experiment=cpu_smoke"]
    assert overrides_of(argv) == ["data.batch_size=1,2", "+experiment=cpu_smoke"]


def test_jobs_are_the_product_of_the_swept_keys_in_hydras_order():
    jobs = jobs_of(["data.batch_size=64,128", "precision=fp32,bf16", "seed=range(0,2)", "+experiment=cpu_smoke"])
    assert len(jobs) == 8
    assert jobs[0] == ["data.batch_size=64", "precision=fp32", "seed=0", "+experiment=cpu_smoke"]
    assert jobs[-1] == ["data.batch_size=128", "precision=bf16", "seed=1", "+experiment=cpu_smoke"]


def test_the_listing_has_a_line_per_job_that_pastes_into_a_shell():
    out = io.StringIO()
    assert preview(["-m", "data.progressive='0,128,8;2,160,8'", "seed=1,2", "--cfg", "job"], out) is None
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("a sweep of 2 jobs")
    assert lines[1] == "  #0  \"data.progressive='0,128,8;2,160,8'\" seed=1"
    assert lines[2].endswith(" seed=2") and "--cfg job" in lines[3]


def test_an_override_that_does_not_parse_is_one_reason():
    reason = preview(["-m", "data.batch_size=[", "--cfg", "job"], io.StringIO())
    assert reason.startswith("a command-line override could not be parsed") and "\n" not in reason
