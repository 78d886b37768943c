"""Helper processes that must not outlive the command that started them, the temporary
directories a killed command leaves (the leftovers, below), and how a command's own process ends
(exit_without_teardown)."""

from __future__ import annotations

import atexit
import ctypes
import functools
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from contextlib import contextmanager, nullcontext, suppress
from pathlib import Path
from typing import Any, Callable, Iterator, List, NoReturn, Optional, Sequence, Tuple

import psutil

from bench.errors import Interrupted

STOP_SIGNALS = frozenset({signal.SIGINT, signal.SIGTERM})  # Ctrl-C and a scheduler's or kill's stop


def process_identity(pid: int) -> Optional[Tuple[int, float]]:
    """(pid, start time) of a live process, None when there is none (or only a zombie): a pid the
    system gave to another process since is told apart by its start time."""
    with suppress(psutil.Error):
        process = psutil.Process(pid)
        return None if process.status() == psutil.STATUS_ZOMBIE else (pid, process.create_time())
    return None


def die_with_parent(parent: int, signum: int = signal.SIGKILL, ctrl_c: bool = False) -> None:
    """In a child process: the kernel sends it `signum` when its parent dies (PR_SET_PDEATHSIG, Linux;
    elsewhere the parent's SIGTERM / Ctrl-C handling still ends it), and Ctrl-C (sent to the whole
    process group) is the parent's to handle, unless `ctrl_c`."""
    if not ctrl_c:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    with suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, signum)  # PR_SET_PDEATHSIG
    if os.getppid() != parent:  # the parent died before prctl took effect
        os._exit(1)


def reap(pid: int, deadline: float) -> None:
    """Wait for a child process to exit, killing it at `deadline` (a time.monotonic() value)."""
    try:
        handle = os.pidfd_open(pid)  # readable once the process has exited (Linux 5.3+)
    except (AttributeError, OSError):
        handle = None
    try:
        while not os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT):
            left = deadline - time.monotonic()
            if left <= 0:
                os.kill(pid, signal.SIGKILL)
                break
            if handle is not None:
                select.select([handle], [], [], left)
            else:
                time.sleep(min(left, 0.001))
    finally:
        if handle is not None:
            os.close(handle)
    os.waitpid(pid, 0)


# How long a child ended by its parent gets to close its MLflow run before it is killed.
CHILD_GRACE_S = 10.0


def _die_with_parent_on_exec(parent: int) -> Callable[[], None]:
    """preexec_fn for a `python -m bench` child: SIGTERM when the parent dies, even by SIGKILL, so the
    child ends its run KILLED instead of measuring on for nobody."""
    return functools.partial(die_with_parent, parent, signal.SIGTERM, ctrl_c=True)


def run_child(
    argv: Sequence[str], *, timeout: Optional[float] = None, grace_s: float = CHILD_GRACE_S, **popen: Any
) -> "subprocess.CompletedProcess[str]":
    """subprocess.run for a command that must not outlive this process: its stdout and stderr
    captured as text; the child gets SIGTERM if this process dies (SIGKILL included), and when this
    process is interrupted (Ctrl-C, or SIGTERM raised as bench.errors.Interrupted) or the timeout
    passes, the child is sent SIGTERM, given `grace_s`, then killed, before the exception goes on."""
    on_exec = _die_with_parent_on_exec(os.getpid())
    proc: Optional["subprocess.Popen[str]"] = None
    try:
        with stops_held_over_fork():  # preexec_fn: Popen forks through the at-fork hooks
            proc = subprocess.Popen(
                list(argv), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=on_exec, **popen
            )
        out, err = proc.communicate(timeout=timeout)
    except BaseException:
        if proc is not None and proc.poll() is None:  # SIGTERM (it marks its runs KILLED), SIGKILL after grace_s
            with suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(grace_s)
            except subprocess.TimeoutExpired:
                with suppress(ProcessLookupError):
                    proc.kill()
                proc.wait()  # reaped either way
        raise
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


class _StopsHeld:
    """`with STOPS_HELD:` a Ctrl-C or SIGTERM that lands inside the block is raised as the block ends,
    so a few lines of bookkeeping run whole (a storage read's parent taking its readers' records).
    It holds what sigterm_raises' handlers raise, and costs no system call: pthread_sigmask costs
    ~4 µs a block, and a read takes every record through one."""

    depth, landed = 0, 0  # blocks open now; the stop that landed inside them (0: none)

    def __enter__(self) -> None:
        self.depth += 1

    def __exit__(self, *_exc: Any) -> None:
        self.depth -= 1
        if not self.depth and (signum := self.landed):
            self.landed = 0
            _raise_stop(signum, None)


