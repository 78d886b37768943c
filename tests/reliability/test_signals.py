"""Faults survived: Ctrl-C and SIGTERM, to a single run, a DDP job, the storage benchmark and a
sweep. Each ends with exit 130 (SIGINT) or 143 (SIGTERM), one `[ERROR] run interrupted` line,
no traceback (not from a child either), no process left, and MLflow runs ended KILLED, never
left RUNNING. And `python -m bench.data prepare` stopped by SIGTERM, Ctrl-C or kill -9: no pool
worker outlives it. Waits are for events; timeouts are hang guards only."""

from __future__ import annotations

import os
import re
import signal
import time

import pytest

HANG_GUARD_S = 900
STORAGE = [
    "mode=storage",
    "storage.workload.num_files=8",
    "storage.workload.samples_per_file=4",
    "storage.workload.record_size=4096",
    "storage.workload.batch_size=4",
    "storage.workload.epochs=2",
    "storage.workload.read_threads=2",
    "storage.workload.computation_time=0.005",
    "storage.prepare_workers=2",
]
TINY = STORAGE  # the storage tests below were written against this name


@pytest.mark.parametrize("sig,status,code", [(signal.SIGTERM, "KILLED", 143), (signal.SIGINT, "KILLED", 130)])
def test_signal_ends_a_single_run_instead_of_leaving_it_running(bench, tiny, tmp_path, sig, status, code):
    bench.with_store()  # these tests are about signals, not a new store: a copy of one, no migration
    proc = bench.start(*tiny, "train.steps_per_epoch=100000", "benchmark.log_every=1", f"hydra.run.dir={tmp_path}/run")
    bench.wait_for_line(proc, tmp_path / "run" / "bench.log", "step 2/")  # the measured window is running
    proc.send_signal(sig)
    _, stderr = proc.communicate(timeout=900)  # a hang guard: the signal ends it in seconds
    assert proc.returncode == code, stderr
    assert "[ERROR] run interrupted" in stderr and "Traceback" not in stderr
    (run,) = bench.runs()
    assert run.info.status == status
    assert run.data.tags["error"]


def test_ctrl_c_to_a_ddp_job_ends_it_killed_with_130(bench, long_ddp_run):
    """Ctrl-C reaches the whole process group (launcher and workers): the run ends KILLED with
    exit 130 (issue 9: it was 143), one line, no process left."""
    bench.with_store()
    proc = long_ddp_run.start(timeout_s=3600)
    long_ddp_run.wait_for_rank1_steps()
    tree = long_ddp_run.tree
    os.killpg(proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C does
    _out, err = proc.communicate(timeout=HANG_GUARD_S)
    assert proc.returncode == 130, err
    assert bench.error_lines(err) == ["[ERROR] run interrupted: terminated by signal SIGINT"], err
    assert "Traceback" not in err and "death signal" not in err
    assert "leaked semaphore" not in err  # issue 28: a rank's tqdm lock was left to the resource tracker
    (run,) = bench.runs()
    assert run.info.status == "KILLED"
    assert long_ddp_run.left_alive(tree) == []


def test_sigterm_to_a_ddp_job_alone_ends_its_ranks_loader_workers_at_once_and_without_a_word(
    bench, long_ddp_run, datasets, tmp_path
):
    """A SIGTERM to bench's own process only (`kill PID`, a supervisor): the launcher ends the ranks,
    and each rank's DataLoader workers go with it. They were left under PID 1 with a forkserver each (a
    rank started by the elastic launcher's forkserver took it as its default start method, and torch's
    watchdog watched that forkserver); forked, they printed a finalizer's traceback each on the way."""
    bench.with_store()
    datasets.imagenet_layout(tmp_path / "images")
    folder = ("data=imagefolder", f"data.root={tmp_path / 'images'}", "data.num_classes=4", "data.num_workers=1")
    proc = long_ddp_run.start(3600, *folder)
    long_ddp_run.wait_for_rank1_steps()
    workers = [p for p in long_ddp_run.tree if p.name() == "pt_data_worker"]
    assert len(workers) == 2, long_ddp_run.tree  # one per rank, started (the event: rank 1 trained)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=HANG_GUARD_S) == 143
    left = long_ddp_run.left_alive(long_ddp_run.tree)  # before reading stderr: a survivor would hold it open
    assert left == [], [p.cmdline() for p in left]
    _out, err = proc.communicate(timeout=HANG_GUARD_S)
    assert bench.error_lines(err) == ["[ERROR] run interrupted: terminated by signal SIGTERM"], err
    assert "Traceback" not in err


# SIGTERM during the read phase, both accelerators up (the run ends 143 and KILLED, one line, no
# reader left): test_concurrency.py's test_two_storage_runs_on_one_root_..., whose first run is that
# run (its read window is where the second one is refused).


def test_sigterm_while_the_accelerators_start_leaves_no_child_traceback(bench, tmp_path):
    """Issue 9: a SIGTERM that landed while a spawned accelerator was still reading its start-up
    data left it reading half a pickle: `EOFError: Ran out of input` and a traceback on stderr.
    The signal is sent the moment the read phase begins (the racy window), three times."""
    import signal
    import time

    for attempt, delay in enumerate((0.0, 0.01, 0.03)):
        run_dir = tmp_path / f"run{attempt}"
        proc = bench.start(
            *TINY,
            "storage.accelerators=2",
            "storage.workload.epochs=1000",
            "storage.workload.checkpoint_size_mb=0",
            "tracking.enabled=false",
            f"hydra.run.dir={run_dir}",
        )
        log = run_dir / "bench.log"
        deadline = time.monotonic() + 900  # a hang guard; the event is the read phase's first line
        while proc.poll() is None and time.monotonic() < deadline and not (log.exists() and "read:" in log.read_text()):
            time.sleep(0.01)
        time.sleep(delay)
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=900)
        assert proc.returncode == 143, stderr
        assert "Traceback" not in stderr and "EOFError" not in stderr, stderr
        assert bench.error_lines(stderr) == ["[ERROR] run interrupted: terminated by signal SIGTERM"]


