"""Issue 28 item 3-4: nothing left behind that the next run does not clean, and the doctor's rungs
capped by the user's own run. Real directories, real (dead and live) processes, real locks."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil
import pytest

from bench.machine.children import OWNER_FILE, clean_leftovers, owned_tempdir


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_a_directory_whose_owner_died_is_removed_and_a_live_ones_kept(tmp_path):
    mine = owned_tempdir("bench-x-", str(tmp_path))
    dead = tmp_path / "bench-x-dead"
    dead.mkdir()
    (dead / OWNER_FILE).write_text(f"{_dead_pid()} 1.0\n")
    reused = tmp_path / "bench-x-reused"  # a live pid, but started at another time: not its owner
    reused.mkdir()
    (reused / OWNER_FILE).write_text(f"{os.getpid()} 1.0\n")
    unmarked = tmp_path / "bench-x-unmarked"  # not ours to judge
    unmarked.mkdir()
    assert (mine / OWNER_FILE).read_text().split()[0] == str(os.getpid())
    assert sorted(clean_leftovers("bench-x-", str(tmp_path))) == [dead, reused]
    assert mine.is_dir() and unmarked.is_dir() and not dead.exists() and not reused.exists()


def test_a_sigkilled_launchers_temp_dir_is_removed_by_the_next_launch(tmp_path, monkeypatch):
    from bench.machine.children import private_tempdir

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    left = tmp_path / "bench-launch-left"
    left.mkdir()
    (left / OWNER_FILE).write_text(f"{_dead_pid()} {psutil.Process().create_time()}\n")
    with private_tempdir():
        inside = tempfile.gettempdir()
        assert inside.startswith(str(tmp_path / "bench-launch-")) and (tmp_path / inside / OWNER_FILE).is_file()
    assert not left.exists() and not os.path.exists(inside)


# a process that makes multiprocessing's temp dir as bench does, starts the forkserver (its socket goes
# there), says where, and waits: to be killed, or to end normally when its stdin closes
FORKSERVER_USER = """
import multiprocessing.util, sys
from bench.machine.children import start_forkserver_deaf_to_ctrl_c
start_forkserver_deaf_to_ctrl_c()
print(multiprocessing.util.get_temp_dir(), flush=True)
sys.stdin.read()
"""


@pytest.mark.slow  # three processes that import bench and start a forkserver
def test_multiprocessings_temp_dir_a_sigkilled_process_left_is_removed_by_the_next_one():
    """The forkserver's socket folder (multiprocessing's own pymp-* before) outlived a SIGKILLed
    launcher or rank in /tmp for good: it is bench's, owned, and the next process that makes one there
    removes it; a live process's is kept, and one that ends normally removes its own."""
    from bench.machine.children import SHORT_TEMP_DIRS

    # a TMPDIR short enough for the socket (a pytest tmp_path is not always: the folder then goes to
    # the shortest system temp dir, as it should, not where this test looks)
    temp = Path(tempfile.mkdtemp(prefix="bench-t-", dir=next(d for d in SHORT_TEMP_DIRS if os.access(d, os.W_OK))))
    started: list = []

    def start() -> Path:
        started.append(
            subprocess.Popen(
                [sys.executable, "-c", FORKSERVER_USER],
                env={**os.environ, "TMPDIR": str(temp)},
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
        )
        made = Path(started[-1].stdout.readline().strip())  # the event: it is made
        assert made.parent == temp and made.name.startswith("bench-mp-"), made
        return made

    try:
        left = start()
        assert any(p.name.startswith("listener-") for p in left.iterdir())
        started[0].kill()
        started[0].communicate()
        assert left.is_dir()  # a SIGKILL runs no clean-up
        kept, its_own = start(), start()
        assert not left.exists() and kept.is_dir() and its_own.is_dir()
        for process in started[1:]:
            process.communicate("")  # stdin closed: it ends normally
            assert process.returncode == 0
        assert list(temp.iterdir()) == []
    finally:
        for process in started:
            process.kill()
            process.communicate()
        shutil.rmtree(temp, ignore_errors=True)


@pytest.mark.slow  # in-process, but waits out a lock: ~7 s
def test_the_store_lock_is_removed_when_released_and_still_excludes(tmp_path):
    from bench.tracking.store import removed_lock, store_lock

    with store_lock(f"sqlite:///{tmp_path / 'mlflow.db'}"):  # what open_client holds while it makes the store
        assert (tmp_path / "mlflow.db.lock").is_file()
    # no empty mlflow.db.lock left behind (issue 28); the store itself is made whole under the lock (issue 39 §7)
    assert [path.name for path in tmp_path.iterdir()] == ["mlflow.db"]
    path, inside, most = tmp_path / "x.lock", [0], [0]

    def hold() -> None:
        for _ in range(20):
            with removed_lock(path, 60):
                inside[0] += 1
                most[0] = max(most[0], inside[0])
                time.sleep(0.001)
                inside[0] -= 1

    threads = [threading.Thread(target=hold) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert most[0] == 1 and not path.exists()


def test_the_semaphores_a_launch_made_are_unlinked_once_its_owner_is_gone(tmp_path, monkeypatch):
    """A SIGKILL of the whole process group kills multiprocessing's resource tracker too, and the
    launch's /dev/shm/sem.mp-* stayed. The launch lists them in its owned directory; the next
    clean_leftovers unlinks them. A real named semaphore; the tracker's own registration is
    replaced (the tracker would remove it at this test's exit, with a warning)."""
    import _multiprocessing
    import uuid
    from multiprocessing import resource_tracker

    from bench.machine.children import semaphores_noted_in

    name = f"/mp-benchtest-{uuid.uuid4().hex[:8]}"
    semaphore = _multiprocessing.SemLock(1, 1, 1, name, False)
    on_disk = f"/dev/shm/sem.{name[1:]}"
    assert os.path.exists(on_disk)
    monkeypatch.setattr(resource_tracker, "register", lambda *_: None)
    launch = owned_tempdir("bench-y-", str(tmp_path))
    with semaphores_noted_in(launch):
        resource_tracker.register(name, "semaphore")  # what multiprocessing's SemLock calls
    (launch / OWNER_FILE).write_text(f"{_dead_pid()} 1.0\n")  # its owner was SIGKILLed
    assert clean_leftovers("bench-y-", str(tmp_path)) == [launch]
    assert not os.path.exists(on_disk)
    del semaphore


def test_an_interruption_turned_into_another_error_by_a_library_is_still_found():
    """A SIGTERM raised inside Hydra's compose came out as ConfigProblem("... '_invalidate_flags_cache'")
    (an AttributeError in a finally block, its context the interruption): storage_ceiling exited 1
    with a traceback instead of 143."""
    from bench.errors import ConfigProblem, Interrupted, interruption_in

    def compose_interrupted():
        try:
            try:
                raise Interrupted("SIGTERM")
            finally:
                None._invalidate_flags_cache()  # type: ignore[attr-defined]
        except AttributeError as exc:
            raise ConfigProblem(f"the config could not be composed: ({exc})") from None

    try:
        compose_interrupted()
    except ConfigProblem as exc:
        assert interruption_in(exc).exit_code == 143
    assert interruption_in(ConfigProblem("a real problem")) is None
    assert interruption_in(KeyboardInterrupt()).exit_code == 130


def test_a_sigterm_inside_omegaconf_keeping_its_causes_is_still_found(monkeypatch):
    """Under coverage (a tracer set) or OC_CAUSE=1 OmegaConf keeps each error's cause, and that
    chain hid the context holding the signal: a SIGTERM landing in a list's append while Hydra
    composed (its None placeholder then failing the cleanup's walk) left storage_ceiling exiting 1
    with a ConfigProblem traceback (1 signal in ~40 under .ci/coverage). A real SIGTERM, through
    sigterm_raises, landing at that point: inside the second append of a list OmegaConf builds."""
    import signal

    from omegaconf import ListConfig, OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    from bench.errors import interruption_in
    from bench.machine.children import sigterm_raises

    monkeypatch.setenv("OC_CAUSE", "1")
    set_item, appended = ListConfig._set_item_impl, []

    def signalled_in_the_second_append(self, key, value):
        appended.append(key)
        if len(appended) == 2:
            os.kill(os.getpid(), signal.SIGTERM)  # handled at the next instruction, still inside append
        return set_item(self, key, value)

    monkeypatch.setattr(ListConfig, "_set_item_impl", signalled_in_the_second_append)
    with pytest.raises(OmegaConfBaseException, match="_invalidate_flags_cache") as raised, sigterm_raises():
        OmegaConf.create({"defaults": ["a", "b"]})
    assert interruption_in(raised.value).exit_code == 143


def test_a_sigterm_swallowed_inside_a_garbage_collection_callback_is_sent_again():
    """A signal's exception raised inside a __del__ or weakref callback (SQLAlchemy's, when the GC runs)
    is printed and dropped by Python ("Exception ignored in ..."): the run went on until killed. Inside
    sigterm_raises it is sent again, and raised where the main thread is next."""
    import gc
    import signal

    from bench.errors import Interrupted
    from bench.machine.children import sigterm_raises

    class Cycle:
        def __del__(self):
            os.kill(os.getpid(), signal.SIGTERM)
            for _ in range(100_000):  # the handler runs here, inside the collection: its raise is dropped
                pass

    with sigterm_raises(), pytest.raises(Interrupted, match="SIGTERM"):
        cycle = Cycle()
        cycle.me = cycle
        del cycle
        gc.collect()
        deadline = time.monotonic() + 60  # a hang guard: the resent signal comes within moments
        while time.monotonic() < deadline:
            time.sleep(0.01)


@pytest.mark.slow  # starts a process (bench.machine.children.run_child)
def test_a_stop_taken_while_a_child_starts_lands_after_its_start_and_stops_it(stop_inside_the_next_fork):
    """run_child's Popen forks through the at-fork hooks (its preexec_fn): a SIGTERM the main thread
    handled in there was dropped by Python and cut a hook short. It is held to the fork's end, then
    raised: the child is stopped and reaped, nothing outlives the call."""
    from bench.errors import Interrupted
    from bench.machine.children import run_child, sigterm_raises

    before = {child.pid for child in psutil.Process().children()}
    raised_inside = stop_inside_the_next_fork()
    with sigterm_raises(), pytest.raises(Interrupted, match="SIGTERM"):
        run_child([sys.executable, "-c", "import time; time.sleep(300)"], grace_s=30)
    assert raised_inside == [False]
    assert {child.pid for child in psutil.Process().children()} == before


def _stuck_in_native_code(ready: str) -> None:
    """A pool task that takes a Python SIGTERM handler (as coverage's `sigterm = true` gives every
    process) and then blocks where no Python runs: a second lock of a default pthread mutex waits in
    the kernel for ever, as a worker in an S3 client's native request does."""
    import ctypes
    import signal

    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))  # never runs: the main thread is in C
    mutex = ctypes.create_string_buffer(64)  # zeroed: glibc's PTHREAD_MUTEX_INITIALIZER, a normal mutex
    libc = ctypes.CDLL(None)
    libc.pthread_mutex_lock(mutex)
    with open(ready, "w") as flag:
        flag.write("stuck\n")
    libc.pthread_mutex_lock(mutex)


