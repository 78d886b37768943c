"""How the ranks of a run start: in this process, as workers of torch's elastic launcher, or
joined to an outside launcher (torchrun, srun, Kubernetes) that started them already;
`select_launcher` is the one place that decides which (bench.launch says when).

Each launcher runs `scenario.run_rank` once per rank and hands back what rank 0 returned
(None on a process that does not hold rank 0). `reports` says whether this process reports
the run (final line, files, MLflow); `who` names it in a failure line when it does not.

A failed launch: once one launched worker has ended, SIGKILL the ones still there after a short
grace period, then say in one line which worker failed first and how (describe_failure).

The elastic launcher gives survivors 30 s after SIGTERM, and a stopped (or wedged) process
never acts on SIGTERM: without this a failed job could outlive its timeout. Workers are known
by the pid files they write in their launch's own folder (workers/<launch>/rank<N>.pid), never by
scanning processes: a short-lived helper process must not count as a worker that ended, and a
launch never reads (or kills) the workers of another launch given the same run directory.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import signal
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

import psutil

from bench.config import BenchConfig
from bench.config.schema import DistributedConfig
from bench.errors import WorkerFailure
from bench.launch.worker import EXIT_HUNG, EXIT_ORPHANED, setup_rank_logging, worker_entry
from bench.rank_context import RankContext, free_port, outside_launcher_context

log = logging.getLogger("bench")
RankPid = Optional[Tuple[int, int]]  # (rank, pid) of a worker, if one is named


class Launcher:
    reports = True
    who = "this process"

    def run(self, scenario: Any, config: BenchConfig, out_dir: Path) -> Optional[Any]:
        raise NotImplementedError


class InProcess(Launcher):
    """One rank, this process: no process group, no DDP wrapper (the scaling baseline)."""

    def run(self, scenario: Any, config: BenchConfig, out_dir: Path) -> Optional[Any]:
        return scenario.run_rank(config, RankContext(), out_dir)


class Joined(Launcher):
    """An outside launcher set RANK/WORLD_SIZE/LOCAL_RANK: this process is that rank; rank 0 reports."""

    def __init__(self, ctx: RankContext):
        self.ctx, self.reports, self.who = ctx, ctx.is_reporter, f"rank {ctx.rank}"

    def run(self, scenario: Any, config: BenchConfig, out_dir: Path) -> Optional[Any]:
        setup_rank_logging(out_dir, self.ctx.rank, own_process=not self.ctx.is_reporter)
        return scenario.run_rank(config, self.ctx, out_dir)


SIGNALS_TORCH_TAKES = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)


def get_method_name(depth: int = 2) -> str:
    """torch's rendezvous get_method_name, read from the frame itself: torch's calls inspect.stack(),
    twice an event, which reads every frame's source lines (0.4-1.5 CPU-s of a launch)."""
    with contextlib.suppress(ValueError):  # a shallower stack than depth
        return sys._getframe(depth).f_code.co_name
    return "no_method_name"


def name_events_cheaply() -> None:
    """torch's rendezvous names its log events with get_method_name above (the same names)."""
    from torch.distributed.elastic.rendezvous import dynamic_rendezvous

    dynamic_rendezvous.get_method_name = get_method_name