def test_ctrl_c_to_a_sweep_ends_it_and_its_runs_killed(bench, tiny, tmp_path):
    """Ctrl-C (SIGINT to the process group) in the middle of a multirun: the whole sweep stops
    (130), the job that was running and the sweep's parent run end KILLED, none RUNNING."""
    bench.with_store()
    proc = bench.start(
        "-m",
        *tiny,
        "train.steps_per_epoch=100000",
        "benchmark.log_every=1",
        "seed=1,2",
        f"hydra.sweep.dir={tmp_path}/sweep",
        start_new_session=True,
    )
    bench.wait_for_line(proc, tmp_path / "sweep" / "0" / "rank0.log", "step 2/")  # the first job's worker trains
    os.killpg(proc.pid, signal.SIGINT)
    out, err = proc.communicate(timeout=HANG_GUARD_S)
    assert proc.returncode == 130, err
    assert "Traceback" not in err and "radix_metrics" not in out and "leaked semaphore" not in err
    assert "[ERROR] run interrupted: terminated by signal SIGINT" in bench.error_lines(err)
    runs = bench.runs()
    assert runs and all(run.info.status == "KILLED" for run in runs), [(r.info.run_name, r.info.status) for r in runs]
    assert {run.data.tags.get("sweep") for run in runs} == {"parent", None}  # the parent and the one job
    assert not (tmp_path / "sweep" / "1").exists()  # the sweep stopped: job 1 never started


@pytest.mark.parametrize(
    "passes,sig,code",
    [
        (["benchmark.breakdown=true", "benchmark.breakdown_steps=1000"], signal.SIGTERM, 143),
        (["profile.enabled=true", "profile.steps=100", "data.image_size=64"], signal.SIGINT, 130),
        (
            ["profile.enabled=true", "profile.steps=100", "data.image_size=64", "data.batch_size=16", "mode=inference"],
            signal.SIGTERM,
            143,
        ),
    ],
    ids=["breakdown-SIGTERM", "profile-SIGINT", "inference-profile-SIGTERM"],
)
def test_signal_during_the_passes_after_the_window_still_reports_the_window(bench, tiny, tmp_path, passes, sig, code):
    """Issue 18: a signal during the breakdown pass or the profiled steps lost the window already
    measured (and took 30 s to exit, the run left RUNNING under `timeout -k 5`). Now the pass ends
    after its step, the final line and the MLflow metrics carry the window, the run ends KILLED."""
    import json

    bench.with_store()
    proc = bench.start(
        *tiny, "train.steps_per_epoch=3", "benchmark.warmup_steps=1", *passes, f"hydra.run.dir={tmp_path}/run"
    )
    started = "breakdown pass started" if "breakdown" in passes[0] else "profiling started"
    bench.wait_for_line(proc, tmp_path / "run" / "bench.log", started)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=HANG_GUARD_S)
    assert proc.returncode == code, err
    assert bench.error_lines(err) == [f"[ERROR] run interrupted: terminated by signal {sig.name}"], err
    assert "Traceback" not in err
    metrics = json.loads(out.strip().splitlines()[-1])["radix_metrics"]
    assert metrics["images_per_second"] > 0 and metrics["measured_steps"] == 3
    if "breakdown" in passes[0]:
        assert metrics.get("breakdown_steps", 0) < 1000  # the pass stopped at the signal, not at its end
    else:
        assert not (tmp_path / "run" / "trace_rank0.json").exists()  # a cut trace is not written
    (run,) = bench.runs()
    assert run.info.status == "KILLED"
    assert run.data.metrics["images_per_second"] == pytest.approx(metrics["images_per_second"])


