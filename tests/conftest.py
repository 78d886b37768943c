"""Fixtures for the whole suite.

- `bench`: runs `python -m bench ...` (or another module) as a real process in the test's own
  directory, whose default MLflow store is that directory's mlflow.db; reads back its final
  line and its MLflow runs. `bench.run` forks the process from a server that has torch, mlflow
  and hydra imported already (tests/forked_bench.py: a fresh `python -m` in all a test can see,
  without 4.5 CPU-seconds of imports each); `fresh=True`, or BENCH_TEST_FORK=0 for the whole
  run, makes it a real exec. `bench.start` forks the same way without waiting (Popen's handle).
- `tiny`: the overrides of a small, fast CPU training run.
- `compose`: the typed config `python -m bench <overrides>` would run, built in-process.
- `datasets`: tiny real datasets written in the test (JPEG image folders, CIFAR-100 files).
- `s3_server`: moto's S3 server on 127.0.0.1 (real HTTP, real signing), one per test module.

A test that starts a process, a server or a browser is marked `slow` automatically, wherever it
lives (_is_slow below); `-m "not slow"` is the fast tier, and in it a test that starts one anyway
fails, saying so (a process; a test whose processes start deep inside bench's code carries
`@pytest.mark.slow` itself, as does an in-process test function whose cases cost over ~1.4 CPU-s
together, with its cost: docs/testing.md). Tests marked `gpu` need CUDA and skip without it. Waits are for
events (a log line, a file, a process state); timeouts are hang guards only, long enough for a
loaded machine.
"""

from __future__ import annotations

import contextlib
import gc
import getpass
import json
import os
import pickle
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, Iterator, List, Optional, Sequence

import forked_bench
import pytest

REPO = Path(__file__).resolve().parents[1]
# The test modules' assertion rewriting (~9 CPU-s of each worker's collection) is cached in their
# __pycache__ only where bytecode may be written, and this machine's image sets PYTHONDONTWRITEBYTECODE:
# this process writes it (its children keep the environment's setting; bench's own bytecode is
# written once for them by compile_bench_once).
sys.dont_write_bytecode = False
# In-process tests too: one torch thread (read when torch first loads, which is after this file).
# Three pytest workers on 2 cores with torch's default of a thread per core spin against each other.
os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = "1"
# scikit-learn's import (bench.data.digits) and joblib's set these in os.environ (setdefault, these values):
# set from the start, or after the first in-process test that imports them the worker's environment
# differs from its fork server's and every later `bench.run` of that worker is exec'd, not forked
# (~3.6 CPU-s more each: 10 to 20 commands in a whole-suite run, all of test_run.py's among them)
os.environ.setdefault("KMP_DUPLICATE_LIB_OK", "True")
os.environ.setdefault("KMP_INIT_AT_FORK", "FALSE")
# torch._dynamo's import (torchvision's brings it) sets this, to this default: set from the start too, or the
# start-environment guard blames the first test of a worker that imports torchvision (running one file)
os.environ.setdefault(
    "TORCHINDUCTOR_CACHE_DIR", os.path.join(tempfile.gettempdir(), f"torchinductor_{getpass.getuser()}")
)
HANG_GUARD_S = 900  # a run that takes longer than this is stuck, however loaded the machine

# Small, fast, CPU: every e2e training run in the suite builds on this. bench's own 4-layer CNN, not
# a torchvision ResNet: after the fork server's imports a tiny resnet18 run costs ~1.3 CPU-s and a
# small_cnn one ~0.8 (the ResNet's init, FLOPs count and 45 MB checkpoints), over ~300 runs. The
# torchvision path keeps its own tests: the README's cpu_smoke runs, DDP, resume, a full disk,
# inference and the presets name resnet18 or resnet50 themselves.
TINY = [
    "+experiment=cpu_smoke",
    "model=small_cnn",
    "data.image_size=32",
    "data.batch_size=4",
    "data.num_classes=10",
    "train.epochs=1",
    "train.steps_per_epoch=3",
    "benchmark.warmup_steps=1",
    "benchmark.progress=false",
]

# Fake, but distinctive: the no-secret-in-any-output tests grep for this value.
S3_SECRET = "bench-test-secret-9f3c2e71d4"
S3_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "benchtestkey",
    "AWS_SECRET_ACCESS_KEY": S3_SECRET,
    "AWS_DEFAULT_REGION": "us-east-1",
}


def pytest_configure(config):
    if os.environ.get("BENCH_TEST_FORK_LOG"):
        config.pluginmanager.register(CpuPerTest())
    """A test run started in the background by a non-interactive shell (`bash .ci/run &`, nohup)
    inherits SIGINT ignored, and an ignored signal stays ignored across exec: every bench process
    the tests start would shrug off Ctrl-C. The tests that send it need SIGINT back; a handled
    signal reverts to its default in the children.

    pytest-xdist hands out the files with the most tests first, whatever order the collection
    has (--dist loadfile; since 3.5): the long e2e files, a few tests each, started last and were
    the suite's tail. From 3.8 that reordering can be turned off, so LONGEST_FIRST is the order."""
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if getattr(config.option, "loadscopereorder", None) is not None:
        config.option.loadscopereorder = False
    if not hasattr(config, "workerinput"):  # once, in the controller, before any worker imports bench
        compile_bench_once()
        build_matplotlib_font_cache_once()


def compile_bench_once() -> None:
    """bench's bytecode written once for the hundreds of processes the suite starts: where
    PYTHONDONTWRITEBYTECODE is set (this machine's image sets it) each would otherwise compile the
    ~85 modules a run imports from source (~0.35 CPU-s each); a fresh clone has no __pycache__.
    py_compile writes whatever that variable says, and a stale file is never read (its source's
    mtime is in it)."""
    import compileall

    for package in (REPO / "bench", REPO / "launchers" / "hydra_plugins"):
        compileall.compile_dir(str(package), quiet=2, workers=1)