STOPS_HELD = _StopsHeld()


def stops_held_over_fork() -> Any:
    """`with stops_held_over_fork():` around a fork (os.fork, or a Popen with preexec_fn) in the main
    thread. A stop whose C-level handler ran in another thread (an MLflow or a watch thread) is raised by
    the main thread's next bytecode, which may be inside os.fork's at-fork hooks: Python drops it there
    (issue 28) and that hook is cut short (logging's or concurrent.futures' lock, taken before the fork,
    stays held: the next fork from another thread waits for good). Held, it lands after the fork. Only
    the main thread runs handlers: elsewhere there is nothing to hold (and STOPS_HELD would hand a stop
    the main thread took to this one)."""
    return STOPS_HELD if threading.current_thread() is threading.main_thread() else nullcontext()


def _raise_stop(signum: int, _frame: Any) -> None:
    if STOPS_HELD.depth:
        STOPS_HELD.landed = signum
        return
    if signum == signal.SIGINT:
        raise KeyboardInterrupt
    raise Interrupted(signal.Signals(signum).name)


@contextmanager
def sigterm_raises() -> Iterator[None]:
    """In a command's main thread: SIGTERM raises bench.errors.Interrupted (as Ctrl-C raises
    KeyboardInterrupt), so `finally` blocks run, children are stopped and runs are marked; both
    wait for the end of a STOPS_HELD block. A signal whose exception Python swallows (raised inside
    a garbage-collection callback, such as SQLAlchemy's: "Exception ignored in ...") is sent again,
    so it is never lost."""
    import sys

    def _resend(unraisable: Any) -> None:
        stop = unraisable.exc_value
        if isinstance(stop, Interrupted) and hasattr(stop, "raise_again"):  # its own way (the doctor's timer)
            return stop.raise_again()
        signum = {Interrupted: signal.SIGTERM, KeyboardInterrupt: signal.SIGINT}.get(type(stop))
        if signum is None:
            return hook(unraisable)
        # from another thread, a moment later: the main thread is out of the callback by then
        threading.Timer(0.05, os.kill, (os.getpid(), signum)).start()

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous, hook = {signal.SIGTERM: signal.signal(signal.SIGTERM, _raise_stop)}, sys.unraisablehook
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:  # not where Ctrl-C is ignored
        previous[signal.SIGINT] = signal.signal(signal.SIGINT, _raise_stop)
    sys.unraisablehook = _resend
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        sys.unraisablehook = hook


@contextmanager
def stop_signals(how: int) -> Iterator[None]:
    """Ctrl-C and SIGTERM held inside the block (how=signal.SIG_BLOCK: they land as it ends), or let
    through inside a held one (SIG_UNBLOCK)."""
    before = signal.pthread_sigmask(how, STOP_SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)


@contextmanager
def stop_proof_folder(prefix: str) -> Iterator[str]:
    """A temporary folder a Ctrl-C or SIGTERM cannot leave behind: made, and removed, with both held.
    tempfile.TemporaryDirectory left its folder when one landed between mkdtemp and the `with`, or
    inside the removal (a kit stopped while resolving, on a loaded machine)."""
    with stop_signals(signal.SIG_BLOCK):
        path = tempfile.mkdtemp(prefix=prefix)
        try:
            with stop_signals(signal.SIG_UNBLOCK):
                yield path
        finally:
            shutil.rmtree(path, ignore_errors=True)


# ---- How a command's process ends


