"""The ladder's DDP rung: an all-reduce of the model's gradient size alone (float32, as DDP
reduces gradients), between this node's processes over the run's backend (NCCL on GPUs, gloo on
the CPU), against the full run's step time. Bus bandwidth as nccl-tests define it: bytes / time
x 2 (n - 1) / n. With several nodes only this node's processes take part (said in the figures)."""

from __future__ import annotations

import os
import time
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from bench.config import BenchConfig
from bench.doctor.figures import ALLREDUCE, AllreduceFigures, Rung
from bench.rank_context import free_port

WARMUP, ITERATIONS = 2, 5


def _rank(rank: int, world: int, port: int, elements: int, backend: str, out: Any) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group(backend, rank=rank, world_size=world)
    try:
        device = torch.device("cuda", rank) if backend == "nccl" else torch.device("cpu")
        if device.type == "cuda":
            torch.cuda.set_device(device)
        tensor = torch.ones(elements, dtype=torch.float32, device=device)

        def reduce(times: int) -> float:
            started = time.perf_counter()
            for _ in range(times):
                dist.all_reduce(tensor)
            if device.type == "cuda":
                torch.cuda.synchronize()
            return time.perf_counter() - started

        reduce(WARMUP)
        dist.barrier()
        seconds = reduce(ITERATIONS) / ITERATIONS
        if rank == 0:
            out.put(seconds)
    finally:
        dist.destroy_process_group()


def allreduce_rung(config: BenchConfig, parameters: int, step_ms: float | None) -> Rung:
    rung = Rung(name=ALLREDUCE)
    world = config.distributed.nproc_per_node
    if config.distributed.world_size <= 1:
        rung.skipped = "one process: DDP has nothing to all-reduce"
        return rung
    if world <= 1:
        rung.skipped = "one process on this node: the all-reduce between nodes is not measured here"
        return rung
    started = time.perf_counter()
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    out = mp.get_context("spawn").SimpleQueue()
    mp.start_processes(
        _rank, args=(world, free_port(), parameters, backend, out), nprocs=world, join=True, start_method="spawn"
    )
    seconds = out.get()
    size = parameters * 4
    rung.figures = AllreduceFigures(
        milliseconds=seconds * 1000,
        megabytes=size / 1e6,
        processes=world,
        backend=backend,
        bus_gigabytes_per_second=size / seconds * 2 * (world - 1) / world / 1e9,
        step_ms=step_ms,
        share_of_step=seconds * 1000 / step_ms if step_ms else None,
        nodes_measured=1 if config.distributed.nnodes > 1 else None,
    )
    rung.seconds = time.perf_counter() - started
    return rung
