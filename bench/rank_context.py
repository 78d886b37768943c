"""Who this process is among the ranks of a run. Torch-free."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from typing import Optional

from bench.config.schema import Backend, DistributedConfig, DistributedName


@dataclass(frozen=True)
class RankContext:
    rank: int = 0
    local_rank: int = 0
    world_size: int = 1

    @property
    def is_reporter(self) -> bool:
        """Rank 0 reports the run: the final line, the files, MLflow."""
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1


def outside_launcher_context(distributed: DistributedConfig) -> Optional[RankContext]:
    """This process's rank when an outside launcher (torchrun, srun, Kubernetes) started it:
    RANK, WORLD_SIZE and LOCAL_RANK are set. None otherwise."""
    if distributed.name != DistributedName.ddp or not {"RANK", "WORLD_SIZE", "LOCAL_RANK"} <= os.environ.keys():
        return None
    return RankContext(int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"]), int(os.environ["WORLD_SIZE"]))


def resolve_backend(requested: Backend, device_type: str) -> str:
    if requested != Backend.auto:
        return str(requested)
    return "nccl" if device_type == "cuda" else "gloo"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