EMPTY_LIST = (
    b'<?xml version="1.0" encoding="UTF-8"?><ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">'
    b"<Name>bench-held</Name><KeyCount>0</KeyCount><MaxKeys>1000</MaxKeys><IsTruncated>false</IsTruncated>"
    b"</ListBucketResult>"
)


def _s3_that_holds_writes(answer: bool):
    """An S3 endpoint on 127.0.0.1 that lists an empty bucket, deletes nothing and keeps the writer's owner
    object (what prepare asks before its pool starts) and holds every other PUT unanswered (`answer=False`:
    holds every request). Returns (server, endpoint, held): `held` is set once a request is being held."""
    import http.server
    import threading

    held, release = threading.Event(), threading.Event()
    owner: list = []  # the body of the PUT of <prefix>/.bench-writer.json (bench.storage.writer_lock)

    class Handler(http.server.BaseHTTPRequestHandler):
        def _hold(self) -> None:
            held.set()
            release.wait(HANG_GUARD_S)

        def do_GET(self) -> None:
            if not answer:
                return self._hold()
            body = owner[-1] if owner and self.path.endswith(".bench-writer.json") else EMPTY_LIST
            self.send_response(200)
            self.send_header("Content-Type", "application/xml")
            self.send_header("ETag", '"owner"')
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self) -> None:  # a batch delete (obstore's): nothing was there
            asked = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            deleted = b"".join(b"<Deleted>" + key + b"</Deleted>" for key in re.findall(rb"<Key>.*?</Key>", asked))
            body = b'<?xml version="1.0" encoding="UTF-8"?><DeleteResult>' + deleted + b"</DeleteResult>"
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_DELETE(self) -> None:
            self.send_response(204)
            self.end_headers()

        def do_PUT(self) -> None:
            if not self.path.endswith(".bench-writer.json"):
                return self._hold()
            owner.append(self.rfile.read(int(self.headers.get("Content-Length", 0))))
            self.send_response(200)
            self.send_header("ETag", '"owner"')
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    server.release = release  # type: ignore[attr-defined]
    return server, f"http://127.0.0.1:{server.server_address[1]}", held


@pytest.mark.parametrize(
    "how,code,during",
    [("SIGTERM", 143, "write"), ("Ctrl-C", 130, "write"), ("SIGKILL", -9, "write"), ("Ctrl-C", 130, "check")],
)
def test_a_stopped_prepare_leaves_no_worker_behind(bench, datasets, aws_env, tmp_path, how, code, during):
    """Issue 18: `timeout` (SIGTERM) of a `python -m bench.data prepare` to S3 left its pool
    workers alive under PID 1. Here the S3 endpoint holds every write (a hung server), so a worker
    is stuck in its first request when the signal comes: SIGTERM and Ctrl-C end the pool with one
    line; SIGKILL of the command takes its workers down too. Issue 33 probe: a signal while the
    command itself asks the endpoint, before any worker (`check`: an endpoint that never answers),
    was a KeyboardInterrupt traceback (SIGTERM: a death without a word)."""
    import psutil

    datasets.image_folder(tmp_path / "images", images=4)
    server, endpoint, held = _s3_that_holds_writes(answer=during == "write")
    proc = bench.start(
        "prepare",
        "--src",
        str(tmp_path / "images"),
        "--dst",
        "s3://bench-held/shards",
        "--workers",
        "1",
        "--no-progress",
        "--storage",
        f"endpoint={endpoint}",
        "--storage",
        "timeout_s=3600",
        "--storage",
        "connect_timeout_s=3600",
        "--storage",
        "max_attempts=1",
        module="bench.data",
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + HANG_GUARD_S  # the event: a pool worker's write (or the command's check) is held
        while not held.wait(0.05) and proc.poll() is None and time.monotonic() < deadline:
            pass
        assert held.is_set(), proc.communicate(timeout=60)
        children = psutil.Process(proc.pid).children(recursive=True)
        assert children or during == "check"  # the pool's worker (the one whose request is held), at least
        if how == "Ctrl-C":
            os.killpg(proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C does: the workers get it too
        else:
            proc.send_signal(getattr(signal, how))
        proc.wait(timeout=HANG_GUARD_S)  # not communicate(): a worker left alive would hold its pipes open
        _, alive = psutil.wait_procs(children, timeout=60)  # a hang guard: they go with the command
        left = [" ".join(child.cmdline()) for child in alive]
        for child in alive:
            child.kill()
        _, stderr = proc.communicate(timeout=60)
        assert not left, left
        assert proc.returncode == code, stderr
        if how != "SIGKILL":
            assert "Traceback" not in stderr, stderr
            name = "SIGINT" if how == "Ctrl-C" else how
            assert bench.error_lines(stderr) == [
                f"[ERROR] prepare stopped by {name}: its workers were ended; what "
                "was written is incomplete (a split is complete once its meta.json "
                "exists)"
            ], stderr
    finally:
        server.release.set()
        server.shutdown()
