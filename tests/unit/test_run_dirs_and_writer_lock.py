"""Issue 33 §1: two runs never share anything by accident, in-process: the reservation of a run's
directory (the same second, many processes at once), what a refused command removes, the checkpoint
folder's one-writer lock (local flock, the S3 owner object) and the reaper keyed by its launch.
Real directories, real processes (killed with SIGKILL where that is the point), a real S3 server."""

from __future__ import annotations

import json
import logging
import multiprocessing
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from bench.run_dirs import discard, for_command, reserve, stamp_of
from bench.storage import writer_lock
from bench.storage.local import LocalStore
from bench.storage.writer_lock import FolderBusy, hold

NOON = time.mktime((2026, 11, 27, 12, 0, 7, 0, 0, -1))  # one second, for every reservation below


def _reserve_at_noon(base: str) -> str:
    return str(reserve(Path(base), NOON).path)


def test_reservations_of_one_second_each_get_their_own_directory(tmp_path):
    """The same timestamp, in this process and in eight processes at once: never one directory twice."""
    first, second = reserve(tmp_path / "outputs", NOON), reserve(tmp_path / "outputs", NOON)
    assert first.path == tmp_path / "outputs" / "2026-11-27" / "12-00-07"
    assert second.path == first.path.with_name("12-00-07-2")
    with multiprocessing.get_context("fork").Pool(8) as pool:
        paths = pool.map(_reserve_at_noon, [str(tmp_path / "outputs")] * 8)
    assert len(set(paths)) == 8 and {Path(p).name for p in paths} == {f"12-00-07-{n}" for n in range(3, 11)}
    assert stamp_of(Path(paths[0])).startswith("20261127-120007-")
    assert stamp_of(first.path) == "20261127-120007" and stamp_of(tmp_path / "mine") is None


def test_a_refused_command_removes_what_it_made_and_nothing_else(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    alone = reserve(Path("outputs"), NOON)
    (alone.path / ".hydra").mkdir()
    (alone.path / "bench.log").write_text("")
    discard(alone)
    assert not Path("outputs").exists()  # the date folder and outputs/ were this command's
    kept, refused = reserve(Path("outputs"), NOON), reserve(Path("outputs"), NOON)
    discard(refused)
    assert not refused.path.exists() and kept.path.is_dir()  # the date folder holds another run
    # a directory the user names: noted only when this command makes it; only Hydra's files go
    there = for_command(["hydra.run.dir=outputs"])
    assert there.made == [] and there.lock is not None  # there before: locked for the run, never removed
    discard(there)
    assert Path("outputs").is_dir()
    named = for_command(["+experiment=cpu_smoke", "hydra.run.dir=mine/run"])
    assert (named.path, named.made, named.override) == (Path("mine/run"), [Path("mine/run"), Path("mine")], None)
    Path("mine/run/.hydra").mkdir(parents=True)
    Path("mine/run/bench.log").write_text("")
    discard(named)
    assert not Path("mine").exists()


def test_which_commands_get_a_reserved_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    run = for_command(["+experiment=cpu_smoke"])
    assert run.override == f"hydra.run.dir={run.path.as_posix()}" and run.path.parts[0] == "outputs"
    sweep = for_command(["-m", "data.batch_size=4,8"])
    assert sweep.override.startswith("hydra.sweep.dir=multirun/") and sweep.path.is_dir()
    named = for_command(["-m", "hydra.sweep.dir=mine"])
    assert named.override is None and named.made == [Path("mine")]  # named, not there yet: noted
    with pytest.raises(FolderBusy, match=r"give this run a hydra\.sweep\.dir of its own"):  # one run at a time
        for_command(["-m", "hydra.sweep.dir=mine"])
    assert for_command(["-m", "hydra.sweep.dir=mine", "distributed.node_rank=1"]).lock is None  # a follower node
    named.release()
    for quiet in (["--cfg", "job"], ["--help"], ["--info"], ["-c", "hydra"]):
        assert for_command(quiet) is None, quiet
    for name, value in (("RANK", "1"), ("WORLD_SIZE", "2"), ("LOCAL_RANK", "1")):  # torchrun's ranks: one run
        monkeypatch.setenv(name, value)
    assert for_command(["distributed=ddp"]) is None


def test_one_writer_per_checkpoint_folder_and_a_sigkilled_writers_lock_is_taken_over(tmp_path, compose, caplog):
    """The lock a real process holds refuses a training run's claim, which then removes nothing; once
    that process is SIGKILLed the claim takes the lock over (said) and only then cleans the folder."""
    from bench.rank_context import RankContext
    from bench.train.resume import TrainingCheckpoints

    checkpoints = TrainingCheckpoints(compose(f"storage.root={tmp_path}", "checkpoint.every_epochs=1"))
    folder = Path(checkpoints.url)
    folder.mkdir(parents=True)
    ended = subprocess.Popen(["true"])
    ended.wait()
    killed_write = folder / f"epoch-0001.pt.tmp{ended.pid}"
    killed_write.write_bytes(b"half a checkpoint")
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from pathlib import Path; from bench.storage.local import LocalStore; "
            "from bench.storage.writer_lock import hold; "
            f"hold(LocalStore(Path({str(folder)!r})), Path('outputs/first'), 'x'); print('held', flush=True); "
            "time.sleep(600)",
        ],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    try:
        assert child.stdout.readline().strip() == "held"  # the event: the other process holds the folder
        with pytest.raises(FolderBusy) as refused:
            hold(LocalStore(folder), Path("outputs/second"), "wait for it to end")
        said = str(refused.value)
        assert f"is being written by another run: pid {child.pid} on " in said
        assert "(run dir outputs/first), since " in said and said.endswith("wait for it to end")
        with pytest.raises(FolderBusy):
            checkpoints.claim(RankContext(), tmp_path / "run")
        assert killed_write.exists()  # a refused run cleans nothing: the holder may be writing it
        child.kill()  # SIGKILL: the kernel releases its flock; its owner stays written in the file
        child.wait()
    finally:
        child.kill()
    with caplog.at_level(logging.INFO, logger="bench"):
        checkpoints.claim(RankContext(), tmp_path / "run")
    assert f"took over the lock of pid {child.pid} on " in caplog.text and "ended without releasing it" in caplog.text
    assert json.loads((folder / writer_lock.LOCK_FILE).read_text())["pid"] == os.getpid()
    assert not killed_write.exists() and f"temporary file(s) of killed checkpoint writes in {folder}" in caplog.text
    checkpoints.release()
    assert not (folder / writer_lock.LOCK_FILE).exists()  # a clean release leaves nothing
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="bench"):
        hold(LocalStore(folder), tmp_path / "run", "x").release()
    assert "took over" not in caplog.text


