"""`Bench.run` without paying the heavy imports in every process: a fork server ("zygote").

Most of a small `python -m bench ...` run is its interpreter importing torch, torchvision,
mlflow and hydra (about 4.5 CPU-seconds; the run itself is well under one). So each pytest
worker starts, on its first `bench.run`, one long-lived `python tests/forked_bench.py` that has
imported those third-party libraries and nothing of bench's own (bench is imported afresh in every
child, so nothing bench computes at import is stale) and has run no torch op (no thread pools
exist when it forks). Each `bench.run` then sends it the command (module, arguments, working
directory, the whole environment, and the test's stdin plus two pipe ends for stdout and stderr);
it forks, and the child becomes `python -m <module> <args>`:

- cwd, os.environ (replaced wholesale), sys.argv / sys.orig_argv / sys.path[0] as `-m` sets them,
  a fresh `__main__` module, fds 0-2 from the test and sys.stdin/stdout/stderr rebuilt on them as
  Python builds them (PYTHONUNBUFFERED honoured); the signal dispositions and mask of the server
  after its imports (a fresh interpreter's, started by the test: the server sets no handler); the
  test's CPU affinity, umask, resource limits and niceness; numpy's global RNG and
  multiprocessing's authkey reseeded (a fresh process draws them afresh);
- then `runpy._run_module_as_main`, what `python -m` calls: an uncaught exception is printed by
  sys.excepthook as python prints it (the same frames) and exits 1, SystemExit as python handles
  it (None: 0, an int, anything else printed to stderr and 1), an uncaught KeyboardInterrupt
  ends the process by SIGINT; the interpreter then exits normally (atexit handlers, logging
  shutdown, MLflow ending its run, flushing), none of the server's cleanup running in the child.
  bench's commands end by bench.machine.children.exit_without_teardown, here as in a fresh process
  (the same steps, then no teardown of the modules: in a forked child that teardown wrote to, and so
  copied, every page of the server's imports, ~0.35 CPU-s a command).

The test side gets a real subprocess.CompletedProcess (same args list, returncode -N for a child
killed by signal N, text decoded and newlines translated as subprocess does) or, on timeout, the
child's whole process tree killed and subprocess.TimeoutExpired.

Where a fork could differ from a fresh process, `Bench.run` execs as before:
- `BENCH_TEST_FORK=0` in the environment turns the server off for the whole run;
- `bench.run(..., fresh=True)`: one command that must be a real exec (see the tests that say why);
- a module other than bench's own (bench, bench.*);
- an environment that differs from the server's own in any variable the server's imports read
  (recorded while it imported: MLFLOW_LOGGING_LEVEL, HOME, PATH, ...; TMPDIR only if they made a
  temp dir) or that a C library
  or the interpreter reads at start (OMP_*, MKL_*, TORCH*, CUDA*, NCCL_*, LD_*, PYTHON* except
  PYTHONUNBUFFERED, MALLOC*, LC_*, ... - see UNSAFE_PREFIXES; a credential's name there, such as
  CUDA_API_TOKEN, or a name the canary tests made up, such as OMP_CANARY_URL, is no library's
  setting and forks); XDG_CACHE_HOME forks (REDERIVED: the one value an import keeps from it,
  torchvision's `_HOME`, is derived again in the child from its own environment) unless the
  server saw something else read it while it imported;
- a working directory that is not a directory, a forked pytest process, or a server that could
  not start or died (a warning says so once).
A forked `python -m bench` or `bench.doctor` that starts multiprocessing's forkserver (DDP, sweeps,
the doctor's rungs, an S3 loader) has it forked from a spare child made before bench ran, not
exec'd (the zygote, below; tests/unit/test_forked_bench_zygote.py compares the two).
`Bench.start` (the signal and long-running tests) forks the same way without waiting: a
ForkedProcess stands in for its Popen (pid, poll, wait, communicate, signals), the server reaping
the child and reporting its exit. Commands run side by side (four runs at once on one store, a
command started while another runs): each has a socket of its own to the server.

The server lives as long as its pytest worker: stopped at session end (pytest_unconfigure), and
it exits by itself when its socket reaches EOF or its parent changes. Python's hash seed is the
one thing a fork cannot redraw: every child of one server shares it (a fresh process draws its
own); nothing in bench depends on set or dict-of-str order across processes.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import sys
import time
from typing import Optional

SERVER_FILE = os.path.abspath(__file__)
WORKDIR_PREFIX = "bench-forkserver-"  # the server's folder in TMPDIR: its log, its working directory
STOPS_OUTLIVED = (signal.SIGINT, signal.SIGTERM)  # what the server ignores: it ends with its worker instead
MAX_MESSAGE = 1 << 20

# The heavy third-party libraries a bench run imports (and what they pull: sqlalchemy, alembic,
# pandas, numpy, PIL...). Never bench's own modules, nor hydra_plugins (bench's launchers live there).
PRELOAD = (
    "torch",
    "torchvision",
    "torchvision.models",
    "torchvision.transforms",
    "torchvision.datasets",
    "torch.distributed",
    "torch.distributed.elastic.multiprocessing",
    "torch.distributed.launcher.api",
    "torch.utils.data",
    "mlflow",
    "mlflow.tracking",
    "mlflow.store.tracking.sqlalchemy_store",
    "hydra",
    "hydra.core.config_store",
    "hydra.core.hydra_config",
    "omegaconf",
    "numpy",
    "PIL.Image",
    "hydra._internal.utils",
    "hydra._internal.logging_config",
    "hydra.experimental",
    "psutil",
    "yaml",
    "tqdm",
    "filelock",
    "email._header_value_parser",
    "sqlalchemy.dialects.sqlite",
)

# Variables read at start by the interpreter or by C/C++ libraries (OpenMP, MKL, glibc, the CUDA
# stack, torch's C++ side): invisible to the server's record of what its imports read, so any
# difference from the server's environment means a real exec. Conservative on purpose.
UNSAFE_PREFIXES = (
    "PYTHON",
    "OMP_",
    "GOMP_",
    "KMP_",
    "MKL_",
    "OPENBLAS_",
    "GOTO",
    "BLIS_",
    "VECLIB_",
    "NUMEXPR_",
    "DNNL_",
    "ONEDNN_",
    "TORCH",
    "PYTORCH",
    "ATEN_",
    "CAFFE2_",
    "CUDA",
    "CUBLAS",
    "CUDNN",
    "CUFFT",
    "CURAND",
    "CUSOLVER",
    "CUSPARSE",
    "NCCL_",
    "NVIDIA_",
    "NV_",
    "TRITON",
    "HIP_",
    "ROCM",
    "HSA_",
    "XLA_",
    "KINETO",
    "LD_",
    "MALLOC",
    "GLIBC_",
    "LC_",
    "TQDM_",
    "OTEL_",
    "XDG_",
)
UNSAFE_NAMES = frozenset({"LANG", "LANGUAGE", "TZ", "HOME", "PATH", "USER", "LOGNAME"})
# Read by Python's tempfile (and multiprocessing's temp dir) when first asked, then cached: a child
# forked from a server that never asked computes its own, as a fresh process does; the server counts
# them among the variables it read if its imports asked (then a difference execs).
TEMP_DIR_NAMES = frozenset({"TMPDIR", "TEMP", "TMP"})
# read when a process starts but applied per request in the child (sys.stdout/stderr are rebuilt)
ALLOWED = frozenset({"PYTHONUNBUFFERED"})
# A credential's name under one of those prefixes (the canary tests plant TORCH_CANARY_AUTH,
# CUDA_API_TOKEN...): no library configures itself from a token or a password when it loads, so
# unless the server's own imports read it (recorded), a fork sees it as an exec would.
CREDENTIAL_SUFFIXES = ("_TOKEN", "_PASSWORD", "_KEY", "_AUTH", "_SECRET")
# A name the canary tests make up under one of those prefixes to carry a planted value
# (TORCH_CANARY_URL, OMP_CANARY_URL): no library knows a made-up name, so the same holds.
MADE_UP = "_CANARY_"
# Variables that the server's imports read only to keep a value derived from them, which a child derives
# again from its own environment exactly as the module does at import (_derived, _rederive): a
# difference in one forks. Each with the only place allowed to read it while the server imports, as
# (file, function) pairs from the reader outward: torchvision._internally_replaced_utils keeps
# `_HOME = os.path.join(torch.hub._get_torch_home(), "datasets", "vision")` ($TORCH_HOME, else
# $XDG_CACHE_HOME/torch, else ~/.cache/torch). Nothing else the server imports reads XDG_CACHE_HOME
# then: torch.hub's get_dir() and torch._appdirs compute it when called, mlflow, hydra, numpy, PIL and
# matplotlib (not preloaded) read no XDG_CACHE_HOME at import, and no C library calls getenv for it
# while they load (an LD_PRELOAD getenv tracer over the imports: none; libtorch and triton name it
# only for caches made when asked). A read from anywhere else (another version of a library) counts
# as any read does, and the difference execs. TORCH_HOME and HOME, read by the same line, stay
# guarded (TORCH*, HOME); so does every other XDG_* variable (XDG_CONFIG_HOME: MLflow's telemetry id).
REDERIVED = {
    "XDG_CACHE_HOME": (("torch/hub.py", "_get_torch_home"), ("torchvision/_internally_replaced_utils.py", "<module>"))
}


def _unsafe_difference(
    start_env: dict, env: dict, value_keys: frozenset, presence_keys: frozenset, rederived: frozenset = frozenset()
):
    """The first variable in which `env` differs from the server's in a way its imports or its
    start could have seen; None when a fork is as good as an exec. `rederived`: the REDERIVED
    variables the server found read only where REDERIVED says (a child derives their values again)."""
    for key in sorted(set(start_env) | set(env)):
        before, after = start_env.get(key), env.get(key)
        if before == after or key in ALLOWED or key in rederived:
            continue
        made_up = key.endswith(CREDENTIAL_SUFFIXES) or MADE_UP in key
        if made_up and key not in value_keys and key not in presence_keys:
            continue
        if key in value_keys or key in UNSAFE_NAMES or key.startswith(UNSAFE_PREFIXES):
            return key
        if key in presence_keys and (before is None) != (after is None):
            return key
    return None


def _umask() -> Optional[int]:
    """This process's umask, read without setting it (another thread may be making a file)."""
    try:
        with open("/proc/self/status") as status:
            return next((int(line.split()[1], 8) for line in status if line.startswith("Umask:")), None)
    except OSError:
        return None