class Elastic(Launcher):
    """nproc_per_node workers on this node: torch's elastic launcher, c10d rendezvous (static
    with several nodes, so node_rank fixes the ranks and node 0 holds rank 0), no restarts."""

    def __init__(self, distributed: DistributedConfig):
        self.reports, self.who = distributed.node_rank == 0, f"node {distributed.node_rank}"

    def run(self, scenario: Any, config: BenchConfig, out_dir: Path) -> Optional[Any]:
        from torch.distributed.elastic.multiprocessing import DefaultLogsSpecs
        from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
        from torch.distributed.launcher.api import LaunchConfig, elastic_launch

        dist = config.distributed
        # everything this launch keeps about its workers (pid files, torch's error files) is under a
        # folder of its own: another launch given the same run directory never reads or kills them
        launch = uuid.uuid4().hex[:12]
        workers = out_dir / "workers" / launch
        endpoint = dist.rdzv_endpoint or f"127.0.0.1:{free_port()}"
        rdzv_configs: Dict[str, Any] = {"timeout": int(dist.timeout_s)}
        backend = "c10d"
        if dist.nnodes > 1:
            # static rendezvous: node_rank fixes the global ranks, so rank 0 (the reporter) is on
            # node 0, whose agent hosts the store at rdzv_endpoint; bench's own (a signal ends its
            # wait, which says which hosts it waits for)
            from bench.launch.rendezvous import hosts_backend

            backend = hosts_backend()
            rdzv_configs["rank"] = dist.node_rank
        launch_config = LaunchConfig(
            min_nodes=dist.nnodes,
            max_nodes=dist.nnodes,
            nproc_per_node=dist.nproc_per_node,
            # every node of one run must name the same run: derived from the shared endpoint
            run_id=f"bench-{endpoint.replace(':', '-')}" if dist.nnodes > 1 else f"bench-{launch}",
            rdzv_backend=backend,
            rdzv_endpoint=endpoint,
            rdzv_configs=rdzv_configs,
            max_restarts=0,
            monitor_interval=0.2,
            start_method="forkserver",
            logs_specs=DefaultLogsSpecs(log_dir=str(workers)),
            # seconds between SIGTERM and SIGKILL for the survivors of a failed rank (torch >= 2.13;
            # older torch waits its own default, and bench's SurvivorReaper ends a stopped rank)
            **accepted_by(LaunchConfig, shutdown_timeout=5),
        )
        # The elastic agent logs its launch config and every failure at length; we report a failure in
        # one line. Its modules set their own logger levels, so each is quieted, not just the parent.
        elastic = [n for n in logging.root.manager.loggerDict if n.startswith("torch.distributed.elastic")]
        for name in ["torch.distributed.elastic", *elastic]:
            logging.getLogger(name).setLevel(logging.CRITICAL)
        logging.getLogger("torch.multiprocessing").setLevel(logging.ERROR)
        name_events_cheaply()
        # Workers fork from one server process that has torch imported already (this module's worker
        # imports it; the scenario adds its own modules): a job's workers start in well under a second
        # instead of paying torch's import each (spawn). The server is a fresh interpreter, so forking
        # from it is safe with CUDA; later sweep jobs reuse it.
        multiprocessing.set_forkserver_preload(["bench.launch.worker", *scenario.preload(config)])
        start_forkserver_deaf_to_ctrl_c()
        reaper = SurvivorReaper(dist.nproc_per_node, workers)
        # torch's agent installs its own handlers (a signal raises its SignalException) and leaves them:
        # once the launch is over, Ctrl-C is this command's again (the doctor's next rung, a sweep's next job)
        handlers = {sig: signal.getsignal(sig) for sig in SIGNALS_TORCH_TAKES}
        try:
            with private_tempdir():
                returns = elastic_launch(launch_config, worker_entry)(config, str(out_dir), str(workers), os.getpid())
        except ChildFailedError as exc:
            reaper.stop()
            first = first_to_die(reaper.first_gone, workers)
            ranks = {pid: rank for rank, (pid, _local_rank) in pid_files(workers).items()}
            stopped = next(((ranks[pid], pid) for pid in reaper.stopped if pid in ranks), None)
            raise WorkerFailure(describe_failure(exc, first, reaper.killed, stopped)) from None
        finally:
            reaper.stop()
            for sig, handler in handlers.items():
                if handler is not None and threading.current_thread() is threading.main_thread():
                    signal.signal(sig, handler)  # (None: a handler not set from Python, left as it is)
        return returns.get(0)


def select_launcher(config: BenchConfig, has_ranks: bool, in_sweep: bool) -> Launcher:
    if not has_ranks:
        return InProcess()
    if (joined := outside_launcher_context(config.distributed)) is not None:
        return Joined(joined)
    if in_sweep or config.distributed.world_size > 1:
        return Elastic(config.distributed)
    return InProcess()


def accepted_by(cls: Any, **optional: Any) -> Dict[str, Any]:
    """The keyword arguments among `optional` that this torch's `cls` (a dataclass) takes: newer
    torch adds fields, and the CUDA images users run lag the newest torch by several releases."""
    import dataclasses

    return {key: value for key, value in optional.items() if key in {f.name for f in dataclasses.fields(cls)}}


