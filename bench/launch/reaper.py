"""Once one launched worker has ended, SIGKILL the ones still there after a short grace period.

The elastic launcher gives survivors 30 s after SIGTERM, and a stopped (or wedged) process
never acts on SIGTERM: without this a failed job could outlive its timeout. Workers are known
by the pid files they write in their launch's own folder (workers/<launch>/rank<N>.pid), never by
scanning processes: a short-lived helper process must not count as a worker that ended, and a
launch never reads (or kills) the workers of another launch given the same run directory.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

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


def pid_file(workers_dir: Path, rank: int) -> Path:
    return workers_dir / f"rank{rank}.pid"


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