def _is_open(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


def _process_state() -> dict:
    """What an exec'd child inherits besides its environment and fds: CPU affinity, umask, resource
    limits, niceness (sent with a command, and with a forkserver request to the zygote)."""
    import resource

    limits = {}
    for name in dir(resource):
        if name.startswith("RLIMIT_"):
            with contextlib.suppress(OSError, ValueError):
                limits[name] = resource.getrlimit(getattr(resource, name))
    return {
        "affinity": sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "umask": _umask(),
        "rlimits": limits,
        "nice": os.getpriority(os.PRIO_PROCESS, 0),
    }


def _take_process_state(state: dict) -> None:
    """_process_state()'s record made this process's own."""
    import resource

    if state.get("affinity") is not None:
        os.sched_setaffinity(0, state["affinity"])
    if state.get("umask") is not None:
        os.umask(state["umask"])
    for name, (soft, hard) in state.get("rlimits", {}).items():
        try:
            if resource.getrlimit(getattr(resource, name)) != (soft, hard):
                resource.setrlimit(getattr(resource, name), (soft, hard))
        except (OSError, ValueError, AttributeError):
            pass
    if state.get("nice") is not None and os.getpriority(os.PRIO_PROCESS, 0) != state["nice"]:
        with contextlib.suppress(OSError):
            os.setpriority(os.PRIO_PROCESS, 0, state["nice"])


def _send(sock: socket.socket, message: dict, fds=()) -> None:
    payload = json.dumps(message).encode()
    if fds:
        socket.send_fds(sock, [payload], list(fds))
    else:
        sock.sendall(payload)


def _receive(sock: socket.socket, maxfds: int = 0):
    """(message or None at EOF, fds)."""
    if maxfds:
        data, fds, _flags, _address = socket.recv_fds(sock, MAX_MESSAGE, maxfds)
    else:
        data, fds = sock.recv(MAX_MESSAGE), []
    return (json.loads(data) if data else None), list(fds)


# ---- the test side ------------------------------------------------------------------------------------


def enabled() -> bool:
    return os.environ.get("BENCH_TEST_FORK", "1") != "0"


def log(how: str, module: str, cwd, cpu_s: float, why: str = "") -> None:
    """With BENCH_TEST_FORK_LOG=<file>: a line per command (how it ran, why not forked, its CPU
    seconds, the test) appended to that file - to see what the suite spends where."""
    test = os.environ.get("PYTEST_CURRENT_TEST", "").split(" ")[0]
    write_log({"how": how, "module": module, "cpu_s": round(cpu_s, 2), "why": why, "test": test, "pid": os.getpid()})


def write_log(record: dict) -> None:
    path = os.environ.get("BENCH_TEST_FORK_LOG")
    if path:
        with open(path, "a") as out:
            out.write(json.dumps(record) + "\n")


def forked_cpu_s() -> float:
    """The CPU seconds of this process's fork server's children so far (as the server reaped them)."""
    return _server.child_cpu_s if _server is not None and _server._pid == os.getpid() else 0.0


class ForkServer:
    """One per pytest worker process: starts the server on first use; run() returns a
    CompletedProcess, or None where the command must be a real exec (the caller then execs)."""

    def __init__(self, default_env):
        import threading

        self._default_env = default_env
        self._lock = threading.Lock()
        self._pid = os.getpid()
        self._proc = None
        self._sock = None
        self._workdir = None
        self._start_env: dict = {}
        self._value_keys: frozenset = frozenset()
        self._presence_keys: frozenset = frozenset()
        self._rederived: frozenset = frozenset()
        self._broken = ""
        self.forks = 0
        self.execs = 0
        self.child_cpu_s = 0.0  # the forked children's CPU seconds (user + sys), as the server reaped them
        self.why = ""  # why the last command was not forked

    # -- life ----------------------------------------------------------------------------------------

    def _start(self) -> None:
        import subprocess
        import tempfile

        self._workdir = tempfile.mkdtemp(prefix=WORKDIR_PREFIX)
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._start_env = dict(self._default_env())
        with open(os.path.join(self._workdir, "server.log"), "wb") as log:
            self._proc = subprocess.Popen(
                [sys.executable, SERVER_FILE, str(theirs.fileno())],
                cwd=self._workdir,
                env=self._start_env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                pass_fds=[theirs.fileno()],
            )
        theirs.close()
        self._sock = ours
        ours.settimeout(900)  # the server imports: seconds, a minute on a loaded machine; a hang guard
        try:
            ready, _ = _receive(ours)
        except OSError as exc:
            ready = {"error": repr(exc)}
        ours.settimeout(None)
        if not ready or "ready" not in ready:
            self._fail(f"the fork server did not start: {ready and ready.get('error')}")
            return
        self._value_keys = frozenset(ready["value_keys"])
        self._presence_keys = frozenset(ready["presence_keys"])
        self._rederived = frozenset(ready.get("rederived", ()))

    def _fail(self, why: str) -> None:
        import warnings

        if not self._broken:
            log = os.path.join(self._workdir or "", "server.log")
            tail = ""
            if self._workdir and os.path.exists(log):
                with open(log, errors="replace") as text:
                    tail = text.read()[-3000:]
            warnings.warn(f"{why}; bench.run execs from now on\n{tail}", RuntimeWarning, stacklevel=3)
        self._broken = why
        self.stop(remove=False)

    def stop(self, remove: bool = True) -> None:
        """Ends the server (EOF on its socket; killed if it lingers) and removes its directory."""
        import shutil
        import subprocess

        if os.getpid() != self._pid:
            return
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        if self._proc is not None:
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
            self._proc = None
        if remove and self._workdir:
            shutil.rmtree(self._workdir, ignore_errors=True)
            self._workdir = None

    # -- a command -------------------------------------------------------------------------------------

    def why_exec(self, module: str, cwd, env: dict) -> str:
        """Why this command must be a real exec ("" when it can fork)."""
        if not enabled():
            return "BENCH_TEST_FORK=0"
        if os.getpid() != self._pid:
            return "a forked pytest process"
        if module != "bench" and not module.startswith("bench."):
            return f"module {module} is not bench's own"
        if not os.path.isdir(cwd):
            return f"cwd {cwd} is not a directory"
        if not all(isinstance(key, str) and isinstance(value, str) for key, value in env.items()):
            return "an environment entry that is not a str (subprocess refuses it)"
        if self._broken:
            return self._broken
        if self._proc is not None:
            key = _unsafe_difference(self._start_env, env, self._value_keys, self._presence_keys, self._rederived)
            if key:
                return f"{key} differs from the server's environment"
        return ""

    def run(self, args: list, module: str, cwd, env: dict, timeout: float):
        cwd = os.fspath(cwd)
        if not self._claim(module, cwd, env):
            return None
        self.forks += 1
        proc, cpu_s = self._run(args, module, cwd, env, timeout)
        log("fork", module, cwd, cpu_s)
        return proc

    def _claim(self, module: str, cwd: str, env: dict) -> bool:
        """True with the server started when this command can fork; else False (`self.why` says
        why, and the caller execs)."""
        self.why = self.why_exec(module, cwd, env)
        if not self.why:
            with self._lock:  # two threads' first commands start one server
                if self._proc is None and not self._broken:
                    self._start()
            self.why = self._broken or self.why_exec(module, cwd, env)
        if self.why:
            self.execs += 1
            return False
        return True

    def _send_command(self, request: dict) -> "Optional[tuple]":
        """Hand the server the request with this process's stdin, two new pipes for the child's
        stdout and stderr, and a socket of this command's own (the server reports the child's pid
        and exit there, and kills the child when this side closes it): the pipes' read ends and
        that socket, or None when the server is gone (marked broken)."""
        stdin = 0
        try:
            os.fstat(0)
        except OSError:
            stdin, request["stdin_closed"] = None, True
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            sock = self._sock
            if sock is None:
                raise OSError("its socket is closed")
            _send(sock, request, [fd for fd in (stdin, out_w, err_w, theirs.fileno()) if fd is not None])
        except OSError as exc:
            os.close(out_r)
            os.close(err_r)
            ours.close()
            self._fail(f"the fork server is gone ({exc})")
            return None
        finally:
            os.close(out_w)
            os.close(err_w)
            theirs.close()
        return out_r, err_r, ours

    def start(self, command: list, module: str, cwd, env: dict, new_session: bool) -> "Optional[ForkedProcess]":
        """`Bench.start`'s command forked like run()'s, without waiting: a ForkedProcess, or None (then
        `self.why` says why, and the caller execs)."""
        import select

        cwd = os.fspath(cwd)
        if not self._claim(module, cwd, env):
            return None
        request = self._request(module, command[3:], cwd, env)
        request["new_session"] = bool(new_session)
        pipes = self._send_command(request)
        if pipes is None:
            self.why = self._broken
            return None
        out_r, err_r, sock = pipes
        readable, _, _ = select.select([sock], [], [], 120)  # a hang guard: it answers at once
        message, _ = _receive(sock) if readable else (None, [])
        if not message or "pid" not in message:
            os.close(out_r)
            os.close(err_r)
            sock.close()
            raise RuntimeError(f"the fork server did not start the command: {message}")
        self.forks += 1
        return ForkedProcess(self, command, message["pid"], out_r, err_r, sock)

    def _request(self, module: str, args: list, cwd: str, env: dict) -> dict:
        return {"module": module, "args": [os.fsdecode(a) for a in args], "cwd": cwd, "env": env, **_process_state()}

    def _run(self, command: list, module: str, cwd: str, env: dict, timeout: float):
        import io
        import selectors
        import subprocess
        import time

        deadline = time.monotonic() + timeout if timeout is not None else None
        pipes = self._send_command(self._request(module, command[3:], cwd, env))
        if pipes is None:
            return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout), 0.0
        out_r, err_r, sock = pipes
        cpu_s = 0.0
        chunks = {out_r: [], err_r: []}
        open_pipes = {out_r, err_r}
        pid = status = None
        done = False
        try:
            with selectors.DefaultSelector() as selector:
                selector.register(out_r, selectors.EVENT_READ)
                selector.register(err_r, selectors.EVENT_READ)
                selector.register(sock, selectors.EVENT_READ)
                while open_pipes or status is None:  # as communicate(): EOF on both pipes, and the exit
                    remaining = None if deadline is None else deadline - time.monotonic()
                    if remaining is not None and remaining <= 0:
                        raise subprocess.TimeoutExpired(
                            command, timeout, output=b"".join(chunks[out_r]), stderr=b"".join(chunks[err_r])
                        )
                    for key, _ in selector.select(remaining):
                        if key.fileobj is sock:
                            message, _ = _receive(sock)
                            if message is None:
                                selector.unregister(sock)
                                raise RuntimeError(
                                    f"the fork server died while a command ran (its log: {self._workdir}/server.log)"
                                )
                            if "error" in message:
                                raise RuntimeError(f"the fork server could not fork: {message['error']}")
                            pid = message.get("pid", pid)
                            if "status" in message:
                                status = message["status"]
                                cpu_s = message.get("cpu_s", 0.0)
                                self.child_cpu_s += cpu_s
                                selector.unregister(sock)
                        else:
                            data = os.read(key.fd, 32768)
                            if data:
                                chunks[key.fd].append(data)
                            else:
                                selector.unregister(key.fd)
                                open_pipes.discard(key.fd)
            done = True
        finally:
            if not done and status is None and pid is not None:
                self._kill_tree(pid)
                status = self._wait_status(sock)
            os.close(out_r)
            os.close(err_r)
            sock.close()
        # as subprocess does in text mode: the locale's encoding, strict, universal newlines
        probe = io.TextIOWrapper(io.BytesIO())
        encoding, errors = probe.encoding, probe.errors
        out, err = (
            b"".join(chunks[fd]).decode(encoding, errors).replace("\r\n", "\n").replace("\r", "\n")
            for fd in (out_r, err_r)
        )
        return subprocess.CompletedProcess(command, status, out, err), cpu_s

    @staticmethod
    def _kill_tree(pid: int) -> None:
        import psutil

        try:
            parent = psutil.Process(pid)
            tree = [parent, *parent.children(recursive=True)]
        except psutil.Error:
            return
        for process in tree:
            with contextlib.suppress(psutil.Error):
                process.kill()

    def _wait_status(self, sock: socket.socket):
        """The killed child's exit status from the server (it reaps it)."""
        import select

        while True:
            readable, _, _ = select.select([sock], [], [], 60)
            if not readable:
                self._fail("the fork server did not report a killed child")
                return None
            message, _ = _receive(sock)
            if message is None:
                self._fail("the fork server died")
                return None
            if "status" in message:
                return message["status"]