def build_matplotlib_font_cache_once() -> None:
    """matplotlib lists the machine's fonts on its first plot and keeps the list in its cache folder;
    making it runs `fc-list`. On a fresh machine that process started inside the first test that
    plots, which the fast tier fails ("starts a process"): 24 tests failed with a fresh HOME."""
    import matplotlib

    if not any(Path(matplotlib.get_cachedir()).glob("fontlist-*.json")):
        import matplotlib.font_manager  # builds the list and saves it


def pytest_collection_finish(session):
    """What the imports and the collection made lives as long as the worker: frozen, each later
    collection (~15 full ones a worker in the fast tier, pytest's 5 at the session's end) skips it
    instead of walking the millions of objects torch, mlflow and hydra hold."""
    gc.collect()
    gc.freeze()


def pytest_xdist_auto_num_workers(config) -> int:
    """`-n auto` (pyproject's addopts): the fast tier is all in-process computing, a worker per usable
    core (2 on 2 cores: a third only added its ~10 CPU-s of imports); the whole suite one more, since
    most of an e2e test is waiting on the process or server it started (3 on 2 cores: 4 was 6% slower).
    At most 8: each worker holds torch and its tests' processes in memory."""
    cores = len(os.sched_getaffinity(0))
    fast_tier = "not slow" in (config.getoption("markexpr", "") or "")
    return min(8, cores if fast_tier else cores + 1)


def pytest_unconfigure(config):
    """This process's fork server (tests/forked_bench.py), if it started one, ends with it."""
    forked_bench.stop()


# The files that take longest (real Slurm jobs, DDP, servers, mypy), started first, longest first:
# pytest-xdist hands a worker a whole file at a time (--dist loadfile), so a long file begun last is
# the suite's tail. In the order of their measured totals (`--durations`, summed per file, 2026-11-27:
# test_slurm 110 s, test_tracking_faults 93 s ... test_concurrency 23 s); a long unit file (gpu_check's
# CPU rehearsal) is named too, or it would start among the last.
LONGEST_FIRST = (
    "test_slurm",
    "test_slurm_cancel",
    "test_slurm_scripts",
    "test_tracking_faults",
    "test_sweep",
    "test_signals",
    "test_dead_processes",
    "test_measure_deeper_runs",
    "test_accuracy",
    "test_disk_faults",
    "test_doctor",
    "test_resume",
    "test_compare_rerun_runs",
    "test_gpu_check",
    "test_canaries",
    "test_distributed",
    "test_storage_benchmark",
    "test_offline_kit",
    "test_toy_scenario",
    "test_concurrency",
    "test_storage_mlperf_runs",
    "test_data",
    "test_static_checks",
    "test_bad_inputs_config",
    "test_waits",
    "test_run",
    "test_storage_objects",
    "test_bad_inputs_preflight",
)


# Then the in-process files that take longest (the fast tier's own tail), in the order of their
# totals in the fast tier (BENCH_TEST_FORK_LOG, 2026-12-02: test_train_parts 20 CPU-s ... test_layout 6.5).
LONGEST_IN_PROCESS = (
    "test_train_parts",
    "test_config",
    "test_tracking",
    "test_accuracy_parts",
    "test_analysis",
    "test_layout",
)


def _start_order(item) -> tuple:
    path = Path(str(item.fspath))
    if path.stem in LONGEST_FIRST:
        return (0, LONGEST_FIRST.index(path.stem))
    if {"e2e", "reliability"} & set(path.parts):
        return (1, 0)
    return (2, LONGEST_IN_PROCESS.index(path.stem)) if path.stem in LONGEST_IN_PROCESS else (3, 0)


# What makes a test `slow` is what it does, not its folder: it starts a process (`python -m bench`, a
# type checker, a linter, git, mount), a server (moto, `mlflow server`, http on loopback) or a browser.
# A test is marked when it uses a fixture that does (directly or through another fixture), or when
# its own code, a fixture's, or a helper of its module calls one of these (SLOW_CALLS).
SLOW_FIXTURES = frozenset(
    {
        "bench",
        "bench_at",
        "long_ddp_run",
        "s3_server",
        "mlflow_servers",
        "module_mlflow_server",
        "browser",
        "slurm",
        "silent_server",
    }
)
SLOW_CALLS = {
    "subprocess": {"run", "Popen", "check_call", "check_output", "call", "getoutput", "getstatusoutput"},
    "multiprocessing": {"Process", "Pool", "get_context"},
    "os": {"fork", "system", "posix_spawn", "spawnv", "execv", "execvp"},
}
SLOW_NAMES = frozenset({"ProcessPoolExecutor", "ThreadingHTTPServer", "HTTPServer", "ThreadedMotoServer", "Popen"})


def _code_names(code) -> set:
    names = set(code.co_names)
    for const in code.co_consts:
        if hasattr(const, "co_names"):
            names |= _code_names(const)
    return names


def _starts_something(func, seen: set) -> bool:
    """`func`'s code (or a function of its own module that it names) calls what SLOW_CALLS lists."""
    func = getattr(func, "__wrapped__", func)
    code = getattr(func, "__code__", None)
    if code is None or func in seen:
        return False
    seen.add(func)
    names = _code_names(code)
    if names & SLOW_NAMES or any(module in names and names & calls for module, calls in SLOW_CALLS.items()):
        return True
    module_globals = getattr(func, "__globals__", {})
    return any(
        _starts_something(module_globals[name], seen)
        for name in names
        if callable(module_globals.get(name)) and getattr(module_globals[name], "__module__", None) == func.__module__
    )


