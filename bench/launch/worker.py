"""What each process started by the elastic launcher runs (module level: forkserver pickles it)."""

from __future__ import annotations

import logging
import os
import signal
from pathlib import Path
from typing import Any

from torch.distributed.elastic.multiprocessing.errors import record  # a worker's exception reaches the launcher

from bench.config import BenchConfig
from bench.launch.rank_logs import setup_rank_logging
from bench.launch.reaper import pid_file
from bench.launch.watchdog import StepWatchdog
from bench.machine.fitness import ROOT_ENV
from bench.rank_context import RankContext

log = logging.getLogger("bench")


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