class ForkedProcess:
    """What `Bench.start` returns when the fork server started its command: the part of
    subprocess.Popen the tests use (args, pid, returncode, poll, wait, communicate, send_signal,
    terminate, kill). The process is the server's child: the server reaps it and reports its exit
    code (-N for signal N) on the command's own socket. Its stdout and stderr
    are pipes to this process, read into buffers whenever it is waited on (so a chatty process
    never blocks on a full pipe), handed back by communicate() as text, as Popen(text=True) does."""

    def __init__(self, server: ForkServer, args: list, pid: int, out_r: int, err_r: int, sock: socket.socket):
        self.args, self.pid, self.returncode = args, pid, None
        self._server, self._out, self._err, self._sock = server, out_r, err_r, sock
        self._chunks: dict = {out_r: [], err_r: []}
        self._open = {out_r, err_r}

    def _pump(self, timeout: Optional[float], pipes: bool) -> None:
        """Wait up to `timeout` for the exit report (and, with `pipes`, output), taking what came."""
        import select

        sock = self._sock
        watch = ([sock] if self.returncode is None else []) + (list(self._open) if pipes else [])
        if not watch:
            return
        readable, _, _ = select.select(watch, [], [], timeout)
        for fd in readable:
            if fd is sock:
                message, _ = _receive(sock)
                if message is None or "error" in message:
                    self._finish(None, f"the fork server died while {self.args[2:4]} ran")
                elif "status" in message:
                    self._server.child_cpu_s += message.get("cpu_s", 0.0)
                    self._finish(message["status"], "")
            else:
                data = os.read(fd, 65536)
                if data:
                    self._chunks[fd].append(data)
                else:
                    self._open.discard(fd)

    def _finish(self, status, broken: str) -> None:
        if broken:
            self._server._fail(broken)
            status = -signal.SIGKILL if status is None else status
        self.returncode = status
        self._sock.close()  # the server is done with this command

    def _until(self, done, timeout: Optional[float]) -> None:
        import subprocess
        import time

        deadline = None if timeout is None else time.monotonic() + timeout
        while not done():
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                raise subprocess.TimeoutExpired(self.args, timeout)
            self._pump(remaining if remaining is None else min(remaining, 1.0), pipes=True)

    def poll(self) -> Optional[int]:
        if self.returncode is None:
            self._pump(0, pipes=True)
        return self.returncode

    def wait(self, timeout: Optional[float] = None) -> int:
        self._until(lambda: self.returncode is not None, timeout)
        return self.returncode  # type: ignore[return-value]

    def communicate(self, input=None, timeout: Optional[float] = None):
        """(stdout, stderr) once both pipes are at EOF and the process has ended, as Popen's."""
        import io

        self._until(lambda: not self._open and self.returncode is not None, timeout)
        probe = io.TextIOWrapper(io.BytesIO())
        texts = []
        for fd in (self._out, self._err):
            texts.append(
                b"".join(self._chunks[fd])
                .decode(probe.encoding, probe.errors)
                .replace("\r\n", "\n")
                .replace("\r", "\n")
            )
            self._chunks[fd] = []
            with contextlib.suppress(OSError):
                os.close(fd)
        return texts[0], texts[1]

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