def start_forkserver_deaf_to_ctrl_c() -> None:
    """Start multiprocessing's forkserver (if it is not running) with SIGINT ignored, as it would
    ignore it itself once its preload imports are done: a Ctrl-C to the process group while it
    imports torch printed a KeyboardInterrupt traceback from it (issue 28). It exits when this
    process does (EOF on its pipe) or, while it still imports, when this one exits (killed at exit:
    it was left importing torch for seconds after an interrupted command); its workers take SIGINT
    back (worker_entry)."""
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
    pid = getattr(forkserver._forkserver, "_forkserver_pid", None)
    if pid and pid not in _FORKSERVERS_KILLED_AT_EXIT:
        _FORKSERVERS_KILLED_AT_EXIT.add(pid)
        atexit.register(_kill_quietly, pid)


_FORKSERVERS_KILLED_AT_EXIT: set = set()


def _kill_quietly(pid: int) -> None:
    with contextlib.suppress(OSError):
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)


# A Unix socket's path holds at most 107 bytes; the forkserver's is <tempdir>/pymp-XXXXXXXX/listener-XXXXXXXX.
SOCKET_PATH_MAX = 107
SOCKET_SUFFIX = len("/pymp-xxxxxxxx/listener-xxxxxxxx")
SHORT_TEMP_DIRS = ("/tmp", "/var/tmp", "/dev/shm")  # where multiprocessing's temp dir goes when $TMPDIR is too long


def make_multiprocessing_temp_dir() -> None:
    """multiprocessing's temp dir, made under $TMPDIR unless that is too long to hold the
    forkserver's socket ("OSError: AF_UNIX path too long" from every rank): then under the
    shortest system temp dir that is writable."""
    import multiprocessing.util

    too_long = len(tempfile.gettempdir()) + SOCKET_SUFFIX > SOCKET_PATH_MAX
    previous = tempfile.tempdir
    if too_long:
        tempfile.tempdir = next((d for d in SHORT_TEMP_DIRS if os.access(d, os.W_OK | os.X_OK)), previous)
    try:
        multiprocessing.util.get_temp_dir()
    finally:
        tempfile.tempdir = previous


LAUNCH_PREFIX = "bench-launch-"


@contextlib.contextmanager
def private_tempdir() -> Iterator[None]:
    """torch.multiprocessing names a `pytorch-errorfile-*.pickle` per worker in the launcher's temp
    directory; a worker that raises writes its traceback there and nothing removes it: $TMPDIR
    filled with tracebacks of failed runs. During the launch the launcher's tempfile directory is
    one of its own, removed afterwards; one left by a SIGKILLed launcher (its owner file names a
    pid that is gone) is removed by the next launch. multiprocessing's own temp dir (the
    forkserver's socket, reused by later sweep jobs) is made first, where it always is, so it
    outlives this one."""
    import shutil

    from bench.machine.children import clean_leftovers, owned_tempdir, semaphores_noted_in

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


class SurvivorReaper:
    GRACE_S = 2.0

    def __init__(self, expected: int, workers_dir: Path):
        self.expected, self.workers_dir = expected, workers_dir
        self.first_gone: List[int] = []  # pids of the first worker(s) seen to end
        self.killed: List[int] = []  # pids this reaper killed: never the cause of a failure
        self.stopped: List[int] = []  # pids seen stopped (SIGSTOP, a debugger): they hang their peers
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="bench-reaper", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _watch(self) -> None:
        workers: Dict[int, Any] = {}  # pid -> psutil.Process, or None when it was gone at first sight
        first_exit: Optional[float] = None
        # Polled often: which worker ends first tells the root cause from the ranks that failed
        # because of it (the launcher reports only one failure, often a peer's).
        while not self._stop.wait(0.05):
            for pid, _local_rank in pid_files(self.workers_dir).values():
                if pid not in workers:
                    workers[pid] = None  # gone at first sight, unless psutil finds it
                    with contextlib.suppress(psutil.Error):
                        workers[pid] = psutil.Process(pid)
            states = {pid: _state(worker) for pid, worker in workers.items()}
            for pid, state in states.items():
                if state in ("stopped", "tracing-stop") and pid not in self.stopped:
                    self.stopped.append(pid)
            alive = [workers[pid] for pid, state in states.items() if state not in (None, "zombie")]
            gone = [pid for pid, state in states.items() if state in (None, "zombie")]
            if gone and not self.first_gone:
                self.first_gone = gone
            if len(workers) < self.expected or not gone:
                continue
            first_exit = first_exit or time.monotonic()
            if alive and time.monotonic() - first_exit > self.GRACE_S:
                for worker in alive:
                    log.warning("a worker ended; killing pid %d, still running after %.0f s", worker.pid, self.GRACE_S)
                    self.killed.append(worker.pid)
                    with contextlib.suppress(psutil.Error):  # it ended by itself meanwhile
                        worker.kill()


def pid_files(workers_dir: Path) -> Dict[int, Tuple[int, str]]:
    """rank -> (pid, local rank), from this launch's pid files (its folder is its own: every file in
    it is this launch's). One being written right now is read at the next call."""
    found = {}
    for path in workers_dir.glob("rank*.pid"):
        with contextlib.suppress(OSError, ValueError):
            pid, local_rank = path.read_text().split()
            found[int(path.stem[len("rank") :])] = (int(pid), local_rank)
    return found


def first_to_die(pids: List[int], workers_dir: Path) -> RankPid:
    """(rank, pid) of the worker that ended first without an error of its own, if any.

    `pids` are the workers the reaper saw gone at its first sighting of a death (several when
    they went within one poll); a rank that raised left an error.json (torch's @record), a
    rank killed by a signal left none, and that one is the root cause."""
    for rank, (pid, local_rank) in sorted(pid_files(workers_dir).items()):
        if pid in pids and not list(workers_dir.glob(f"*/attempt_*/{local_rank}/error.json")):
            return rank, pid
    return None


def _state(process: Any) -> Optional[str]:
    """psutil's status of a worker ("running", "sleeping", "stopped", "zombie", ...), None when gone."""
    if process is not None:
        with contextlib.suppress(psutil.Error):
            return process.status()
    return None


def describe_failure(exc: Any, first: RankPid = None, killed: Sequence[int] = (), stopped: RankPid = None) -> str:
    """One line from the elastic launcher's ChildFailedError: the rank that failed first, its exit code or
    signal, its error. `first` is (rank, pid) of the worker seen to end first, if the launcher blamed another;
    `killed` are the pids the reaper killed after that: survivors, never the cause;
    `stopped` is (rank, pid) of a worker seen stopped (SIGSTOP, a debugger): its peers then wait
    for it in a collective until the timeout, so it, not the rank that timed out, is the cause."""
    failures = {r: f for r, f in exc.failures.items() if f.pid not in killed} or exc.failures
    rank, failure = min(failures.items(), key=lambda item: (item[1].exitcode >= 0, item[1].timestamp, item[0]))
    if stopped is not None and stopped[0] != rank:
        return (
            f"worker rank {stopped[0]} (pid {stopped[1]}) was stopped (SIGSTOP or a debugger) and stopped "
            f"stepping; rank {rank} then gave up waiting for it after distributed.timeout_s: {_detail(failure)}"
        )
    if first is not None and first[0] != rank and failure.exitcode >= 0 and failure.exitcode != EXIT_HUNG:
        return (
            f"worker rank {first[0]} (pid {first[1]}) died first, without an error of its own (killed by a "
            f"signal such as SIGKILL, or by the OOM killer); rank {rank} then failed: {_detail(failure)}"
        )
    who = f"worker rank {rank} (pid {failure.pid})"
    if failure.exitcode == EXIT_ORPHANED:
        return f"{who} ended because its launcher was gone"
    if failure.exitcode == EXIT_HUNG:
        return f"{who} saw no training step finish for distributed.timeout_s: a rank died or hung"
    if failure.exitcode < 0:
        try:
            name = signal.Signals(-failure.exitcode).name
        except ValueError:
            name = f"signal {-failure.exitcode}"
        return f"{who} was killed by {name}"
    return f"{who} exited with code {failure.exitcode}: {_detail(failure)}"


def _detail(failure: Any) -> str:
    message = failure.message.get("message", "") if isinstance(failure.message, dict) else failure.message
    lines = str(message or "").strip().splitlines()
    detail = lines[0] if lines else "no error message"
    return "see its log in the job dir" if detail.startswith("Process failed with exitcode") else detail