def _is_slow(item) -> bool:
    if item.get_closest_marker("slow") or SLOW_FIXTURES & set(getattr(item, "fixturenames", ())):
        return True
    seen: set = set()
    funcs = [getattr(item, "function", None)]
    for defs in getattr(getattr(item, "_fixtureinfo", None), "name2fixturedefs", {}).values():
        funcs += [d.func for d in defs if "_pytest" not in getattr(d.func, "__module__", "_pytest")]
    return any(_starts_something(func, seen) for func in funcs if func is not None)


def pytest_collection_modifyitems(config, items):
    """`slow` by what a test does (_is_slow); `gpu` tests need a real CUDA device (skipped, not
    failed, without one). Longest files first, then the other process-starting files, then the
    in-process unit tests (the longest of those first too)."""
    import torch

    items.sort(key=_start_order)  # stable: a file's tests keep their order

    skip_gpu = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if _is_slow(item):
            item.add_marker(pytest.mark.slow)
        if "gpu" in item.keywords and not torch.cuda.is_available():
            item.add_marker(skip_gpu)


def _at_fork_locks() -> Dict[str, object]:
    """The locks Python's own modules take around every fork (os.register_at_fork: taken before it,
    released after it in the parent): one left held makes the next fork from another thread, or that
    module's next use there, wait for good."""
    import concurrent.futures.thread
    import logging

    return {
        "logging's module lock": logging._lock,  # type: ignore[attr-defined]
        "concurrent.futures' shutdown lock": concurrent.futures.thread._global_shutdown_lock,  # type: ignore[attr-defined]
    }


@pytest.fixture(autouse=True)
def at_fork_locks_left_free():
    """A test that leaves one of those locks held fails, named, and the lock is freed: a CI run hung
    (2026-11-30) in a later, innocent test of the same worker, whose reader forked from a thread. The
    main thread's own hold does not show in its later forks (logging's lock is an RLock): it is asked
    by name. Another thread's brief hold is waited out (a minute: they are held for microseconds)."""
    yield
    held = []
    for name, lock in _at_fork_locks().items():
        owned_here = getattr(lock, "_is_owned", lambda: False)()
        if owned_here or not lock.acquire(timeout=60):
            held.append(name)
            lock._at_fork_reinit()  # type: ignore[attr-defined]
        else:
            lock.release()
    assert not held, f"the test left {' and '.join(held)} held (a fork's or the module's own release was cut short)"


# the stop signals' handlers: one a test leaves behind is inherited by every later fork of its worker
HANDLED_STOPS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGALRM)


@pytest.fixture(autouse=True)
def stop_handlers_left_as_found():
    """A test (or the bench code it calls in-process) that leaves a stop signal's handler changed fails,
    named, and the handler is put back: a serial run hung 20 minutes (2026-12-01) in a later, innocent
    test whose fork Pool ends its workers by SIGTERM, because bench.tools.kit's main had left SIGTERM
    raising KeyboardInterrupt (a worker interrupted inside the pool's queue lock never exits)."""
    found = {signum: signal.getsignal(signum) for signum in HANDLED_STOPS}
    yield
    changed = [signal.Signals(signum).name for signum, handler in found.items() if signal.getsignal(signum) != handler]
    for signum, handler in found.items():
        signal.signal(signum, handler)
    assert not changed, f"the test left the handler of {' and '.join(changed)} changed"


@pytest.fixture(autouse=True)
def trace_function_left_as_found():
    """A test that leaves the trace function changed fails, named, and it is put back: three tests
    that hook `sys.settrace` ended with `sys.settrace(None)`, which removed coverage's tracer, so under
    `bash .ci/coverage` every in-process test after them in that worker went unmeasured (GpuWatch,
    the kit's refusals, the storage formats: 227 lines missing from one whole-suite run, 2026-12-03)."""
    found = sys.gettrace()
    yield
    left = sys.gettrace()
    sys.settrace(found)
    assert left is found, f"the test left the trace function changed ({left!r}, was {found!r})"


def _read_at_start(name: str) -> bool:
    """A variable the interpreter or a C library reads when a process starts (forked_bench's list)."""
    names = forked_bench.UNSAFE_NAMES | forked_bench.TEMP_DIR_NAMES  # (a test's own TMPDIR leaks into later tests)
    return name in names or name.startswith(forked_bench.UNSAFE_PREFIXES)


@pytest.fixture(autouse=True)
def start_environment_left_as_found():
    """A test (or the code it calls in-process, or a library it imports first) that leaves a variable
    read at a process's start changed in os.environ fails, named, and the variable is put back: every
    later `bench.run` of its worker would be exec'd instead of forked (the fork server's environment
    differs: ~3.6 CPU-s more each; 20 commands in one whole-suite run, 2026-12-01)."""
    found = {name: value for name, value in os.environ.items() if _read_at_start(name)}
    yield
    now = {name: value for name, value in os.environ.items() if _read_at_start(name)}
    changed = sorted(name for name in found.keys() | now.keys() if found.get(name) != now.get(name))
    for name in changed:
        if name in found:
            os.environ[name] = found[name]
        else:
            del os.environ[name]
    assert not changed, f"the test left {', '.join(changed)} changed in os.environ"


_ARMED_FORK_STOPS: List[list] = []  # while a test has one armed: the list its fork's stop notes into
_FORK_HOOK_REGISTERED = False  # once a worker: an at-fork hook cannot be taken back