_server = None


def server(default_env) -> ForkServer:
    global _server
    if _server is None or _server._pid != os.getpid():
        _server = ForkServer(default_env)
    return _server


def stop() -> None:
    if _server is not None:
        _server.stop()


# ---- the server ---------------------------------------------------------------------------------------


class _LateStream:
    """What sys.stdout/sys.stderr (and their __dunder__ twins) are while the server imports: a
    library that keeps the stream it sees then (torch's and alembic's log handlers, default
    arguments) keeps this, and it writes to whatever sys.<name> is when it writes - in a child,
    the child's stream, wrapped by bench's redaction as in a fresh process that imported the
    library after bench wrapped it."""

    def __init__(self, name: str, server_stream):
        self._name, self._server_stream = name, server_stream
        self._writing = False

    def _target(self):
        current = getattr(sys, self._name, None)
        if current is None or current is self or self._writing:
            return self._server_stream
        return current

    def write(self, text):
        target = self._target()
        self._writing = True
        try:
            return target.write(text)
        finally:
            self._writing = False

    def __getattr__(self, name):
        return getattr(self._target(), name)


def _record_env_reads():
    """Patches os.environ to record what the imports do with it: the variables read (by value, or
    only whether set), the places that iterate over it, and what they set or remove (torch sets
    TORCHINDUCTOR_CACHE_DIR; MLflow removes its telemetry session under pytest), to be done again
    to each child's environment; and `foreign`: the REDERIVED variables read from anywhere but the
    place REDERIVED names. Returns (value_keys, presence_keys, iterations, changes, undo, foreign)."""
    import traceback

    environ_type = os._Environ
    saved = {name: getattr(environ_type, name) for name in ("__getitem__", "__iter__", "__setitem__", "__delitem__")}
    value_keys, presence_keys, iterations, changes, foreign = set(), set(), [], [], set()

    def decoded(key):
        return os.fsdecode(key) if isinstance(key, bytes) else key

    def recording_getitem(self, key):
        caller = sys._getframe(1).f_code
        name = decoded(key)
        iterating = "_collections_abc" in caller.co_filename and caller.co_name == "__iter__"  # not a read (below)
        if name in REDERIVED and not iterating and not _read_where_allowed(sys._getframe(1), REDERIVED[name]):
            foreign.add(name)
        if "_collections_abc" in caller.co_filename:
            if caller.co_name == "__contains__":
                presence_keys.add(name)
            elif caller.co_name == "pop":  # a removal (recorded as one below), not a read
                changes.append(("del", name))
            elif caller.co_name != "__iter__":  # get(), setdefault(): a value read (iteration: below)
                value_keys.add(name)
        else:
            value_keys.add(name)
        return saved["__getitem__"](self, key)

    def recording_iter(self):
        frames = [f for f in traceback.extract_stack(limit=8)[:-1] if "_collections_abc" not in f.filename]
        iterations.append(" <- ".join(f"{f.filename}:{f.lineno}" for f in reversed(frames[-3:])))
        return saved["__iter__"](self)

    def recording_setitem(self, key, value):
        changes.append(("set", decoded(key), decoded(value)))
        return saved["__setitem__"](self, key, value)

    def recording_delitem(self, key):
        changes.append(("del", decoded(key)))
        return saved["__delitem__"](self, key)

    environ_type.__getitem__, environ_type.__iter__ = recording_getitem, recording_iter
    environ_type.__setitem__, environ_type.__delitem__ = recording_setitem, recording_delitem

    def undo():
        for name, method in saved.items():
            setattr(environ_type, name, method)

    return value_keys, presence_keys, iterations, changes, undo, foreign