def exit_without_teardown(main: Callable[[], Any]) -> NoReturn:
    """The end of a `python -m <module>` command (its `if __name__ == "__main__":` block): run `main`
    (its return value, or SystemExit's, is the exit code), then end this process as the interpreter
    does - threads joined, exit handlers run (logging's, MLflow's, multiprocessing's, bench's own),
    stdout and stderr flushed (a reader gone: the interpreter's line and exit code 120) - but without
    the interpreter's last stage, which frees every object of every module one by one: torch's,
    MLflow's and Hydra's, each page of them written to once more (and first copied, in a process forked
    from one that had imported them): ~0.2 CPU-s of a fresh bench process, ~0.3 of a forked one, after
    its work was done. Everything a command writes is closed or flushed by then. An uncaught exception,
    an exit status that is not a number, and a module run inside another program's process (sys.orig_argv
    names another command: a test's runpy) take Python's own way out."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)  # None: run as a script's path
    module = spec.name.removesuffix(".__main__") if spec is not None else None
    argv = sys.orig_argv
    started_as_module = "-m" in argv and argv[argv.index("-m") + 1 :][:1] == [module]
    try:
        code = main()
    except SystemExit as exc:
        code = exc.code
    if not started_as_module or not (code is None or isinstance(code, int)):
        sys.exit(code)
    threading._shutdown()  # type: ignore[attr-defined]  # Py_FinalizeEx's steps before the teardown, in order
    atexit._run_exitfuncs()
    _flush_then_exit(code or 0)


def _flush_then_exit(status: int) -> NoReturn:  # pragma: no cover
    """stdout then stderr flushed as the interpreter flushes them at its exit, then os._exit. Run after
    every exit handler, coverage.py's own among them, which stopped its measurement: it cannot see these
    lines (their test: tests/unit/test_exit_without_teardown.py, each case an exit through here)."""
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None and not stream.closed:
                stream.flush()
        except Exception as exc:  # a reader gone: the interpreter's line and its exit code
            status = 120
            if stream is sys.stdout:
                with suppress(Exception):
                    sys.stderr.write(f"Exception ignored in: {stream!r}\n")
                    sys.stderr.write("".join(traceback.format_exception_only(type(exc), exc)))
                    sys.stderr.flush()
    os._exit(status)


# ---- The elastic launcher's helpers (bench.launch.launchers): its forkserver, which must not outlive this
# process either, and the temporary directories a launch makes (leftovers too, below).
def start_forkserver_deaf_to_ctrl_c() -> None:
    """Start multiprocessing's forkserver (if it is not running) with SIGINT ignored, as it would
    ignore it itself once its preload imports are done: a Ctrl-C to the process group while it
    imports torch printed a KeyboardInterrupt traceback from it (issue 28). It exits when this
    process does (EOF on its pipe) or, while it still imports, when this one exits (killed at exit:
    it was left importing torch for seconds after an interrupted command); its workers take SIGINT
    back (bench.launch.launchers.worker_entry)."""
    import atexit
    from multiprocessing import forkserver

    make_multiprocessing_temp_dir()  # the forkserver's socket goes there: a short enough path first
    if threading.current_thread() is not threading.main_thread():
        forkserver.ensure_running()
    else:
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            forkserver.ensure_running()
        finally:
            signal.signal(signal.SIGINT, previous)
    if (pid := getattr(forkserver._forkserver, "_forkserver_pid", None)) and pid not in _FORKSERVERS_KILLED_AT_EXIT:
        _FORKSERVERS_KILLED_AT_EXIT.add(pid)
        atexit.register(_kill_quietly, pid)


_FORKSERVERS_KILLED_AT_EXIT: set = set()


def _kill_quietly(pid: int) -> None:
    with suppress(OSError):
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)


# A Unix socket's path holds at most 107 bytes; the forkserver's is <tempdir>/bench-mp-XXXXXXXX/listener-XXXXXXXX.
SOCKET_PATH_MAX = 107
MULTIPROCESSING_PREFIX = "bench-mp-"
SOCKET_SUFFIX = len(f"/{MULTIPROCESSING_PREFIX}xxxxxxxx/listener-xxxxxxxx")
SHORT_TEMP_DIRS = ("/tmp", "/var/tmp", "/dev/shm")  # where multiprocessing's temp dir goes when $TMPDIR is too long


def make_multiprocessing_temp_dir() -> None:
    """multiprocessing's temp dir (the forkserver's socket goes there), made before multiprocessing
    makes its own `pymp-*`: removed at exit as that one is, but owned, so that the one a SIGKILLed
    process left (a launcher, a rank) is removed by the next one made there, as a launch's are; under
    $TMPDIR unless that is too long to hold the socket ("OSError: AF_UNIX path too long" from every
    rank), then under the shortest system temp dir that is writable."""
    import multiprocessing.util as mp_util

    state = mp_util.process.current_process()._config  # type: ignore[attr-defined]
    if state.get("tempdir") is None:  # (else made already, and reused as multiprocessing reuses its own)
        parent = tempfile.gettempdir()
        if len(parent) + SOCKET_SUFFIX > SOCKET_PATH_MAX:
            parent = next((d for d in SHORT_TEMP_DIRS if os.access(d, os.W_OK | os.X_OK)), parent)
        clean_leftovers(MULTIPROCESSING_PREFIX, parent)
        state["tempdir"] = str(owned_tempdir(MULTIPROCESSING_PREFIX, parent))
        # what multiprocessing registers for its own: run at this process's exit, not its forks'
        remove = mp_util._remove_temp_dir  # type: ignore[attr-defined]
        mp_util.Finalize(None, remove, args=(shutil.rmtree, state["tempdir"]), exitpriority=-100)


LAUNCH_PREFIX = "bench-launch-"


@contextmanager
def private_tempdir() -> Iterator[None]:
    """torch.multiprocessing names a `pytorch-errorfile-*.pickle` per worker in the launcher's temp
    directory; a worker that raises writes its traceback there and nothing removes it: $TMPDIR
    filled with tracebacks of failed runs. During the launch the launcher's tempfile directory is
    one of its own, removed afterwards; one left by a SIGKILLed launcher (its owner file names a
    pid that is gone) is removed by the next launch. multiprocessing's temp dir (`bench-mp-*`: the
    forkserver's socket, reused by later sweep jobs) is made first, beside this one, so it outlives
    it."""
    make_multiprocessing_temp_dir()
    clean_leftovers(LAUNCH_PREFIX)
    private = owned_tempdir(LAUNCH_PREFIX)
    previous, tempfile.tempdir = tempfile.tempdir, str(private)
    try:
        with semaphores_noted_in(private):  # the launch's /dev/shm/sem.mp-*, for after a SIGKILL
            yield
    finally:
        tempfile.tempdir = previous
        shutil.rmtree(private, ignore_errors=True)


# ---- leftovers: Temporary directories that a killed command cannot remove itself, removed by the next one.
#
# `owned_tempdir(prefix)` makes `<system temp dir>/<prefix>XXXXXXXX` with an owner file in it
# (`.bench-owner`: the pid and its start time). A command removes its own directory when it ends
# (Ctrl-C and SIGTERM included); after a SIGKILL, the next command that makes one of the same
# kind calls `clean_leftovers(prefix)` first, which removes every such directory whose owner is
# gone (no process with that pid, or one started at another time: a reused pid). A directory
# without an owner file, or whose owner runs, is left alone.
#
# `semaphores_noted_in(path)`: the named semaphores multiprocessing makes meanwhile (the elastic
# launcher's, /dev/shm/sem.mp-*) are listed in the directory. multiprocessing's resource tracker
# removes them when their maker dies, but a SIGKILL of the whole process group kills the tracker
# too: the next clean_leftovers unlinks those its dead owner listed.
OWNER_FILE = ".bench-owner"
SEMAPHORES_FILE = ".bench-semaphores"


def owned_tempdir(prefix: str, parent: Optional[str] = None) -> Path:
    """A new directory under `parent` (default: the system temp dir), marked as this process's."""
    path = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
    (path / OWNER_FILE).write_text(f"{os.getpid()} {psutil.Process().create_time()}\n")
    return path


