"""Checkpoints and resume, as real processes: a run killed with SIGKILL continues from its last
checkpoint with the same command line (train.resume=auto) and ends where an uninterrupted run
ends, with the same weights, and its MLflow run names the checkpoint; SIGTERM writes a checkpoint before the run ends KILLED; a damaged
checkpoint named on the command line is one line; checkpoints on a loopback S3 server."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

HANG_GUARD_S = 900
# 6 epochs of 4 steps at 48 px on 1 CPU thread: long enough to be killed mid-way, short for a test
RUN = ["train.epochs=6", "train.steps_per_epoch=4", "data.image_size=48", "checkpoint.every_epochs=1",
       "checkpoint.keep_last=3", "tracking.enabled=false"]


def checkpoints_in(root: Path) -> list:
    return sorted(p.name for p in root.glob("checkpoints/*/*.pt"))


def wait_for(predicate, proc, what: str) -> None:
    """Until `predicate()` holds (the event); fails if the process ends first or the guard runs out."""
    deadline = time.monotonic() + HANG_GUARD_S
    while not predicate():
        assert proc.poll() is None, f"the run ended before {what}: {proc.communicate()}"
        assert time.monotonic() < deadline, f"no {what} within {HANG_GUARD_S} s"
        time.sleep(0.02)


def test_sigkill_mid_run_then_resume_auto_ends_like_an_uninterrupted_run(bench, tiny, tmp_path):
    whole = bench.metrics(bench.run(*tiny, *RUN, f"hydra.run.dir={tmp_path}/whole", f"storage.root={tmp_path}/a"))

    root = tmp_path / "b"
    proc = bench.start(*tiny, *RUN, f"hydra.run.dir={tmp_path}/killed", f"storage.root={root}")
    wait_for(lambda: "epoch-0002.pt" in checkpoints_in(root), proc, "the epoch-2 checkpoint")
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=HANG_GUARD_S)
    assert proc.returncode == -signal.SIGKILL
    done_before = max(int(name[6:10]) for name in checkpoints_in(root))
    assert 2 <= done_before < 6

    # the same command line, plus resume=auto: continues after the last checkpoint
    resumed_dir = tmp_path / "resumed"
    tracked = [arg for arg in RUN if arg != "tracking.enabled=false"]  # this one lands in MLflow
    resumed = bench.metrics(bench.run(*tiny, *tracked, "train.resume=auto", f"hydra.run.dir={resumed_dir}",
                                      f"storage.root={root}"))
    assert resumed["resumed_epoch"] == done_before and resumed["resumed_from"].endswith(f"epoch-{done_before:04d}.pt")
    assert resumed["checkpoint_load_seconds"] > 0 and resumed["checkpoint_save_gbps"] > 0
    epochs = bench.epochs(resumed_dir)
    assert [e["epoch"] for e in epochs] == [1, 2, 3, 4, 5, 6]  # numbered from where the checkpoint left off
    assert set(epochs[0]) == set(epochs[-1])
    assert resumed["measured_steps"] == (6 - done_before) * 4
    assert set(whole) <= set(resumed)  # the same figures, plus where it resumed from
    # CPU, fixed seeds, one thread: the same weights after the same steps
    assert resumed["param_checksum"] == pytest.approx(whole["param_checksum"], rel=1e-9)
    assert resumed["final_loss"] == pytest.approx(whole["final_loss"], rel=1e-5)
    assert checkpoints_in(root)[-1] == "epoch-0006.pt" and len(checkpoints_in(root)) == 3  # keep_last
    (run,) = bench.runs()  # the MLflow run says which checkpoint it continued from
    assert run.data.params["train.resume"] == "auto" and run.data.params["resumed_from"] == resumed["resumed_from"]
    assert run.data.metrics["resumed_epoch"] == done_before and run.data.metrics["checkpoint_load_gbps"] > 0


def test_sigterm_writes_a_checkpoint_and_the_run_continues_from_it(bench, tiny, tmp_path):
    root = tmp_path / "store"
    run_dir = tmp_path / "run"
    proc = bench.start(*tiny, *RUN, "train.epochs=40", "benchmark.log_every=1", f"hydra.run.dir={run_dir}",
                       f"storage.root={root}")
    bench.wait_for_line(proc, run_dir / "bench.log", "step 6/")
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=HANG_GUARD_S)
    assert proc.returncode == 143, err
    assert "Traceback" not in err and "run interrupted" in err
    names = checkpoints_in(root)
    mid = [n for n in names if "-step-" in n]
    assert len(mid) == 1, names  # written on the signal, mid-epoch: epoch-0001-step-00000N.pt
    steps_done = int(mid[0].split("-step-")[1][:6]) + 4 * int(mid[0][6:10])

    resumed = bench.metrics(bench.run(*tiny, *RUN, "train.epochs=40", "train.resume=auto", "benchmark.measure_steps=3",
                                      f"hydra.run.dir={tmp_path}/resumed", f"storage.root={root}"))
    assert resumed["resumed_from"].endswith(mid[0]) and resumed["measured_steps"] == 3
    assert steps_done >= 6


def test_a_damaged_checkpoint_named_on_the_command_line_is_one_line(bench, tiny, tmp_path):
    damaged = tmp_path / "epoch-0001.pt"
    damaged.write_bytes(b"PK\x03\x04 half a zip file")
    proc = bench.run(*tiny, f"train.resume={damaged}", "tracking.enabled=false", f"hydra.run.dir={tmp_path}/run")
    line = bench.single_error(proc)
    assert f"checkpoint {tmp_path}/epoch-0001.pt is damaged or not bench's" in line


def test_checkpoints_on_s3_and_resume_from_them(bench, tiny, tmp_path, s3_server):
    bucket = s3_server.new_bucket()
    s3 = s3_server.overrides(bucket, "storage.prefix=ckpt", "storage.client=boto3")
    first = bench.metrics(bench.run(*tiny, *RUN, "train.epochs=2", *s3, f"hydra.run.dir={tmp_path}/one",
                                    env=s3_server.env()))
    assert first["checkpoints_saved"] == 2 and first["checkpoint_dir"].startswith(f"s3://{bucket}/ckpt/checkpoints/")
    keys = [o["Key"] for o in s3_server.admin().list_objects_v2(Bucket=bucket)["Contents"]]
    assert sorted(k.rsplit("/", 1)[-1] for k in keys) == ["epoch-0001.pt", "epoch-0002.pt"]

    more = bench.metrics(bench.run(*tiny, *RUN, "train.epochs=3", "train.resume=auto", *s3,
                                   f"hydra.run.dir={tmp_path}/two", env=s3_server.env()))
    assert more["resumed_epoch"] == 2 and more["resumed_from"].startswith(f"s3://{bucket}/ckpt/")
    assert more["measured_steps"] == 4 and [e["epoch"] for e in bench.epochs(tmp_path / "two")] == [1, 2, 3]

