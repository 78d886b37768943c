"""Every rank logs to <job dir>/rank<N>.log; rank 0 also to stderr."""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path
from typing import List

from bench.secrets import redact_output

RANK_LOG_FORMAT = "[%(asctime)s][rank{rank}][%(name)s][%(levelname)s] %(message)s"
NOISY_LOGGERS = ("mlflow", "urllib3", "alembic", "matplotlib")


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