def _read_where_allowed(frame, allowed: tuple) -> bool:
    """Whether the frames outward from `frame` (os.getenv's and Mapping.get's skipped) are the
    (file, function) pairs of `allowed`, in that order."""
    places = []
    while frame is not None and len(places) < len(allowed):
        code = frame.f_code
        if not (code.co_filename in ("<frozen os>", os.__file__) or "_collections_abc" in code.co_filename):
            places.append((code.co_filename.replace(os.sep, "/"), code.co_name))
        frame = frame.f_back
    return len(places) == len(allowed) and all(
        filename.endswith("/" + suffix) and name == function
        for (filename, name), (suffix, function) in zip(places, allowed, strict=True)
    )


def _derived() -> dict:
    """{(module, attribute): value}: what the preloaded modules keep from a REDERIVED variable,
    computed from this process's environment now, as the module computes it at import."""
    values = {}
    if "torchvision._internally_replaced_utils" in sys.modules:
        from torch.hub import _get_torch_home

        values[("torchvision._internally_replaced_utils", "_HOME")] = os.path.join(
            _get_torch_home(), "datasets", "vision"
        )
    return values


def _rederive() -> None:
    """In a child whose environment is in place: the values of _derived() set from it."""
    for (module, attribute), value in _derived().items():
        setattr(sys.modules[module], attribute, value)


