"""Issue 33 §1: two runs started at once share nothing by accident. Real processes started together,
the way it broke: two sweeps (B's worker was killed by A's reaper, A's report showed B's figure, both
MLflow parents had one name), two single runs (one run_summary.json survived), two
`train.resume=auto` runs on one checkpoint folder (both wrote the same epoch files), and a writer
killed with SIGKILL whose lock the next run takes over. From the issue's probe, in-process: two
doctors' folders, two `bench.data digits` into one --dst.

"The same second" without wall-clock luck: every directory Hydra's default pattern would give in
the next minutes is taken before the commands start, so each must reserve one of its own (`-N`);
tests/unit/test_concurrency.py reserves one timestamp many times over, in many processes."""

from __future__ import annotations

import csv
import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path
from typing import List, Set

import pytest
from mlflow import MlflowClient

from bench.storage.writer_lock import LOCK_FILE

HANG_GUARD_S = 900


def _take_the_coming_seconds(base: Path, seconds: int = 600) -> Set[Path]:
    """`base/<date>/<time>` for each of the next `seconds` seconds, made now (by "another command")."""
    now = int(time.time())
    taken = {base / time.strftime("%Y-%m-%d/%H-%M-%S", time.localtime(t)) for t in range(now - 2, now + seconds)}
    for path in taken:
        path.mkdir(parents=True, exist_ok=True)
    return taken


def _new_dirs(base: Path, taken: Set[Path]) -> List[Path]:
    return sorted(p for p in base.glob("*/*") if p.is_dir() and p not in taken)


def test_two_sweeps_started_together_keep_their_own_dirs_workers_reports_and_parents(bench, tiny):
    bench.with_store()
    taken = _take_the_coming_seconds(bench.cwd / "multirun")
    sweep = ["-m", *tiny, "seed=1,2"]
    procs = [bench.start(*sweep), bench.start(*sweep)]  # the second while the first starts
    ended = [proc.communicate(timeout=HANG_GUARD_S) for proc in procs]
    dirs = []
    for proc, (out, err) in zip(procs, ended, strict=True):
        assert proc.returncode == 0, err
        assert "killing pid" not in err and "WorkerFailure" not in err and "Traceback" not in err, err
        assert out.count('{"radix_metrics"') == 2
        (said,) = re.findall(r"report in (\S+)/report", err)
        dirs.append((bench.cwd / said).resolve())
    assert dirs[0] != dirs[1] and not {d.relative_to(bench.cwd.resolve()) for d in dirs} & {
        t.relative_to(bench.cwd) for t in taken
    }
    assert sorted(dirs) == [d.resolve() for d in _new_dirs(bench.cwd / "multirun", taken)]

    client = MlflowClient(tracking_uri=bench.uri)
    runs = bench.runs()
    parents = {run.data.tags["sweep.dir"]: run for run in runs if run.data.tags.get("sweep") == "parent"}
    assert set(parents) == {str(d) for d in dirs}
    names = {run.info.run_name for run in parents.values()}
    assert names == {"sweep-" + d.parent.name.replace("-", "") + "-" + d.name.replace("-", "", 2) for d in dirs}
    for sweep_dir in dirs:
        parent = parents[str(sweep_dir)]
        children = {
            c.data.tags["sweep.job"]: c for c in runs if c.data.tags.get("mlflow.parentRunId") == parent.info.run_id
        }
        with (sweep_dir / "report" / "report.csv").open() as fh:
            rows = {row["job"]: row for row in csv.DictReader(fh)}
        assert set(rows) == set(children) == {"0", "1"}
        for job, child in children.items():
            summary = json.loads((sweep_dir / job / "run_summary.json").read_text())
            assert summary["mlflow_run_id"] == child.info.run_id and child.info.status == "FINISHED"
            own = summary["results"]["images_per_second"]
            assert child.data.metrics["images_per_second"] == own  # its own figure, in its own MLflow run
            assert float(rows[job]["images_per_second"]) == own  # and in its own sweep's report
            (launch,) = (sweep_dir / job / "workers").iterdir()  # the launch's pid files, in a folder of its own
            assert [p.name for p in launch.glob("rank*.pid")] == ["rank0.pid"]
        assert client.get_run(parent.info.run_id).info.status == "FINISHED"