def test_the_s3_owner_object_refuses_a_second_writer_and_expires(
    tmp_path, compose, s3_server, aws_env, monkeypatch, caplog
):
    from bench.storage.base import open_store

    monkeypatch.setattr(writer_lock, "SETTLE_S", 0.05)
    bucket = s3_server.new_bucket()
    storage = compose(*s3_server.overrides(bucket)).storage
    store = open_store(f"s3://{bucket}/checkpoints/cfg", storage)
    first = hold(store, Path("outputs/first"), "x")
    with pytest.raises(
        FolderBusy, match=rf"s3://{bucket}/checkpoints/cfg is being written by another run: pid {os.getpid()}"
    ):
        hold(open_store(f"s3://{bucket}/checkpoints/cfg", storage), Path("outputs/second"), "x")
    first.release()
    assert not store.exists(writer_lock.OWNER_OBJECT)
    gone = {
        "pid": 1,
        "host": "h",
        "run_dir": "outputs/killed",
        "since": "then",
        "token": "t",
        "expires": time.time() - 1,
    }
    store.put(writer_lock.OWNER_OBJECT, json.dumps(gone).encode())
    with caplog.at_level(logging.WARNING, logger="bench"):
        hold(store, Path("outputs/next"), "x").release()
    assert "took over the owner object of pid 1 on h (run dir outputs/killed)" in caplog.text

    # Two writers that found no owner at once both write theirs; the one whose object is gone when
    # it reads back (the other's PUT came after its own) is refused
    put = store.put

    def then_another_writer(key: str, data: bytes) -> None:
        put(key, data)
        other = {**json.loads(data), "pid": 2, "token": "other"}
        put(key, json.dumps(other).encode())

    monkeypatch.setattr(store, "put", then_another_writer)
    with pytest.raises(FolderBusy, match="pid 2 on"):
        hold(store, Path("outputs/late"), "x")


def test_a_reaper_kills_only_its_own_launchs_workers(tmp_path):
    """Two launches given one run directory: launch A's worker ends, A's reaper kills A's survivor
    after its grace period, and never B's worker (issue 33: sweep B's worker was killed by A's)."""
    from bench.launch.launchers import SurvivorReaper, pid_file

    workers = tmp_path / "workers"
    ending, survivor, other = (subprocess.Popen(["sleep", seconds]) for seconds in ("0", "600", "600"))
    try:
        for launch, rank, proc in (("a", 0, ending), ("a", 1, survivor), ("b", 0, other)):
            (workers / launch).mkdir(parents=True, exist_ok=True)
            pid_file(workers / launch, rank).write_text(f"{proc.pid} {rank}")
        ending.wait()
        reaper = SurvivorReaper(2, workers / "a")
        survivor.wait(timeout=60)  # the event: A's reaper killed A's survivor
        reaper.stop()
        assert reaper.killed == [survivor.pid] and other.poll() is None
        assert psutil.Process(other.pid).status() != psutil.STATUS_ZOMBIE
    finally:
        for proc in (survivor, other):
            proc.kill()
            proc.wait()