def _a_stop_in_the_fork_hooks() -> None:
    if _ARMED_FORK_STOPS and threading.current_thread() is threading.main_thread():
        noted = _ARMED_FORK_STOPS.pop()
        noted.append(True)  # raised inside the hooks, unless the handler returns (held)
        signal.getsignal(signal.SIGTERM)(signal.SIGTERM, None)
        noted[-1] = False


@pytest.fixture
def stop_inside_the_next_fork() -> Iterator[Callable[[], list]]:
    """`raised = stop_inside_the_next_fork()`: the main thread's next fork (os.fork, or a Popen with
    preexec_fn) calls the SIGTERM handler inside its at-fork hooks, as the main thread does when another
    thread took the signal during the fork; `raised` then says whether the handler raised in there."""
    global _FORK_HOOK_REGISTERED
    if not _FORK_HOOK_REGISTERED:
        os.register_at_fork(after_in_parent=_a_stop_in_the_fork_hooks)
        _FORK_HOOK_REGISTERED = True

    def arm() -> list:
        noted: list = []
        _ARMED_FORK_STOPS[:] = [noted]
        return noted

    yield arm
    _ARMED_FORK_STOPS.clear()


class CpuPerTest:
    """With BENCH_TEST_FORK_LOG=<file>: a line per test with its wall seconds and CPU seconds - the
    pytest worker's own, the children it waited for, and the fork server's children - to see which
    tests the suite's CPU goes to (processes nobody here waits for, such as Slurm jobs, are not seen)."""

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item, nextitem):
        import time

        before, started = os.times(), time.monotonic()
        forked = forked_bench.forked_cpu_s()
        yield
        after = os.times()
        forked_bench.write_log(
            {
                "test": item.nodeid,
                "wall_s": round(time.monotonic() - started, 2),
                "own_s": round(after.user + after.system - before.user - before.system, 2),
                "children_s": round(
                    after.children_user + after.children_system - before.children_user - before.children_system, 2
                ),
                "forked_s": round(forked_bench.forked_cpu_s() - forked, 2),
            }
        )


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """In a `-m "not slow"` session a test that starts a process fails, saying so: the fast tier
    cannot hide a mis-marked test (one the marking above missed gets `@pytest.mark.slow`)."""
    if "not slow" not in (item.config.getoption("markexpr", "") or "") or item.get_closest_marker("slow"):
        yield
        return
    import multiprocessing.process
    import platform

    # asked once per process and kept: h5py's import asks it (`uname -p`), in whichever test imports it first
    platform.uname().processor  # noqa: B018

    def refuse(what: str):
        def refused(*args, **kwargs):
            pytest.fail(f"{item.nodeid} starts a process ({what}): mark it slow", pytrace=False)

        return refused

    patched = [
        (subprocess.Popen, "_execute_child", refuse("subprocess")),
        (multiprocessing.process.BaseProcess, "start", refuse("multiprocessing")),
        (os, "fork", refuse("os.fork")),
        (os, "posix_spawn", refuse("os.posix_spawn")),
    ]  # not servers: one started in a thread (moto's) would wait forever for the refused one
    saved = [(owner, name, getattr(owner, name)) for owner, name, _ in patched]
    for owner, name, replacement in patched:
        setattr(owner, name, replacement)
    try:
        yield
    finally:
        for owner, name, original in saved:
            setattr(owner, name, original)


# ---- running bench -------------------------------------------------------------------------------


def bench_env(tracking_uri: Optional[str] = None, **extra: str) -> Dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("MLFLOW_TRACKING_URI", "HYDRA_FULL_ERROR")}
    env["PYTHONUNBUFFERED"] = "1"
    # one thread per process: tests check behaviour, not speed, and two test files run at once on
    # 2 cores (more OpenMP threads than cores spin against each other: steps 10x slower)
    # (forced, not defaulted: a developer's OMP_NUM_THREADS=8 would make the suite a speed test)
    env["OMP_NUM_THREADS"] = env["MKL_NUM_THREADS"] = "1"
    if tracking_uri:
        env["MLFLOW_TRACKING_URI"] = tracking_uri
    env.update(extra)
    return env