def test_two_resume_runs_at_once_one_writes_the_other_is_refused_and_a_killed_writers_lock_is_taken_over(bench, tiny):
    """Two `train.resume=auto` runs of one config started together: one holds the checkpoint folder,
    the other is refused in one line naming it (pid, host, run dir); each has its own run directory
    and log. The holder is then killed with SIGKILL: the next run says whose lock it took over,
    removes the temporary files left in the folder (only now, holding it), resumes from the killed
    run's last checkpoint and finishes."""
    bench.with_store()
    taken = _take_the_coming_seconds(bench.cwd / "outputs")
    resume = [arg for arg in tiny if not arg.startswith("train.epochs=")] + ["train.epochs=100000", "train.resume=auto"]
    procs = [bench.start(*resume), bench.start(*resume)]
    folder = _first_checkpoint(bench.cwd / "checkpoints", procs).parent  # the event: one run writes
    owner = json.loads((folder / LOCK_FILE).read_text())
    (writer,) = [proc for proc in procs if proc.pid == owner["pid"]]
    (refused,) = [proc for proc in procs if proc is not writer]
    os.kill(writer.pid, signal.SIGSTOP)  # it keeps the folder, and leaves the CPU to the others
    out, err = refused.communicate(timeout=HANG_GUARD_S)
    assert refused.returncode == 1 and "Traceback" not in err and "radix_metrics" not in out, err
    (line,) = [line for line in err.splitlines() if line.startswith("[ERROR]")]
    assert f"{folder} is being written by another run: pid {writer.pid} on " in line, line
    assert f"(run dir {owner['run_dir']})" in line and "give this run another checkpoint.dir" in line, line

    # two single runs at once: a directory each (none of the taken ones), a log each
    writer_dir = Path(owner["run_dir"])
    refused_dir = next(d.resolve() for d in _new_dirs(bench.cwd / "outputs", taken) if (d / "error.txt").exists())
    assert writer_dir != refused_dir and writer_dir.parent == refused_dir.parent
    assert writer_dir.relative_to(bench.cwd.resolve()) not in {t.relative_to(bench.cwd) for t in taken}
    assert "is being written by another run" in (refused_dir / "error.txt").read_text()

    gone = subprocess.Popen(["true"])
    gone.wait()
    leftover = folder / f"epoch-0001.pt.tmp{gone.pid}"  # a write killed midway
    leftover.write_bytes(b"half a checkpoint")
    writer.kill()  # SIGKILL (stopped or not): no clean-up runs; the kernel drops its flock
    writer.communicate(timeout=HANG_GUARD_S)
    last = max(int(p.name[len("epoch-") : -len(".pt")]) for p in folder.glob("epoch-*.pt"))

    proc = bench.run(*resume, "benchmark.measure_steps=3")
    metrics = bench.metrics(proc)
    assert f"took over the lock of pid {writer.pid} on " in proc.stderr and "ended without releasing it" in proc.stderr
    (removed,) = [line for line in proc.stderr.splitlines() if "temporary file(s) of killed checkpoint writes" in line]
    assert f"in {folder}: " in removed and leftover.name in removed  # and the killed writer's own, if any
    assert not leftover.exists() and not (folder / LOCK_FILE).exists()
    assert metrics["resumed_epoch"] == last

    runs = {run.data.tags.get("bench.pid"): run for run in bench.runs()}
    failed, killed = runs[str(refused.pid)], runs[str(writer.pid)]
    assert failed.info.status == "FAILED" and "is being written by another run" in failed.data.tags["error"]
    assert killed.info.status == "KILLED"  # closed by the next run: its process is gone
    for run_dir, mine, other in ((writer_dir, killed, failed), (refused_dir, failed, killed)):
        log = (run_dir / "bench.log").read_text()  # each run's log holds its own MLflow run, not the other's
        assert f"MLflow run {mine.info.run_id}" in log and other.info.run_id not in log
    (finished,) = [run for run in runs.values() if run.info.status == "FINISHED"]
    assert finished.data.metrics["images_per_second"] == metrics["images_per_second"]