def _serve(sock: socket.socket, dispositions: dict, mask):
    """The server's loop; returns (request, fds, dispositions, mask) in a child, never in the server.

    Commands run side by side: each request brings a socket of its own, on which the server reports
    the child's pid, then its exit code (-N for signal N) and CPU seconds once it has reaped it. When
    the test side closes a command's socket (or goes), the server kills that child's tree."""
    import select

    parent = os.getppid()
    pidfd_open = getattr(os, "pidfd_open", None)
    running: dict = {}  # pid -> (the command's socket, its pidfd or None)
    let_go: set = set()  # pids whose test side closed its socket: killed, not yet reaped

    def kill_all_and_exit():
        import shutil

        for pid in running:
            _kill_tree_here(pid)
        for pid in running:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)
        # its folder (its working directory), which a worker stopped without its session's end (killed,
        # or ended by a second Ctrl-C) would leave; a worker that ends normally removes it too
        here = os.getcwd()
        if os.path.basename(here).startswith(WORKDIR_PREFIX):
            shutil.rmtree(here, ignore_errors=True)
        os._exit(0)

    while True:
        for pid, (command, pidfd) in list(running.items()):
            waited, status, usage = os.wait4(pid, os.WNOHANG)
            if waited == pid:
                with contextlib.suppress(OSError):
                    exit_code = os.waitstatus_to_exitcode(status)
                    _send(
                        command, {"pid": pid, "status": exit_code, "cpu_s": round(usage.ru_utime + usage.ru_stime, 3)}
                    )
                command.close()
                if pidfd is not None:
                    os.close(pidfd)
                del running[pid]
                let_go.discard(pid)
        watch = [sock]
        for pid, (command, pidfd) in running.items():
            if pid not in let_go:
                watch.append(command)
            if pidfd is not None:
                watch.append(pidfd)
        polling = running and any(pidfd is None for _command, pidfd in running.values())
        readable, _, _ = select.select(watch, [], [], 0.05 if polling else 1.0)
        if os.getppid() != parent:
            kill_all_and_exit()
        for pid, (command, _pidfd) in list(running.items()):
            if command in readable and not command.recv(1, socket.MSG_PEEK):  # the test side let go
                _kill_tree_here(pid)
                let_go.add(pid)
        if sock not in readable:
            continue
        request, fds = _receive(sock, maxfds=4)
        if request is None:
            kill_all_and_exit()  # EOF: the pytest worker closed its end or died
        command = socket.socket(fileno=fds.pop())
        sys.stdout.flush()
        sys.stderr.flush()
        try:
            pid = os.fork()
        except OSError as exc:
            for fd in fds:
                os.close(fd)
            _send(command, {"error": repr(exc)})
            command.close()
            continue
        if pid == 0:
            sock.close()
            command.close()
            for other, pidfd in running.values():
                other.close()
                if pidfd is not None:
                    os.close(pidfd)
            return request, fds, dispositions, mask
        for fd in fds:
            os.close(fd)
        _send(command, {"pid": pid})
        running[pid] = (command, pidfd_open(pid) if pidfd_open else None)


def _kill_tree_here(pid: int) -> None:
    try:
        import psutil

        processes = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
    except Exception:
        os.kill(pid, signal.SIGKILL)
        return
    for process in processes:
        with contextlib.suppress(Exception):
            process.kill()


def _stdio(fd: int, name: str, write: bool, unbuffered: bool, like):
    """sys.stdin/stdout/stderr as CPython's create_stdio makes them."""
    import io

    if not _is_open(fd):
        return None
    buffering = 0 if (unbuffered and write) else -1
    buffer = io.open(fd, "wb" if write else "rb", buffering, closefd=False)  # noqa: SIM115 (the process's own)
    raw = buffer if buffering == 0 else buffer.raw
    raw.name = name
    line_buffering = (not unbuffered) and (os.isatty(fd) or fd == 2)
    return io.TextIOWrapper(
        buffer,
        encoding=like.encoding,
        errors=like.errors,
        newline="\n",
        line_buffering=line_buffering,
        write_through=unbuffered,
    )


def _become(request: dict, fds: list, dispositions: dict, mask, changes: list) -> None:
    """In the forked child: make this process `python -m <module> <args>` started by the test."""
    import builtins
    import importlib
    import types

    if request.get("new_session"):  # Popen(start_new_session=True): setsid() before the exec
        os.setsid()
    # signals first: as the server found them when it started (a fresh interpreter's)
    for signum, handler in dispositions.items():
        try:
            if signal.getsignal(signum) is not handler:
                signal.signal(signum, handler)
        except (OSError, ValueError, RuntimeError, TypeError):
            pass
    signal.pthread_sigmask(signal.SIG_SETMASK, mask)

    server_streams = {name: getattr(sys, name) for name in ("stdin", "stdout", "stderr")}
    targets = (1, 2) if request.get("stdin_closed") else (0, 1, 2)
    for fd, target in zip(fds, targets, strict=True):
        os.dup2(fd, target)
    for fd in fds:
        if fd not in targets:
            os.close(fd)
    if request.get("stdin_closed"):
        os.close(0)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    for change in changes:  # what the preloaded imports did to the environment, done to this one
        if change[0] == "set":
            os.environ[change[1]] = change[2]
        else:
            os.environ.pop(change[1], None)
    _rederive()  # what the imports kept from XDG_CACHE_HOME, from this environment
    _take_process_state(request)

    unbuffered = bool(os.environ.get("PYTHONUNBUFFERED"))
    sys.stdin = sys.__stdin__ = _stdio(0, "<stdin>", False, unbuffered, server_streams["stdin"])
    sys.stdout = sys.__stdout__ = _stdio(1, "<stdout>", True, unbuffered, server_streams["stdout"])
    sys.stderr = sys.__stderr__ = _stdio(2, "<stderr>", True, unbuffered, server_streams["stderr"])

    module = request["module"]
    sys.argv = ["-m", *request["args"]]  # runpy puts the module's file in argv[0], as -m does
    sys.orig_argv = [sys.executable, "-m", module, *request["args"]]
    if not getattr(sys.flags, "safe_path", False):  # -m puts the working directory first (unless -P)
        sys.path[0] = os.getcwd()
    importlib.invalidate_caches()

    # what a fresh process draws afresh
    numpy = sys.modules.get("numpy")
    if numpy is not None and "numpy.random" in sys.modules:
        numpy.random.seed()
    if "multiprocessing" in sys.modules:
        import multiprocessing

        multiprocessing.current_process().authkey = os.urandom(32)

    main = types.ModuleType("__main__")
    main.__builtins__ = builtins  # type: ignore[attr-defined]
    main.__annotations__ = {}
    sys.modules["__main__"] = main