@dataclass
class Bench:
    """`python -m bench` in `cwd`; its default MLflow store is `cwd`/mlflow.db (`self.uri`)."""

    cwd: Path
    started: List[subprocess.Popen] = field(default_factory=list)

    @property
    def db(self) -> Path:
        return self.cwd / "mlflow.db"

    @property
    def uri(self) -> str:
        return f"sqlite:///{self.db}"

    def with_store(self) -> "Bench":
        """A test whose subject is not the making of a new MLflow store: `cwd`/mlflow.db starts as
        a copy of a store MLflow made once per worker (its schema, its Default experiment), the
        file a bench run's first contact would make (bench copies its schema from ~/.cache/bench once
        one store was made: bench.tracking.store.create_whole). The tests of a new store (the README's
        run, four runs at once on one, nothing written on bad input) do not call it."""
        if not self.db.exists():
            shutil.copyfile(_store_template(), self.db)
        return self

    @staticmethod
    def env(tracking_uri: Optional[str] = None, **extra: str) -> Dict[str, str]:
        return bench_env(tracking_uri, **extra)

    def run(
        self,
        *args: str,
        module: str = "bench",
        env: Optional[Dict[str, str]] = None,
        timeout: float = HANG_GUARD_S,
        cwd: Optional[Path] = None,
        fresh: bool = False,
    ) -> subprocess.CompletedProcess:
        """`python -m module args` to its end: forked from this worker's fork server where that is
        the same as an exec (tests/forked_bench.py says when it is not), else exec'd; `fresh=True`
        insists on the exec (a test of what only a new interpreter shows)."""
        command, cwd, env = [sys.executable, "-m", module, *args], cwd or self.cwd, env or bench_env()
        why = "fresh=True"
        if not fresh:
            server = forked_bench.server(bench_env)
            forked = server.run(command, module, cwd, env, timeout)
            if forked is not None:
                return forked
            why = server.why
        before = os.times()
        try:
            return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
        finally:
            after = os.times()
            forked_bench.log(
                "exec",
                module,
                cwd,
                after.children_user + after.children_system - before.children_user - before.children_system,
                why,
            )

    def start(
        self, *args: str, module: str = "bench", env: Optional[Dict[str, str]] = None, fresh: bool = False, **popen
    ) -> subprocess.Popen:
        """`python -m module args` started, not waited for: forked from the fork server as run() is
        (a forked_bench.ForkedProcess: Popen's pid, poll, wait, communicate and signals), else a
        real subprocess.Popen (`fresh=True`, or Popen options beyond start_new_session)."""
        command, env = [sys.executable, "-m", module, *args], env or bench_env()
        proc, why = None, "fresh=True" if fresh else f"Popen options {sorted(popen)}"
        if not fresh and set(popen) <= {"start_new_session"}:
            server = forked_bench.server(bench_env)
            proc = server.start(command, module, self.cwd, env, bool(popen.get("start_new_session")))
            why = server.why
        if proc is None:
            forked_bench.log("exec (started)", module, self.cwd, 0.0, why)
            proc = subprocess.Popen(
                command, cwd=self.cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen
            )
        self.started.append(proc)
        return proc

    def kill_leftovers(self) -> None:
        """After a test: a started process still running (its test failed or hit a hang guard) is
        killed with everything under it, so it cannot load the machine for the tests after it."""
        import psutil

        for proc in self.started:
            if proc.poll() is not None:
                continue
            try:
                tree = [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)]
            except psutil.NoSuchProcess:
                continue
            for process in tree:
                with contextlib.suppress(psutil.NoSuchProcess):
                    process.kill()
            proc.communicate(timeout=60)

    @staticmethod
    def metrics(proc: subprocess.CompletedProcess) -> dict:
        """The final `{"radix_metrics": ...}` line of a run that succeeded."""
        assert proc.returncode == 0, f"exit {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
        last = proc.stdout.strip().splitlines()[-1]
        return json.loads(last)["radix_metrics"]

    def runs(self, uri: Optional[str] = None) -> list:
        """Every MLflow run in the store (this directory's, unless `uri` names another)."""
        from mlflow import MlflowClient

        client = MlflowClient(tracking_uri=uri or self.uri)
        experiments = client.search_experiments()
        return client.search_runs([e.experiment_id for e in experiments]) if experiments else []

    @staticmethod
    def error_lines(stderr: str) -> List[str]:
        return [line for line in stderr.splitlines() if line.startswith("[ERROR]")]

    @staticmethod
    def epochs(run_dir: Path) -> list:
        """A run's metrics_epoch.jsonl, a dict per epoch."""
        return [json.loads(line) for line in (run_dir / "metrics_epoch.jsonl").read_text().splitlines()]

    @staticmethod
    def single_error(proc) -> str:
        """The one `[ERROR]` line of a run that failed cleanly: non-zero exit, no traceback, no
        final metrics line."""
        assert proc.returncode not in (0, None), proc.stdout + proc.stderr
        assert "Traceback" not in proc.stdout + proc.stderr
        assert "radix_metrics" not in proc.stdout
        errors = Bench.error_lines(proc.stderr)
        assert len(errors) == 1, proc.stderr
        return errors[0]

    def run_two_nodes(
        self, common: Sequence[str], run_dir: Path
    ) -> "tuple[subprocess.CompletedProcess, subprocess.CompletedProcess]":
        """Two `python -m bench` "nodes" on loopback (distributed.node_rank 1 started first, then
        0, each in run_dir/node<N>): (node 0's process, node 1's), both ended."""
        follower = self.start(*common, "distributed.node_rank=1", f"hydra.run.dir={run_dir}/node1")
        try:
            leader = self.run(*common, "distributed.node_rank=0", f"hydra.run.dir={run_dir}/node0")
            out, err = follower.communicate(timeout=HANG_GUARD_S)
        finally:
            follower.kill()
        return leader, subprocess.CompletedProcess(follower.args, follower.returncode, out, err)

    @staticmethod
    def wait_for_line(proc: subprocess.Popen, path: Path, text: str, guard_s: float = HANG_GUARD_S) -> None:
        """Until `text` appears in the file at `path` (the event a test waits for); fails when the
        process ends first or the hang guard runs out."""
        deadline = time.monotonic() + guard_s
        while proc.poll() is None and time.monotonic() < deadline:
            if path.exists() and text in path.read_text():
                return
            time.sleep(0.05)
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"never saw {text!r} in {path} (exit {proc.returncode})\n{out}\n{err}")


_TEMPLATE: List[Path] = []


def _store_template() -> Path:
    """A new sqlite store made by MLflow itself in this process (same version, same schema as a
    bench run's), once; removed when the process ends."""
    if not _TEMPLATE:
        import atexit
        import tempfile

        from mlflow import MlflowClient

        folder = Path(tempfile.mkdtemp(prefix="bench-store-template-"))
        atexit.register(shutil.rmtree, folder, True)
        MlflowClient(tracking_uri=f"sqlite:///{folder / 'mlflow.db'}").search_experiments()
        _TEMPLATE.append(folder / "mlflow.db")
    return _TEMPLATE[0]


@pytest.fixture
def bench(tmp_path) -> Iterator[Bench]:
    runner = Bench(tmp_path)
    yield runner
    runner.kill_leftovers()


