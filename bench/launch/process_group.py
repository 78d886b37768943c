"""The torch.distributed process group of a multi-process run: join it, exchange once, leave it."""

from __future__ import annotations

import datetime
import logging
import os
from typing import Any, Dict, List

from bench.config.schema import DistributedConfig
from bench.rank_context import RankContext, resolve_backend

log = logging.getLogger("bench")


def init_process_group(cfg: DistributedConfig, ctx: RankContext, device: Any) -> None:
    import torch.distributed as dist

    from bench.launch.rendezvous import rank_store

    backend = resolve_backend(cfg.backend, device.type)
    timeout = datetime.timedelta(seconds=float(cfg.timeout_s))
    kwargs: Dict[str, Any] = {"device_id": device} if device.type == "cuda" else {}
    # the store once every rank is there (or a signal; a line says who is awaited meanwhile)
    if (store := rank_store(ctx, cfg.timeout_s)) is not None:
        kwargs["store"] = store
    dist.init_process_group(backend=backend, rank=ctx.rank, world_size=ctx.world_size, timeout=timeout, **kwargs)
    log.info(
        "rank %d/%d (pid %d) joined the process group (%s, timeout %ss)",
        ctx.rank,
        ctx.world_size,
        os.getpid(),
        backend,
        cfg.timeout_s,
    )


def destroy_process_group() -> None:
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()


def all_gather(mine: Any, ctx: RankContext) -> List[Any]:
    """Every rank's `mine` (a picklable object), on every rank; [mine] without a group."""
    if not ctx.distributed:
        return [mine]
    import torch.distributed as dist

    gathered: List[Any] = [None] * ctx.world_size
    dist.all_gather_object(gathered, mine)
    return gathered