def test_two_runs_given_one_run_dir_the_second_is_refused_and_a_killed_runs_dir_is_free(bench, tiny, tmp_path):
    """Issue 39.6: two commands naming one `hydra.run.dir` both ran there (run_summary.json held one
    run, bench.log both, the second's MLflow artifact the first's headline). The second is refused
    in one line naming the first, before Hydra writes there; a killed run's directory is free for
    the next, which says whose lock it took over and that it replaces a finished run's files."""
    bench.with_store()
    run_dir, lock = tmp_path / "shared", tmp_path / "shared" / ".bench-run.lock"
    first = bench.start(*tiny, f"hydra.run.dir={run_dir}")
    _wait_for_owner(lock, first)  # the event: the first run holds the directory
    second = bench.run(*tiny, "data.batch_size=8", f"hydra.run.dir={run_dir}")
    line = bench.single_error(second)
    assert second.returncode == 2 and f"{run_dir} is being written by another run: pid {first.pid} on " in line
    assert "give this run a hydra.run.dir of its own" in line, line
    _, err = first.communicate(timeout=HANG_GUARD_S)
    assert first.returncode == 0, err
    summary = json.loads((run_dir / "run_summary.json").read_text())
    assert summary["config"]["data"]["batch_size"] == 4 and not lock.exists()
    assert "bs=4" in (run_dir / "bench.log").read_text() and "bs=8" not in (run_dir / "bench.log").read_text()
    assert [run.info.run_id for run in bench.runs()] == [summary["mlflow_run_id"]]

    killed = bench.start(*tiny, "data.batch_size=8", f"hydra.run.dir={run_dir}")
    _wait_for_owner(lock, killed)
    killed.kill()  # SIGKILL: its lock file stays, its flock goes with it
    killed.communicate(timeout=HANG_GUARD_S)
    proc = bench.run(*tiny, "data.batch_size=8", f"hydra.run.dir={run_dir}")
    assert bench.metrics(proc)["batch_size"] == 8
    assert f"took over the lock of pid {killed.pid} on " in proc.stderr
    assert f"[WARNING] hydra.run.dir={run_dir} holds a finished run: its files are replaced" in proc.stderr


def test_two_storage_runs_on_one_root_the_second_is_refused_while_the_first_reads(bench, tmp_path):
    """Issue 39.4: two storage runs on one `storage.root` both rewrote the whole dataset, one's
    read window overlapping the other's rewrite. The first holds the dataset folder from before its
    prepare to its last read; the second is refused in one line naming it (FAILED, exit 1), and
    the folder is free again once the first ends, however it ends (here SIGTERM mid-read). The SIGTERM
    is also the signal test of a storage run's read phase: with both accelerators up it ends the run
    (143, one line, no traceback), no reader process outlives it, and its MLflow run is KILLED."""
    import psutil

    bench.with_store()
    storage = [
        "mode=storage",
        "storage.workload.num_files=8",
        "storage.workload.samples_per_file=4",
        "storage.workload.record_size=4096",
        "storage.workload.batch_size=4",
        "storage.workload.read_threads=2",
        "storage.workload.computation_time=0.05",
        "storage.workload.checkpoint_size_mb=0",
        "storage.prepare=always",
        f"storage.root={tmp_path}/root",
    ]
    first = bench.start(
        *storage, "storage.accelerators=2", "storage.workload.epochs=1000", f"hydra.run.dir={tmp_path}/first"
    )
    bench.wait_for_line(first, tmp_path / "first" / "bench.log", "read:")  # the event: its read window began
    deadline = time.monotonic() + HANG_GUARD_S  # a hang guard; the event: both accelerators are up
    while first.poll() is None and time.monotonic() < deadline and len(psutil.Process(first.pid).children()) < 2:
        time.sleep(0.05)
    accelerators = psutil.Process(first.pid).children(recursive=True)
    assert len(accelerators) >= 2, first.communicate(timeout=HANG_GUARD_S)
    (lock,) = (tmp_path / "root").rglob(".bench-dataset.lock")
    second = bench.run(*storage, "storage.workload.epochs=1", f"hydra.run.dir={tmp_path}/second")
    line = bench.single_error(second)
    assert second.returncode == 1 and f"{lock.parent} is being written by another run: pid {first.pid} on " in line
    assert f"(run dir {tmp_path}/first)" in line and "give this run another storage.root" in line, line
    assert "prepare:" not in (tmp_path / "second" / "bench.log").read_text()  # it wrote nothing of the dataset
    first.send_signal(signal.SIGTERM)  # mid-read: the accelerators read while the second was refused
    _, err = first.communicate(timeout=HANG_GUARD_S)
    assert first.returncode == 143 and not lock.exists(), err
    assert "[ERROR] run interrupted" in err and "Traceback" not in err, err
    _gone, alive = psutil.wait_procs(accelerators, timeout=120)
    assert not alive  # no orphaned reader process
    runs = {run.info.status: run for run in bench.runs()}
    assert sorted(runs) == ["FAILED", "KILLED"] and runs["KILLED"].data.tags["bench.pid"] == str(first.pid)
    assert "is being written by another run" in runs["FAILED"].data.tags["error"]