@pytest.fixture(scope="session")
def bench_at() -> Callable[[Path], Bench]:
    """For module-scoped fixtures: a Bench in a directory of their own."""
    return Bench


@pytest.fixture(scope="session")
def repo() -> Path:
    return REPO


@pytest.fixture
def tiny() -> List[str]:
    return list(TINY)


@pytest.fixture(scope="session")
def tiny_args() -> Sequence[str]:
    """TINY for module-scoped fixtures (read-only)."""
    return tuple(TINY)


@pytest.fixture(scope="session")
def compose():
    """compose(*overrides) -> the checked BenchConfig, as `python -m bench <overrides>` builds it.
    Checked once per worker for each list of overrides, environment and working directory (bench.config
    keeps only the last 32 compositions, and checks each again: without this, test_config.py and
    test_recipes.py took ~2.5 of ~57 CPU-s more, 2026-12-03); each call gets its own copy, so a test may
    edit it. A refusal is raised each time, as bench raises it."""
    import copy

    from bench.config import compose as compose_config

    composed: Dict[tuple, object] = {}

    def cached(*overrides: str):
        # keyed on what a composition may read besides the overrides too: ${oc.env:...}, relative paths
        key = (overrides, os.getcwd(), tuple(sorted(os.environ.items())))
        if key not in composed:
            composed[key] = compose_config(*overrides)
        return copy.deepcopy(composed[key])

    return cached


# ---- datasets ------------------------------------------------------------------------------------


class Datasets:
    """Tiny real datasets: 64x48 JPEGs in class folders, and the CIFAR-100 python format."""

    CLASSES = 4
    WIDTH, HEIGHT = 64, 48

    def image_folder(self, root: Path, images: int = 40, classes: int = CLASSES, seed: int = 0) -> List[str]:
        """root/classNNN/imgNNNNN.jpg."""
        from bench.data.sample_images import write_image_folder

        return write_image_folder(str(root), images, classes, self.WIDTH, self.HEIGHT, seed=seed)

    def imagenet_layout(self, root: Path, train: int = 40, val: int = 8) -> Dict[str, List[str]]:
        return {
            "train": self.image_folder(root / "train", train, seed=1),
            "val": self.image_folder(root / "val", val, seed=2),
        }

    @staticmethod
    def cifar100(root: Path, train: int = 40, test: int = 12, seed: int = 0) -> Dict[str, dict]:
        """The official layout: pickled dicts with bytes keys; data rows are R, G, B planes of 32x32."""
        import numpy as np

        rng = np.random.default_rng(seed)
        root.mkdir(parents=True, exist_ok=True)
        written = {}
        for name, count in (("train", train), ("test", test)):
            batch = {
                b"data": rng.integers(0, 256, (count, 3072), dtype=np.uint8),
                b"fine_labels": rng.integers(0, 100, count).tolist(),
                b"coarse_labels": rng.integers(0, 20, count).tolist(),
                b"filenames": [f"img{i}.png".encode() for i in range(count)],
            }
            (root / name).write_bytes(pickle.dumps(batch))
            written[name] = batch
        meta = {
            b"fine_label_names": [f"class{i}".encode() for i in range(100)],
            b"coarse_label_names": [f"super{i}".encode() for i in range(20)],
        }
        (root / "meta").write_bytes(pickle.dumps(meta))
        return written


@pytest.fixture(scope="session")
def datasets() -> Datasets:
    return Datasets()


# ---- S3 on loopback ------------------------------------------------------------------------------


