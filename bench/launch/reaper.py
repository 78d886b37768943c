"""A failed launch: once one launched worker has ended, SIGKILL the ones still there after a short
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
import signal
import threading
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from bench.launch.worker import EXIT_HUNG, EXIT_ORPHANED

log = logging.getLogger("bench")


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
        if self._thread.is_alive():
            self._thread.join(timeout=5)

    def _watch(self) -> None:
        import psutil

        workers: Dict[int, Any] = {}  # pid -> psutil.Process, or None when it was gone at first sight
        first_exit: Optional[float] = None
        # Polled often: which worker ends first tells the root cause from the ranks that failed
        # because of it (the launcher reports only one failure, often a peer's).
        while not self._stop.wait(0.05):
            for pid, _local_rank in pid_files(self.workers_dir).values():
                if pid not in workers:
                    try:
                        workers[pid] = psutil.Process(pid)
                    except psutil.Error:
                        workers[pid] = None
            alive = []
            for worker in workers.values():
                state = _state(worker)
                if state in ("stopped", "tracing-stop") and worker.pid not in self.stopped:
                    self.stopped.append(worker.pid)
                if state is not None and state != "zombie":
                    alive.append(worker)
            gone = [pid for pid, w in workers.items() if w is None or w not in alive]
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


def first_to_die(pids: List[int], workers_dir: Path) -> Optional[Tuple[int, int]]:
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
    import psutil

    if process is None:
        return None
    try:
        return process.status()
    except psutil.Error:
        return None


def describe_failure(
    exc: Any,
    first: Optional[Tuple[int, int]] = None,
    killed: Sequence[int] = (),
    stopped: Optional[Tuple[int, int]] = None,
) -> str:
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
    if failure.exitcode == EXIT_ORPHANED:
        return f"worker rank {rank} (pid {failure.pid}) ended because its launcher was gone"
    if failure.exitcode == EXIT_HUNG:
        return (
            f"worker rank {rank} (pid {failure.pid}) saw no training step finish for distributed.timeout_s: "
            "a rank died or hung"
        )
    if failure.exitcode < 0:
        try:
            name = signal.Signals(-failure.exitcode).name
        except ValueError:
            name = f"signal {-failure.exitcode}"
        return f"worker rank {rank} (pid {failure.pid}) was killed by {name}"
    return f"worker rank {rank} (pid {failure.pid}) exited with code {failure.exitcode}: {_detail(failure)}"


def _detail(failure: Any) -> str:
    message = failure.message
    if isinstance(message, dict):
        message = message.get("message", "")
    lines = str(message or "").strip().splitlines()
    detail = lines[0] if lines else "no error message"
    return "see its log in the job dir" if detail.startswith("Process failed with exitcode") else detail