@pytest.mark.slow  # starts a process (a spawn pool's worker)
def test_a_prepare_pools_worker_deaf_to_sigterm_is_killed_and_the_pool_ends(tmp_path):
    """`python -m bench.data prepare` stopped while a pool worker was inside a native S3 request, run
    under coverage (its SIGTERM handler in every process), waited for ever: the pool's terminate()
    SIGTERMs each worker and joins it. bench's pool kills a worker still there after the grace."""
    from bench.data.prepare import _pool

    ready = tmp_path / "ready"
    fired = threading.Event()
    with pytest.raises(RuntimeError, match="stopped"):
        with _pool(1) as pool:
            pool.apply_async(_stuck_in_native_code, (str(ready),))
            deadline = time.monotonic() + 300  # a hang guard; the event: the worker is in its task
            while not ready.exists() and time.monotonic() < deadline:
                time.sleep(0.05)
            assert ready.exists()
            worker = psutil.Process(pool._pool[0].pid)
            # a hang guard that fails the test: without bench's kill, the pool would wait for ever
            guard = threading.Timer(300, lambda: (fired.set(), worker.kill()))
            guard.daemon = True
            guard.start()
            raise RuntimeError("stopped")
    guard.cancel()
    assert not fired.is_set(), "the pool waited for its stuck worker until the test's guard killed it"
    assert not worker.is_running() or worker.status() == psutil.STATUS_ZOMBIE