def owner_gone(path: Path) -> bool:
    """Is the directory's owner (its owner file) no longer running? False without an owner file."""
    with suppress(OSError, ValueError):  # no owner file, or not one of ours
        pid, started = (path / OWNER_FILE).read_text().split()[:2]
        return process_identity(int(pid)) != (int(pid), float(started))
    return False


def clean_leftovers(prefix: str, parent: Optional[str] = None) -> List[Path]:
    """Remove the `prefix*` directories under `parent` (default: the system temp dir) whose owner
    is gone; the paths removed."""
    base = Path(parent or tempfile.gettempdir())
    removed: List[Path] = []
    with suppress(OSError):  # a temp dir that cannot be listed: nothing to clean
        for path in sorted(base.glob(prefix + "*")):
            if path.is_dir() and not path.is_symlink() and owner_gone(path):
                _unlink_semaphores(path / SEMAPHORES_FILE)
                shutil.rmtree(path, ignore_errors=True)
                if not path.exists():
                    removed.append(path)
    return removed


@contextmanager
def semaphores_noted_in(path: Path) -> Iterator[None]:
    """While inside: every named semaphore this process registers with multiprocessing's resource
    tracker is also listed in `path`/.bench-semaphores (for clean_leftovers after a SIGKILL)."""
    from multiprocessing import resource_tracker

    registered = resource_tracker.register

    def register(name: Any, rtype: str) -> None:
        if rtype == "semaphore":
            with suppress(OSError), (path / SEMAPHORES_FILE).open("a") as listed:
                listed.write(f"{name}\n")
        registered(name, rtype)

    resource_tracker.register = register
    try:
        yield
    finally:
        resource_tracker.register = registered


def _unlink_semaphores(listed: Path) -> None:
    import _multiprocessing

    with suppress(OSError):  # no list: none were made
        for name in listed.read_text().split():
            with suppress(OSError):
                _multiprocessing.sem_unlink(name)  # gone already (the tracker removed it): nothing to do
