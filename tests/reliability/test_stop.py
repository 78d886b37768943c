"""Issue 28, "stop means stop": a signal to the doctor ends its whole ladder within seconds (no
further rung, what-if or verdict), its MLflow parent and the rung in progress end KILLED, exit
130/143, no traceback and no process left. Real processes, real signals; the waits are for
events (a rank's log line), the timeouts hang guards only."""

from __future__ import annotations

import contextlib
import os
import signal
import sqlite3
import time

import psutil
import pytest
from forked_bench import left_alive

HANG_GUARD_S = 900
# the e2e doctor tests' fast model; a budget whose rungs would each run for a minute or more
DOCTOR = ["allow_cpu=true", "model=small_cnn", "data.image_size=8", "data.batch_size=64", "doctor.budget_s=900"]


@pytest.mark.parametrize("sig,code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)], ids=["SIGTERM", "Ctrl-C"])
def test_a_signal_ends_the_doctors_whole_ladder_killed(bench, tmp_path, sig, code):
    out = tmp_path / "doctor"
    bench.with_store()
    proc = bench.start(
        *DOCTOR, f"doctor.out={out}", module="bench.doctor", env=bench.env(bench.uri), start_new_session=True
    )
    bench.wait_for_line(proc, out / "1-compute" / "rank0.log", "worker for rank 0/1 started")  # in the first rung
    tree = psutil.Process(proc.pid).children(recursive=True)
    signalled = time.monotonic()
    if sig == signal.SIGINT:
        os.killpg(proc.pid, sig)  # what a terminal's Ctrl-C does: the rung's worker gets it too
    else:
        proc.send_signal(sig)
    stdout, stderr = proc.communicate(timeout=HANG_GUARD_S)
    took = time.monotonic() - signalled
    assert proc.returncode == code, stderr
    assert "Traceback" not in stderr and "KeyboardInterrupt" not in stderr, stderr
    assert "leaked semaphore" not in stderr
    assert f"[ERROR] the doctor was interrupted (terminated by signal {sig.name})" in stderr
    assert "4-full" not in stderr and not (out / "4-full").exists()  # no further rung
    assert not (out / "doctor.json").exists() and stdout == ""  # no verdict, no table
    assert took < 60, took  # seconds, not the budget's rungs (a hang guard on a loaded machine)
    runs = bench.runs()
    assert sorted((r.data.tags.get("doctor", ""), r.info.status) for r in runs) == [
        ("", "KILLED"),
        ("parent", "KILLED"),
    ]
    assert left_alive(tree, 30.0) == []


def test_ctrl_c_in_the_doctors_storage_rung_ends_it_killed(bench, datasets, tmp_path):
    """Issue 39 §9: the first rung's elastic launch left torch's signal handlers in place, so a later
    Ctrl-C raised its SignalException: a traceback, exit 1, the parent run left RUNNING."""
    datasets.image_folder(tmp_path / "images", images=160)  # two batches of 64
    out = tmp_path / "doctor"
    bench.with_store()
    args = ["data=imagefolder", f"data.root={tmp_path / 'images'}", f"data.num_classes={datasets.CLASSES}"]
    proc = bench.start(
        *DOCTOR[:-1],
        *args,
        "doctor.budget_s=10",  # each rung's window at its 1 s floor: the signal's moment, not a rung's length, matters
        "doctor.what_ifs=false",
        f"doctor.out={out}",
        module="bench.doctor",
        env=bench.env(bench.uri),
        start_new_session=True,
    )
    # the event: the loader rung's child run closed (just after its line is printed), the storage rung's start
    deadline = time.monotonic() + HANG_GUARD_S
    with contextlib.closing(sqlite3.connect(bench.db, timeout=30)) as store:
        while proc.poll() is None and time.monotonic() < deadline and not _finished(store, "doctor-loader"):
            time.sleep(0.02)
    assert proc.poll() is None, proc.communicate()
    os.killpg(proc.pid, signal.SIGINT)
    _stdout, stderr = proc.communicate(timeout=HANG_GUARD_S)
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr and "input pipeline alone (no model)" in stderr, stderr
    assert bench.error_lines(stderr) == [
        f"[ERROR] the doctor was interrupted (terminated by signal SIGINT); the rungs measured so far are in {out}"
    ]
    with contextlib.closing(sqlite3.connect(bench.db, timeout=30)) as store:
        assert not _finished(store, "doctor-storage")  # stopped in the storage rung, not after it
    statuses = {r.data.tags.get("doctor"): r.info.status for r in bench.runs()}
    assert statuses["parent"] == "KILLED"


def _finished(store: sqlite3.Connection, name: str) -> bool:
    """Whether the MLflow store holds a FINISHED run of that name. `store`: a connection kept open while
    polling (each SELECT, in autocommit, reads what other processes committed; a new connection per poll
    parses MLflow's whole schema again: ~0.75 CPU-s a thousand polls, against ~0.01)."""
    return bool(store.execute("SELECT 1 FROM runs WHERE name = ? AND status = 'FINISHED'", (name,)).fetchall())


# ---- python -m bench.tools.storage_ceiling ---------------------------------------------------------------------
# a small dataset read for many rounds: the signal comes while the readers read
CEILING = [
    "--files",
    "8",
    "--samples-per-file",
    "8",
    "--record-size",
    "4096",
    "--threads",
    "2",
    "--modes",
    "warm",
    "--rounds",
    "100000",
]


def _ceiling_started(bench, tmp_path, *args):
    """The tool started with TMPDIR in the test's directory; (process, its dataset dir) once the
    dataset is written (its manifest: the event), so the signal comes while it reads."""
    temp = tmp_path / "temp"
    temp.mkdir()
    proc = bench.start(
        *CEILING, *args, module="bench.tools.storage_ceiling", env=bench.env(TMPDIR=str(temp)), start_new_session=True
    )
    deadline = time.monotonic() + HANG_GUARD_S
    while time.monotonic() < deadline and proc.poll() is None:
        made = list(temp.glob("bench-ceiling-*/_manifest.json"))
        if made:
            return proc, made[0].parent
        time.sleep(0.05)
    out, err = proc.communicate()
    pytest.fail(f"no dataset appeared (exit {proc.returncode})\n{out}\n{err}")


@pytest.mark.parametrize("sig,code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)], ids=["SIGTERM", "Ctrl-C"])
def test_a_signal_ends_the_storage_ceiling_in_seconds_and_removes_its_dataset(bench, tmp_path, sig, code):
    """Issue 28: Ctrl-C hung (a futex wait), SIGTERM left its ~900 MB dataset in the cwd."""
    proc, dataset = _ceiling_started(bench, tmp_path)
    assert (dataset / ".bench-owner").read_text().split()[0] == str(proc.pid)  # under TMPDIR, marked as its own
    tree = psutil.Process(proc.pid).children(recursive=True)
    signalled = time.monotonic()
    if sig == signal.SIGINT:
        os.killpg(proc.pid, sig)  # a terminal's Ctrl-C: its reader processes get it too
    else:
        proc.send_signal(sig)
    _out, err = proc.communicate(timeout=HANG_GUARD_S)
    took = time.monotonic() - signalled
    assert proc.returncode == code, err
    assert bench.error_lines(err) == [f"[ERROR] storage_ceiling interrupted: terminated by signal {sig.name}"], err
    assert "Traceback" not in err
    assert took < 30, took
    assert not dataset.exists() and list((tmp_path / "temp").iterdir()) == []
    assert [p for p in tmp_path.iterdir() if p.name.startswith("bench-ceiling-")] == []  # nothing in the cwd
    assert left_alive(tree, 30.0) == []


def test_a_dataset_left_by_a_sigkilled_storage_ceiling_is_removed_by_the_next_run(bench, tmp_path):
    proc, dataset = _ceiling_started(bench, tmp_path)
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=HANG_GUARD_S)
    assert dataset.is_dir()  # a SIGKILL leaves it: nothing runs in the process to remove it
    live = tmp_path / "temp" / "bench-ceiling-live"  # another run's, still running (this test's pid)
    live.mkdir()
    (live / ".bench-owner").write_text(f"{os.getpid()} {psutil.Process().create_time()}\n")
    cleaned = bench.run("--clean", module="bench.tools.storage_ceiling", env=bench.env(TMPDIR=str(tmp_path / "temp")))
    assert cleaned.returncode == 0, cleaned.stderr
    assert f"removed {dataset}: a dataset left by a run that was killed" in cleaned.stderr
    assert not dataset.exists() and live.is_dir()  # a live run's dataset is its own


def test_a_storage_ceiling_root_on_a_read_only_filesystem_is_one_line(bench, tmp_path):
    import subprocess

    where = tmp_path / "ro"
    where.mkdir()
    if (
        os.geteuid() != 0
        or subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(where)], capture_output=True
        ).returncode
    ):
        pytest.skip("needs permission to mount a tmpfs (root)")
    try:
        proc = bench.run("--root", str(where / "data"), module="bench.tools.storage_ceiling")
    finally:
        subprocess.run(["umount", "-l", str(where)], capture_output=True)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert bench.error_lines(proc.stderr) == [
        f"[ERROR] --root='{where / 'data'}' is not valid: accepted a directory this user can write (made if "
        f"missing); {where} is not writable (Read-only file system)."
    ]