def _wait_for_owner(lock: Path, proc) -> None:
    """Until `proc` has written itself into `lock` as its owner; fails if it ends first."""
    deadline = time.monotonic() + HANG_GUARD_S  # a hang guard
    while proc.poll() is None and time.monotonic() < deadline:
        if lock.exists() and f'"pid": {proc.pid},' in lock.read_text():
            return
        time.sleep(0.05)
    raise AssertionError(f"{proc.pid} never held {lock}: " + proc.communicate()[1])


def _first_checkpoint(root: Path, procs) -> Path:
    """The first `epoch-N.pt` written under `root`; fails if every process ended first."""
    deadline = time.monotonic() + HANG_GUARD_S  # a hang guard
    while time.monotonic() < deadline:
        written = sorted(root.glob("*/epoch-*.pt"))
        if written:
            return written[0]
        if all(proc.poll() is not None for proc in procs):
            raise AssertionError("\n".join(proc.communicate()[1] for proc in procs))
        time.sleep(0.05)
    raise AssertionError(f"no checkpoint under {root}")


def test_two_doctors_started_together_get_their_own_folder(tmp_path, monkeypatch):
    """Issue 33 probe: two `python -m bench.doctor` started in the same second wrote one
    doctor/<date>/<time> (one doctor.json survived). The default is reserved as a run's directory is,
    once the config is checked (a refused doctor makes nothing); a doctor.out the user names is theirs."""
    from bench.doctor.cli import out_dir_of, own_out_dir

    monkeypatch.chdir(tmp_path)
    assert out_dir_of("") is None and not (tmp_path / "doctor").exists()
    first, second = own_out_dir(), own_out_dir()
    assert first != second and first.is_dir() and second.is_dir()
    assert first.parent.parent == second.parent.parent == tmp_path / "doctor"
    assert out_dir_of("mine") == tmp_path / "mine"


@pytest.mark.slow  # two digits datasets written in this process: ~10 s
def test_two_digits_into_one_dst_at_once_both_end_with_the_folder(tmp_path, monkeypatch):
    """Issue 33 probe: the second of two `digits --dst D` started together found D filled when it
    put its own folder in place: `digits failed: OSError: [Errno 39] Directory not empty` (exit 1).
    In-process, the other command finishing first just before this one's rename (the race, made
    certain): this one reads the folder the other wrote, as a rerun does, and leaves no temp dir."""
    from bench.data import digits as module

    put = module._put_in_place
    dst = str(tmp_path / "digits")

    def the_other_finishes_first(tmp: str, where: str) -> bool:
        monkeypatch.setattr(module, "_put_in_place", put)
        assert module.write_digits(dst, size=8) == (module.read_manifest(dst), False)  # the other command
        return put(tmp, where)

    monkeypatch.setattr(module, "_put_in_place", the_other_finishes_first)
    manifest, already = module.write_digits(dst, size=8)
    assert already and manifest == module.read_manifest(dst) and sorted(os.listdir(tmp_path)) == ["digits"]


def test_two_api_runs_from_two_threads_at_once_are_two_runs(bench, tiny, monkeypatch):
    """Issue 33 probe: `bench.api.run` from two threads at once: the second raised `ValueError:
    GlobalHydra is already initialized` (Hydra's compose API has one global state). Both finish
    now, each its own directory, records and FINISHED MLflow run."""
    import threading

    from bench.api import run

    monkeypatch.chdir(bench.with_store().cwd)
    outcome: dict = {}

    def one(seed: int) -> None:
        try:
            outcome[seed] = run([*tiny, f"seed={seed}"])
        except BaseException as exc:  # handed to the test, which fails on it
            outcome[seed] = exc

    threads = [threading.Thread(target=one, args=(seed,)) for seed in (1, 2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=HANG_GUARD_S)  # a hang guard only
    results = [outcome[1], outcome[2]]
    assert all(getattr(result, "ok", False) for result in results), results
    assert results[0].out_dir != results[1].out_dir
    runs = {run.info.run_id: run for run in bench.runs()}
    for result in results:
        summary = json.loads((result.out_dir / "run_summary.json").read_text())
        assert runs[summary["mlflow_run_id"]].info.status == "FINISHED" and summary["config"]["seed"] in (1, 2)
    assert len(runs) == 2
