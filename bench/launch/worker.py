"""What each process started by the elastic launcher runs (module level: forkserver pickles it): its
log (rank<N>.log; rank 0 also to stderr), its pid file (read by bench.launch.launchers), and the
StepWatchdog that ends it when its training steps have stopped or its launcher is gone.

A peer that died or hung leaves the others blocked inside an all-reduce, and not every backend
honours its timeout there (gloo inside DDP's backward does not); a rank that exits is something
the launcher sees, and it then stops the rest. The watchdog is armed at the first step, so model
building and data start-up are not counted.

A launcher killed outright (SIGKILL, the OOM killer) cannot stop its workers: each checks every
second that the process that launched it is still there (the same pid with the same start
time, so a reused pid does not count) and ends itself when it is not.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any, List, Optional

from torch.distributed.elastic.multiprocessing.errors import record  # a worker's exception reaches the launcher

from bench.config import BenchConfig
from bench.machine.children import process_identity
from bench.machine.fitness import ROOT_ENV
from bench.rank_context import RankContext
from bench.secrets import redact_output

log = logging.getLogger("bench")

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