# ---- multiprocessing's forkserver, forked from the command instead of exec'd -------------------------
# bench's elastic launcher (DDP, sweeps, the doctor) and an S3 loader start multiprocessing's forkserver:
# a fresh interpreter that imports torch and bench's launcher, ~2.3 CPU-s, ~45 times in a whole-suite run.
# So a bench or bench.doctor command first forks a spare child (the "zygote": this server's imports, the
# command's environment, nothing of bench's own, one thread, idle and deaf to Ctrl-C as a forkserver is).
# When the command starts its forkserver, multiprocessing.util.spawnv_passfds hands the zygote what the
# exec would have had, as of that moment: the `-c` line, the fds it names (at the same numbers) and stdio,
# the environment, working directory, signal mask, ignored signals, affinity, umask, limits and niceness;
# the zygote closes every other fd, as the exec does, and runs the line: the forkserver, the command's
# child in its process group, as an exec'd one is. A second forkserver, one started by another process (a
# rank, a loader worker), an environment that differs from the zygote's where the imports or a C library
# read it, or a zygote gone: the exec, as before. An unused zygote ends when the command does (EOF on its
# socket).
FORKSERVER_LINE = "from multiprocessing.forkserver import main;"
ZYGOTE_MODULES = ("bench", "bench.doctor")  # the commands that start one (bench.compare's children are execs)


def _start_zygote(value_keys: frozenset, presence_keys: frozenset, dispositions: dict) -> None:
    import multiprocessing.util

    command_end, zygote_end = socket.socketpair()
    environ = dict(os.environ)
    zygote = os.fork()
    if zygote == 0:
        command_end.close()
        _zygote(zygote_end, dispositions)  # never returns
    zygote_end.close()
    exec_it = multiprocessing.util.spawnv_passfds
    command = os.getpid()

    def spawnv_passfds(path, args, passfds):
        line = args[-1] if len(args) > 1 and args[-2] == "-c" else ""
        if (
            os.getpid() != command
            or command_end.fileno() < 0
            or not line.startswith(FORKSERVER_LINE)
            or _unsafe_difference(environ, dict(os.environ), value_keys, presence_keys)
        ):
            return exec_it(path, args, passfds)
        stdio = [fd for fd in (0, 1, 2) if _is_open(fd)]
        ignored = [int(s) for s in signal.valid_signals() if _ignored(s)]
        state = {
            "line": line,
            "fds": [*stdio, *passfds],
            "env": dict(os.environ),
            "cwd": os.getcwd(),
            "mask": [int(s) for s in signal.pthread_sigmask(signal.SIG_BLOCK, [])],
            "ignored": ignored,
            **_process_state(),
        }
        try:
            _send(command_end, state, fds=state["fds"])
            reply, _fds = _receive(command_end)
        except OSError:
            reply = None
        command_end.close()
        if reply is None:  # it could not: gone, or it failed before it was the forkserver
            with contextlib.suppress(ChildProcessError):
                os.waitpid(zygote, 0)
            return exec_it(path, args, passfds)
        return zygote

    multiprocessing.util.spawnv_passfds = spawnv_passfds


def _ignored(signum) -> bool:
    with contextlib.suppress(OSError, ValueError):
        return signal.getsignal(signum) == signal.SIG_IGN
    return False


def _zygote(sock: socket.socket, dispositions: dict) -> None:
    """Wait for the command's forkserver request, then become that forkserver; exits, never returns."""
    import builtins
    import fcntl

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        state, fds = _receive(sock, maxfds=16)
    except OSError:
        state = None
    if state is None:
        os._exit(0)
    try:
        # what the exec keeps (ignored signals, the mask); the rest as a fresh interpreter starts them
        # (the server's record: SIGPIPE ignored, SIGINT's handler, coverage.py's SIGTERM one under it)
        for signum, fresh in dispositions.items():
            wanted = signal.SIG_IGN if signum in state["ignored"] else fresh
            with contextlib.suppress(OSError, ValueError, TypeError):
                if signal.getsignal(signum) != wanted:
                    signal.signal(signum, wanted)
        signal.pthread_sigmask(signal.SIG_SETMASK, [signal.Signals(s) for s in state["mask"]])
        os.environ.clear()
        os.environ.update(state["env"])
        os.chdir(state["cwd"])
        _take_process_state(state)
        # the fds moved above every number in use or named, every other fd closed, then each at its number
        named = [int(n) for n in os.listdir("/proc/self/fd")]
        floor = max([*state["fds"], *named]) + 1
        high = [fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, floor) for fd in fds]
        for fd in named:
            if fd not in high and fd != sock.fileno():
                with contextlib.suppress(OSError):
                    os.close(fd)
        for fd, target in zip(high, state["fds"], strict=True):
            os.dup2(fd, target)  # (inheritable, as the exec's passed fds are)
            os.close(fd)
        _send(sock, {"ready": True})
        sock.close()
    except BaseException:
        os._exit(1)
    sys.argv, sys.orig_argv = ["-c"], [sys.executable, "-c", state["line"]]
    if not getattr(sys.flags, "safe_path", False):
        sys.path[0] = ""  # -c puts the working directory first (unless -P)
    code = 0
    try:
        exec(compile(state["line"], "<string>", "exec"), {"__name__": "__main__", "__builtins__": builtins})
    except SystemExit as exc:  # the forkserver's way out: its alive pipe reached EOF
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:
        import traceback

        traceback.print_exc()
        code = 1
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)  # not the command's atexit handlers (MLflow's would end its run)