# ---- sweeps: no job outlives the sweep ------------------------------------------------------------------------


def test_sigkill_of_a_slurm_local_sweep_takes_its_job_down(bench, tiny, tmp_path):
    """Issue 27 §3: submitit's local controller is made to survive its session; a SIGKILLed
    slurm_local sweep left its job training. Now the controller gets SIGTERM when the sweep dies
    (PR_SET_PDEATHSIG), the job ends its run KILLED, no process stays."""
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher", reason="needs hydra-submitit-launcher (bench[slurm])")
    bench.with_store()
    proc = bench.start(
        "-m",
        *tiny,
        "hydra/launcher=slurm_local",
        "train.steps_per_epoch=100000",
        "benchmark.log_every=1",
        "seed=1,2",
        f"hydra.sweep.dir={tmp_path}/sweep",
        start_new_session=True,
    )
    bench.wait_for_line(proc, tmp_path / "sweep" / "0" / "bench.log", "step 2/")  # the first job trains
    tree = psutil.Process(proc.pid).children(recursive=True)
    assert any("submitit" in " ".join(p.cmdline()) for p in tree)  # the controller and the job
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=HANG_GUARD_S)
    assert left_alive(tree, 120.0) == []
    jobs = [r for r in bench.runs() if r.data.tags.get("sweep") != "parent"]
    # the job's run, ended by its SIGTERM; else what the job said (seen RUNNING once, on a loaded CI box)
    said = "".join(log.read_text()[-3000:] for log in (tmp_path / "sweep").glob(".submitit/*/*_log.err"))
    assert [r.info.status for r in jobs] == ["KILLED"], said
    assert not (tmp_path / "sweep" / "1").exists()