@dataclass
class S3Server:
    endpoint: str
    secret: str = S3_SECRET
    credentials = S3_CREDENTIALS

    def admin(self):
        import boto3

        # a session of its own: boto3's default one caches whatever environment it first saw
        session = boto3.session.Session(
            aws_access_key_id=S3_CREDENTIALS["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=S3_SECRET,
            region_name="us-east-1",
        )
        return session.client("s3", endpoint_url=self.endpoint)

    def new_bucket(self) -> str:
        name = f"bench-{uuid.uuid4().hex[:12]}"
        self.admin().create_bucket(Bucket=name)
        return name

    def overrides(self, bucket: str, *extra: str) -> list:
        return ["storage=s3", f"storage.endpoint={self.endpoint}", f"storage.bucket={bucket}", *extra]

    @staticmethod
    def env(tracking_uri: Optional[str] = None, **extra: str) -> Dict[str, str]:
        """A bench process environment with the server's credentials."""
        return bench_env(tracking_uri, **S3_CREDENTIALS, **extra)


# moto's server in a process of its own, which prints its port and ends when its stdin closes (this
# worker gone included). In a thread of the worker it twice stopped answering its first request for
# good (CI stop 49; a full run on 2026-11-30), with that worker's other threads stuck too.
MOTO_SERVER = (
    "import sys; from moto.server import ThreadedMotoServer; "
    "server = ThreadedMotoServer(ip_address='127.0.0.1', port=0, verbose=False); server.start(); "
    "print(server.get_host_and_port()[1], flush=True); sys.stdin.read()"
)


@pytest.fixture(scope="module")
def s3_server() -> Iterator[S3Server]:
    server = subprocess.Popen(
        [sys.executable, "-c", MOTO_SERVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        port = server.stdout.readline().strip()  # the event: it listens
        assert port.isdigit(), f"moto's server did not start (exit {server.wait(timeout=60)})"
        yield S3Server(f"http://127.0.0.1:{port}")
    finally:
        server.stdin.close()
        try:
            server.wait(timeout=60)  # a hang guard: it ends at the end of its stdin
        finally:
            server.kill()


@pytest.fixture
def aws_env(monkeypatch):
    """The loopback server's credentials in this process's environment."""
    for name, value in S3_CREDENTIALS.items():
        monkeypatch.setenv(name, value)


# ---- a DDP run that trains until it is stopped -------------------------------------------------------

JOINED = re.compile(r"rank (\d+)/(\d+) \(pid (\d+)\) joined the process group")


class LongDdpRun:
    """Two CPU ranks (gloo) training until something stops them; for the fault tests."""

    def __init__(self, bench: Bench, tiny: List[str], run_dir: Path):
        self.bench, self.tiny, self.run_dir = bench, tiny, run_dir
        self.proc: Optional[subprocess.Popen] = None
        self.tree: list = []

    def start(self, timeout_s: int, *overrides: str) -> subprocess.Popen:
        self.proc = self.bench.start(
            *self.tiny,
            *overrides,
            "distributed=ddp",
            "distributed.nproc_per_node=2",
            "train.steps_per_epoch=100000",
            "benchmark.log_every=1",
            f"distributed.timeout_s={timeout_s}",
            f"hydra.run.dir={self.run_dir}",
            start_new_session=True,
        )
        return self.proc

    def wait_for_rank1_steps(self) -> int:
        """Rank 1's pid, once its log shows it joined and trained a couple of steps (the event);
        also records the job's process tree."""
        import psutil

        log = self.run_dir / "rank1.log"
        deadline = time.monotonic() + HANG_GUARD_S
        while time.monotonic() < deadline and self.proc.poll() is None:
            text = log.read_text() if log.exists() else ""
            match = JOINED.search(text)
            if match and "step 2/" in text:
                self.tree = psutil.Process(self.proc.pid).children(recursive=True)
                return int(match.group(3))
            time.sleep(0.3)
        self.proc.kill()
        out, err = self.proc.communicate(timeout=60)
        pytest.fail(f"rank 1 never trained 2 steps (exit {self.proc.returncode})\n{out}\n{err}")

    left_alive = staticmethod(forked_bench.left_alive)

    def cleanup(self) -> None:
        import psutil

        for process in self.tree:
            try:
                process.send_signal(signal.SIGCONT)
                process.kill()
            except psutil.Error:
                pass
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.communicate(timeout=30)


@pytest.fixture
def long_ddp_run(bench, tiny, tmp_path) -> Iterator[LongDdpRun]:
    run = LongDdpRun(bench, tiny, tmp_path / "run")
    try:
        yield run
    finally:
        run.cleanup()


# ---- a real Slurm on this machine (.ci/slurm up) ------------------------------------------------------


@dataclass
class Slurm:
    """A running Slurm whose node is up. `accounting`: sacct answers (slurmdbd), which submitit
    needs to see a job end that left no result (cancelled, out of time)."""

    accounting: bool
    # a sweep's jobs as Slurm jobs on a CPU node: no GPUs, 1 GB, one core per process of the job
    sweep_on_cpu = (
        "hydra/launcher=slurm",
        "hydra.launcher.gpus_per_node=0",
        "hydra.launcher.mem_gb=1",
        "hydra.launcher.cpus_per_task='${bench.times:1,${distributed.nproc_per_node}}'",
    )


def _run_quietly(*command: str) -> Optional[subprocess.CompletedProcess]:
    try:
        return subprocess.run(command, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None


UP_NODE_STATES = frozenset({"idle", "mix", "alloc", "comp"})  # sinfo's %t


@pytest.fixture(scope="session")
def slurm_or_none() -> Optional[Slurm]:
    if not shutil.which("sbatch"):
        return None
    states = _run_quietly("sinfo", "-h", "-o", "%t")
    # up: idle, or running another test's job (which a second worker's job queues behind); a state
    # ending in "*" (not responding), down, drained or reserved is not. Only "idle" and "mix" counted
    # once, so a worker that first looked while another's job ran skipped its Slurm tests.
    if states is None or not UP_NODE_STATES & set(states.stdout.split()):
        return None
    sacct = _run_quietly("sacct", "-n", "-X", "-o", "JobID", "--starttime=now-1minute")
    return Slurm(accounting=sacct is not None and sacct.returncode == 0)


@pytest.fixture
def slurm(slurm_or_none) -> Slurm:
    if slurm_or_none is None:
        pytest.skip("needs a running Slurm with a node up (.ci/slurm up)")
    return slurm_or_none


# ---- MLflow tracking servers on loopback -------------------------------------------------------------


def _healthy(url: str) -> bool:
    import urllib.request

    try:
        with urllib.request.urlopen(f"{url}/health", timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


class MlflowServer:
    """`mlflow server` on 127.0.0.1 with a sqlite store in `root`; stop() then start() keeps the store."""

    def __init__(self, root: Path, port: int):
        self.root, self.port = root, port
        self.url = f"http://127.0.0.1:{port}"
        self.process: Optional[subprocess.Popen] = None

    def start(self) -> "MlflowServer":
        from bench.tracking.store import create_whole

        mlflow_cli = shutil.which("mlflow")
        assert mlflow_cli, "the mlflow command is not on PATH"
        self.root.mkdir(parents=True, exist_ok=True)
        if not (self.root / "srv.db").exists():
            # a new store as bench makes its own (a copy of this MLflow's migrated empty store): the
            # server's ~70 migrations cost ~1.2 of its ~9 CPU-s to come up, 11 starts a suite
            create_whole(self.root / "srv.db")
        with (self.root / "server.log").open("a") as log:
            self.process = subprocess.Popen(
                [
                    mlflow_cli,
                    "server",
                    "--backend-store-uri",
                    f"sqlite:///{self.root}/srv.db",
                    "--artifacts-destination",
                    str(self.root / "art"),
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(self.port),
                    "--workers",
                    "1",
                ],
                cwd=self.root,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                # no job-runner process beside the server: bench never submits jobs
                env={**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"},
            )
        deadline = time.time() + HANG_GUARD_S  # a hang guard: the server answers /health when it is up
        while not _healthy(self.url):
            if self.process.poll() is not None or time.time() > deadline:
                pytest.fail(
                    f"mlflow server did not come up (exit {self.process.poll()}):\n"
                    f"{(self.root / 'server.log').read_text()[-3000:]}"
                )
            time.sleep(0.5)
        return self

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.process is None:
            return
        for signum, wait in ((sig, 3), (signal.SIGKILL, 15)):
            try:
                os.killpg(self.process.pid, signum)
            except ProcessLookupError:
                break
            try:
                self.process.wait(timeout=wait)
                break
            except subprocess.TimeoutExpired:
                continue


@pytest.fixture
def mlflow_servers(tmp_path) -> Iterator[Callable[[], MlflowServer]]:
    """new() -> a started MlflowServer of this test (stopped at its end)."""
    from bench.rank_context import free_port

    made: List[MlflowServer] = []

    def new() -> MlflowServer:
        made.append(MlflowServer(tmp_path / f"mlflow-server-{len(made)}", free_port()).start())
        return made[-1]

    yield new
    for server in made:
        server.stop()


@pytest.fixture(scope="module")
def module_mlflow_server(tmp_path_factory) -> Iterator[MlflowServer]:
    """An `mlflow server` on 127.0.0.1 shared by a test module (one start: ~4.7 CPU-s); its store
    and artifacts under `.root`."""
    from bench.rank_context import free_port

    server = MlflowServer(tmp_path_factory.mktemp("mlflow-server"), free_port()).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def mlflow_server(module_mlflow_server) -> str:
    """The URL of an `mlflow server` on 127.0.0.1 shared by a test module."""
    return module_mlflow_server.url


class SilentServer:
    """A TCP server on 127.0.0.1 that takes every connection and never answers: a peer that hangs (an
    S3 endpoint, a tracking server, a package index). `held`: the connections it took."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.held: List[socket.socket] = []
        self._accepting = threading.Thread(target=self._accept, daemon=True)
        self._accepting.start()

    def _accept(self) -> None:
        with contextlib.suppress(OSError):  # closed
            while True:
                self.held.append(self.sock.accept()[0])

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)  # wakes the blocked accept(): a close alone does not
        self.sock.close()
        self._accepting.join(timeout=60)  # a hang guard: shutdown() wakes it at once
        for conn in self.held:
            conn.close()


@pytest.fixture
def silent_server() -> Iterator[Callable[[], SilentServer]]:
    """new() -> a started SilentServer of this test (closed at its end, its thread ended)."""
    made: List[SilentServer] = []

    def new() -> SilentServer:
        made.append(SilentServer())
        return made[-1]

    yield new
    for server in made:
        server.close()


# ---- a real browser, for the HTML pages bench writes ---------------------------------------------


@dataclass
class Page:
    """What headless Chromium saw of a page: its images (loaded, pixel width, name), its console
    messages at error level, and the text of every table cell."""

    images: List[tuple]
    console_errors: List[str]
    cells: List[str]


class Browser:
    def __init__(self, driver):
        self.driver = driver

    def open(self, path: Path) -> Page:
        # the log holds what earlier pages of this session's browser said (an MLflow UI another test
        # opened): drained first, so the page's own messages are the ones judged
        self.driver.get_log("browser")
        self.driver.get(path.resolve().as_uri())
        images = self.driver.execute_script(
            "return [...document.images].map(i => [i.complete, i.naturalWidth, i.alt || i.src.slice(0, 40)])"
        )
        cells = self.driver.execute_script("return [...document.querySelectorAll('td')].map(t => t.textContent)")
        errors = [entry["message"] for entry in self.driver.get_log("browser") if entry["level"] == "SEVERE"]
        return Page([tuple(i) for i in images], errors, cells)


@pytest.fixture
def browser(chromium_session) -> Iterator[Browser]:
    """The module's browser for one test, left on about:blank after it: a page left open (the MLflow UI,
    polling a server its module has stopped) kept Chromium busy for the rest of the session (~12 of
    its ~32 CPU-s in a whole-suite run, 2026-12-01, process accounting, when it was one a worker)."""
    yield chromium_session
    with contextlib.suppress(Exception):  # a browser that died is the next test's failure, said there
        chromium_session.driver.get("about:blank")


@pytest.fixture(scope="module")
def chromium_session(tmp_path_factory) -> Iterator[Browser]:
    """Headless Chromium through Selenium and the system's chromedriver (Debian: chromium,
    chromium-driver); the tests that use it skip, saying so, where any of the three is missing. One
    a module: idle, it still costs ~1 CPU-s a minute (its hang watcher, its renderers), ~1 to start
    (4 modules use it)."""
    pytest.importorskip("selenium", reason="needs selenium (pip install -e '.[test]')")
    chromium, chromedriver = shutil.which("chromium"), shutil.which("chromedriver")
    if not chromium or not chromedriver:
        pytest.skip("needs chromium and chromedriver (Debian: apt-get install chromium chromium-driver)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    for argument in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--window-size=1600,1200",
    ):
        options.add_argument(argument)
    options.binary_location = chromium
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    # Chromium's org.chromium.Chromium.* folder outlives driver.quit(): in this session's temp, not /tmp
    own_temp = {**os.environ, "TMPDIR": str(tmp_path_factory.mktemp("chromium"))}
    driver = webdriver.Chrome(service=Service(chromedriver, env=own_temp), options=options)
    try:
        yield Browser(driver)
    finally:
        driver.quit()