def _run_as_main(module: str) -> None:
    """What `python -m module` does once it has started; SystemExit leaves through here."""
    import runpy

    try:
        runpy._run_module_as_main(module, alter_argv=True)  # what python -m calls
    except SystemExit:
        raise
    except BaseException as exc:  # printed as python prints an uncaught exception: from runpy's frame on
        traceback = exc.__traceback__.tb_next if exc.__traceback__ is not None else None
        exc.__traceback__ = traceback
        sys.last_type, sys.last_value, sys.last_traceback = type(exc), exc, traceback
        sys.excepthook(type(exc), exc, traceback)
        if isinstance(exc, KeyboardInterrupt):  # python ends by SIGINT after its cleanup
            import atexit
            import threading

            threading._shutdown()
            atexit._run_exitfuncs()
            for stream in (sys.stdout, sys.stderr):
                with contextlib.suppress(Exception):
                    stream.flush()
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGINT)
        del exc, traceback
        raise SystemExit(1) from None


# Threads an import may start that are fork-safe by design: pyarrow's private jemalloc (mlflow imports
# pandas, which imports pyarrow) runs a background purging thread; jemalloc's fork handlers take its
# locks around fork() and the child goes on without that thread.
FORK_SAFE_THREADS = frozenset({"jemalloc_bg_thd"})


def _threads() -> list:
    """The names of this process's threads other than the main one and the fork-safe ones."""
    import threading

    if not os.path.isdir("/proc/self/task"):
        return [t.name for t in threading.enumerate() if t is not threading.main_thread()]
    names = []
    for task in os.listdir("/proc/self/task"):
        if int(task) == os.getpid():
            continue
        try:
            with open(f"/proc/self/task/{task}/comm") as comm:
                name = comm.read().strip()
        except OSError:
            continue
        if name not in FORK_SAFE_THREADS:
            names.append(name)
    return names


def _server_main(fd: int) -> None:
    import gc
    import time

    sock = socket.socket(fileno=fd)
    # A Ctrl-C at a terminal (or a SIGTERM to the suite's process group) reaches this server too: it
    # would die in its loop, leave its folder, and its worker find it gone. Held off while it imports
    # (so they see the dispositions a fresh interpreter has), ignored once it serves; it ends when its
    # worker does (EOF, or a new parent) and removes its folder then.
    inherited_mask = signal.pthread_sigmask(signal.SIG_BLOCK, STOPS_OUTLIVED)

    started = time.monotonic()
    real = {name: getattr(sys, name) for name in ("stdout", "stderr", "__stdout__", "__stderr__")}
    for name, stream in real.items():
        setattr(sys, name, _LateStream(name, stream))
    value_keys, presence_keys, iterations, changes, undo, foreign = _record_env_reads()
    try:
        for name in PRELOAD:
            __import__(name)
    except BaseException as exc:
        undo()
        for name, stream in real.items():
            setattr(sys, name, stream)
        _send(sock, {"error": f"importing {name}: {exc!r}"})
        raise
    undo()
    for name, stream in real.items():
        setattr(sys, name, stream)
    # The signal dispositions and mask every child starts from: a fresh interpreter's (the server
    # was started by the test side as an exec'd child is), as its imports left them (they set none
    # from Python); the server's own (STOPS_OUTLIVED ignored, below) are not theirs: a child restores these first.
    dispositions = {}
    for signum in signal.valid_signals():
        with contextlib.suppress(OSError, ValueError):
            dispositions[signum] = signal.getsignal(signum)
    mask = inherited_mask  # what a child restores: these blocked only if the server was started so

    import multiprocessing.process
    import tempfile

    if tempfile.tempdir is not None or "tempdir" in multiprocessing.process.current_process()._config:
        value_keys.update(TEMP_DIR_NAMES)  # a temp dir found while importing: its children would share it
    # a REDERIVED variable forks only when read where REDERIVED says, and what the imports keep from
    # it is what _derived() computes from this environment (else a child's could differ: they exec)
    kept = all(
        getattr(sys.modules[module], attribute, None) == value for (module, attribute), value in _derived().items()
    )
    rederived = sorted(name for name in REDERIVED if kept and name not in foreign)
    own = sorted(m for m in sys.modules if m.split(".")[0] in ("bench", "hydra_plugins"))
    threads = _threads()
    sys.stdout.flush()
    sys.stderr.flush()
    printed = os.fstat(1).st_size if os.path.isfile("/proc/self/fd/1") else 0
    problem = ""
    if own:
        problem = f"its imports imported bench's own modules: {own[:5]}"
    elif threads:
        problem = f"threads after its imports (a fork would lose them): {threads}"
    elif printed:
        problem = "its imports printed something (a fresh process would print it, a forked child would not)"
    print(
        f"forked_bench: imported {len(PRELOAD)} libraries in {time.monotonic() - started:.1f} s; "
        f"{len(value_keys)} variables read, {len(presence_keys)} checked; iterated by: {iterations}; "
        f"changed: {changes}; derived again in each child: {rederived}",
        flush=True,
    )
    if problem:
        _send(sock, {"error": problem})
        print(f"forked_bench: {problem}", flush=True)
        os._exit(1)
    gc.collect()
    gc.freeze()  # children do not walk (and copy) the preloaded objects in their collections
    # ignored before "ready": once its worker knows it serves, a stop to the group finds it deaf (set
    # after, a Ctrl-C right after the start found SIGINT still only held off: seen on a loaded machine)
    for stop in STOPS_OUTLIVED:
        signal.signal(stop, signal.SIG_IGN)  # (one held off while importing is dropped here)
    signal.pthread_sigmask(signal.SIG_SETMASK, inherited_mask)
    _send(
        sock,
        {
            "ready": True,
            "value_keys": sorted(value_keys),
            "presence_keys": sorted(presence_keys),
            "rederived": rederived,
        },
    )
    request, fds, dispositions, mask = _serve(sock, dispositions, mask)
    # the child: from here this process is `python -m <module>`
    _become(request, fds, dispositions, mask, changes)
    if request["module"] in ZYGOTE_MODULES:
        _start_zygote(frozenset(value_keys), frozenset(presence_keys), dispositions)
    _run_as_main(request["module"])


if __name__ == "__main__":
    _server_main(int(sys.argv[1]))


def left_alive(processes: list, wait_s: float = 60.0) -> list:
    """The processes (psutil) still there after waiting up to `wait_s` for them to go (a zombie is
    gone): what the signal tests assert is empty."""
    import psutil

    deadline = time.monotonic() + wait_s
    while True:
        alive = []
        for process in processes:
            try:
                if process.is_running() and process.status() != psutil.STATUS_ZOMBIE:
                    alive.append(process)
            except psutil.NoSuchProcess:
                pass
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.1)
