"""Issue 33 §3 and §5, as a user met them: a schedule a run does not reach is said and never
squeezed into the run (the lr reported is the lr applied), and the tools say what they found
(`bench.data prepare`'s leftovers, a store that is not there). A directory bench cannot write is
refused before any run: rows of the bad-input table (bad_inputs.py); the report of a sweep whose
job directory was deleted: tests/e2e/test_sweep.py (it reuses that file's sweep)."""

from __future__ import annotations

import json

import pytest


def test_a_milestone_past_the_run_is_said_and_the_lr_reported_is_the_lr_applied(bench, tiny, tmp_path):
    """Milestones in epochs [1, 100] on a 2-epoch run: 100 was clamped to the run's last step, and the
    epochs recorded the next step's lr (epoch 1 said 0.01, trained at 0.1; epoch 2 said 0.001)."""
    run_dir = tmp_path / "run"
    proc = bench.run(
        *tiny,
        "train.epochs=2",
        "scheduler=multistep",
        "scheduler.milestones=[1,100]",
        "scheduler.milestone_unit=epochs",
        "tracking.enabled=false",
        f"hydra.run.dir={run_dir}",
    )
    metrics = bench.metrics(proc)
    said = [line for line in proc.stderr.splitlines() if "scheduler." in line]
    assert len(said) == 1, proc.stderr
    assert "scheduler.milestones [100] of [1, 100] (in epochs) fall past this run's end (7 optimizer steps" in said[0]
    assert [epoch["lr"] for epoch in bench.epochs(run_dir)] == pytest.approx([0.1, 0.01])
    assert metrics["final_lr"] == pytest.approx(0.01)


def test_a_resume_with_no_epoch_left_is_one_line_not_a_run_of_no_steps(bench, tiny, tmp_path):
    """Issue 33 probe: a finished run started again with train.resume=auto (a job requeued after it
    ended, or another config of fewer epochs on the folder) resumed at its end, trained nothing and
    died formatting its figures: `run failed: TypeError: unsupported format string passed to
    NoneType.__format__` (1). Now one line saying why, the run FAILED with it; a checkpoint file named
    on the command line is refused before any run (2)."""
    bench.with_store()
    keep = [*tiny, "checkpoint.every_epochs=1", f"storage.root={tmp_path}/store"]
    first = bench.run(*keep, f"hydra.run.dir={tmp_path}/first")
    assert first.returncode == 0, first.stderr
    again = bench.run(*keep, "train.resume=auto", f"hydra.run.dir={tmp_path}/again")
    line = bench.single_error(again)
    assert again.returncode == 1 and "TypeError" not in again.stderr, again.stderr
    assert "epoch-0001.pt ends epoch 1, and this run has train.epochs=1: no epoch is left to train" in line, line
    failed = [run for run in bench.runs() if run.info.status == "FAILED"]
    assert len(failed) == 1 and "no epoch is left to train" in failed[0].data.tags["error"]
    (checkpoint,) = (tmp_path / "store").rglob("epoch-0001.pt")
    named = bench.run(*keep, f"train.resume={checkpoint}", f"hydra.run.dir={tmp_path}/named")
    assert named.returncode == 2 and "no epoch is left to train" in bench.single_error(named), named.stderr
    assert not (tmp_path / "named").exists() and len(bench.runs()) == 2


def test_prepare_deletes_the_shards_an_earlier_prepare_left_and_names_look_alikes(bench, places):
    """An earlier (interrupted) prepare's 5 shards and meta.json in --dst: the new one wrote 2 and left
    3 stale shards a reader of the folder would take for data; a file named like a shard that is not
    bench's is named, not deleted."""
    from bench.data.shardformat import encode_shard

    dst = places["tmp"] / "shards"
    (dst / "train").mkdir(parents=True)
    for number in range(5):
        (dst / "train" / f"shard-{number:05d}.bin").write_bytes(encode_shard([(b"old", 0)]))
    (dst / "train" / "meta.json").write_text('{"shards": "of the earlier prepare"}')
    (dst / "train" / "shard-00042.bin").write_text("not a shard")
    proc = bench.run(
        "prepare", "--src", str(places["images"]), "--dst", str(dst), "--shard-size", "4", "--workers", "1",
        module="bench.data",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "train: 8 images in 2 shards" in proc.stdout
    assert "3 shards of an earlier prepare deleted (train/shard-00002.bin .. train/shard-00004.bin)" in proc.stdout
    assert "1 file named like shards but not bench's left as they are (train/shard-00042.bin)" in proc.stdout
    kept = sorted(path.name for path in (dst / "train").iterdir())
    assert kept == ["meta.json", "shard-00000.bin", "shard-00001.bin", "shard-00042.bin"]
    meta = json.loads((dst / "train" / "meta.json").read_text())
    assert [s["key"] for s in meta["shards"]] == ["train/shard-00000.bin", "train/shard-00001.bin"]


def test_stale_and_report_make_no_store_to_say_there_is_none(bench, tmp_path):
    """In a directory without mlflow.db: `stale` made a 1 MB store (and logged its table creation) to
    print "0 RUNNING", `report --sweep <id>` made one to say the run is not in it."""
    stale = bench.run(module="bench.tools.stale", env=bench.env())
    assert (
        stale.returncode == 0 and stale.stderr.strip() == f"no MLflow store at {tmp_path}/mlflow.db: 0 RUNNING, 0 stale"
    )
    report = bench.run("--sweep", "0123456789abcdef0123456789abcdef", module="bench.report", env=bench.env())
    assert report.returncode == 2 and bench.error_lines(report.stderr) == [
        "[ERROR] --sweep 0123456789abcdef0123456789abcdef is neither a directory nor a run in the MLflow store at "
        f"sqlite:///{tmp_path}/mlflow.db: {tmp_path}/mlflow.db does not exist (pass a multirun directory, or name "
        "the sweep's store with --tracking-uri)"
    ], report.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == []
