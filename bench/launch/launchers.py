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

What each worker runs (worker_entry, its rank log, pid file and step watchdog) is below, at the end.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import signal
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

import psutil
from torch.distributed.elastic.multiprocessing.errors import record  # a worker's exception reaches the launcher

from bench.config import BenchConfig
from bench.config.schema import DistributedConfig
from bench.errors import WorkerFailure
from bench.machine.children import private_tempdir, process_identity, start_forkserver_deaf_to_ctrl_c
from bench.machine.fitness import ROOT_ENV
from bench.rank_context import RankContext, free_port, outside_launcher_context
from bench.secrets import redact_output

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
        multiprocessing.set_forkserver_preload(["bench.launch.launchers", *scenario.preload(config)])
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
    """`in_sweep`: a job of a sweep whose other jobs run in this process too (bench.launch says why)."""
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


# ---- What each process started by the elastic launcher runs (module level: forkserver pickles it): its
# log (rank<N>.log; rank 0 also to stderr), its pid file (read by the reaper above), and the
# StepWatchdog that ends it when its training steps have stopped or its launcher is gone.
#
# A peer that died or hung leaves the others blocked inside an all-reduce, and not every backend
# honours its timeout there (gloo inside DDP's backward does not); a rank that exits is something
# the launcher sees, and it then stops the rest. The watchdog is armed at the first step, so model
# building and data start-up are not counted.
#
# A launcher killed outright (SIGKILL, the OOM killer) cannot stop its workers: each checks every
# second that the process that launched it is still there (the same pid with the same start
# time, so a reused pid does not count) and ends itself when it is not.
EXIT_HUNG = 124  # a rank whose steps stopped (the exit code `timeout` uses)
EXIT_ORPHANED = 125  # a rank whose launcher is gone
RANK_LOG_FORMAT = "[%(asctime)s][rank{rank}][%(name)s][%(levelname)s] %(message)s"
NOISY_LOGGERS = ("mlflow", "urllib3", "alembic", "matplotlib")


@record
def worker_entry(config: BenchConfig, out_dir: str, workers_dir: str, launcher_pid: int) -> Any:
    # Ctrl-C reaches the whole process group, and the launcher then stops its workers with the
    # same signal: a worker ends at once, as on SIGTERM, instead of raising KeyboardInterrupt twice
    # (the second one inside torch's error recording printed a traceback). The launcher reports
    # the interruption; a run that checkpoints on a signal installs its own handler later.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    os.environ[ROOT_ENV] = str(launcher_pid)  # the run's process tree, for the fit-to-measure watch
    ctx = RankContext(int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"]), int(os.environ["WORLD_SIZE"]))
    setup_rank_logging(Path(out_dir), ctx.rank)
    log.info("worker for rank %d/%d started (pid %d)", ctx.rank, ctx.world_size, os.getpid())
    # lets the launcher name a rank that died without a word (SIGKILL, the OOM killer)
    path = pid_file(Path(workers_dir), ctx.rank)  # this launch's own folder: no other launch reads it
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"{os.getpid()} {ctx.local_rank}")
    watchdog = StepWatchdog(config.distributed.timeout_s, ctx.rank, launcher_pid)
    return config.scenario.run_rank(config, ctx, Path(out_dir), heartbeat=watchdog.beat)


def pid_file(workers_dir: Path, rank: int) -> Path:
    return workers_dir / f"rank{rank}.pid"


def setup_rank_logging(out_dir: Path, rank: int, own_process: bool = True) -> None:
    """A worker's stdout is pointed at stderr so the job's stdout keeps only the final line.
    `own_process=False`: this process also reports (rank 0 under torchrun): keep its streams
    and Hydra's handlers."""
    redact_output()  # a spawned rank starts without its parent's redaction
    out_dir.mkdir(parents=True, exist_ok=True)
    formatter = logging.Formatter(RANK_LOG_FORMAT.format(rank=rank))
    root = logging.getLogger()
    handlers: List[logging.Handler] = [logging.FileHandler(out_dir / f"rank{rank}.log")]
    if own_process:
        os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
        for handler in list(root.handlers):
            root.removeHandler(handler)
        if rank == 0:
            handlers.append(logging.StreamHandler(sys.stderr))
    for handler in handlers:
        handler.setFormatter(formatter)
        root.addHandler(handler)
    root.setLevel(logging.INFO)
    for noisy in NOISY_LOGGERS:
        logging.getLogger(noisy).setLevel(logging.WARNING)


class StepWatchdog:
    def __init__(self, timeout_s: float, rank: int, launcher_pid: Optional[int] = None):
        self.timeout_s, self.rank = float(timeout_s), rank
        self.launcher = process_identity(launcher_pid) if launcher_pid else None
        self._last: Optional[float] = None
        self._thread = threading.Thread(target=self._watch, name="bench-step-watchdog", daemon=True)
        self._thread.start()

    def beat(self) -> None:
        """Called after every training step."""
        self._last = time.monotonic()

    def _watch(self) -> None:
        while True:
            time.sleep(min(1.0, self.timeout_s / 4))
            if self._last is not None and time.monotonic() - self._last > self.timeout_s:
                self._end(
                    EXIT_HUNG,
                    f"no training step finished for {self.timeout_s:.0f} s (distributed.timeout_s): "
                    "a peer died or hung",
                )
            if self.launcher is not None and process_identity(self.launcher[0]) != self.launcher:
                self._end(EXIT_ORPHANED, f"the process that launched it (pid {self.launcher[0]}) is gone")

    def _end(self, code: int, why: str) -> None:
        log.error("rank %d: %s; ending this rank", self.rank, why)
        logging.shutdown()
        os._exit(code)
