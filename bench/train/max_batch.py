"""benchmark.find_max_batch: the largest per-process batch that trains without running out of GPU
memory, searched before the run (opt-in, never a silent fallback; the batch used is in every
result, `batch_size_requested` keeps the one asked for, and the MLflow run is named after it).

Search: start at data.batch_size; halve until a batch fits; then double while it fits (up to
GROWTH_LIMIT x the start), and bisect between the last batch that fit and the first that did
not, to within 1/16 of it, in at most MAX_PROBES trials (each batch is tried once; once the cap is
reached the largest batch that fit so far is the answer). A trial is two full training steps
(forward, backward, optimizer) of the eager model on a synthetic batch, with a throw-away
optimizer of the configured kind; the weights are put back afterwards. With DDP every rank
searches and the smallest result wins. torch.compile is left out of the search (its memory use
differs a little: leave some room).
"""

from __future__ import annotations

import copy
import gc
import logging
from typing import Callable

import torch

from bench.config import BenchConfig
from bench.errors import BenchError
from bench.rank_context import RankContext
from bench.runtime.precision import PrecisionPolicy
from bench.train.optim import build_optimizer
from bench.train.step import TrainStep

log = logging.getLogger(__name__)

GROWTH_LIMIT = 64
TRIAL_STEPS = 2
MAX_PROBES = 10  # after the first batch that fits: a search costs seconds, not minutes
# what CUDA libraries raise, besides torch.cuda.OutOfMemoryError, when a batch does not fit
ALLOCATION_FAILURES = ("out of memory", "ALLOC_FAILED", "canUse32BitIndexMath")


def search(fits: Callable[[int], bool], start: int, limit: int, max_probes: int = MAX_PROBES) -> int:
    """The largest batch for which `fits(batch)` holds, by the rule in the module docstring."""
    known: dict = {}

    def probe(batch: int) -> bool:
        if batch not in known:
            known[batch] = fits(batch)
        return bool(known[batch])

    batch = start
    while not probe(batch):
        if batch == 1:
            raise BenchError("benchmark.find_max_batch: not even a batch of 1 fits in GPU memory")
        batch //= 2
    low, high = batch, None
    while high is None and low * 2 <= limit and len(known) < max_probes:
        if probe(low * 2):
            low *= 2
        else:
            high = low * 2
    if high is None:
        return low
    while high - low > max(1, low // 16) and len(known) < max_probes:
        middle = (low + high) // 2
        low, high = (middle, high) if probe(middle) else (low, middle)
    return low


def find_max_batch(
    config: BenchConfig, model: torch.nn.Module, policy: PrecisionPolicy, device: torch.device, ctx: RankContext
) -> int:
    """The per-process batch this run will use (every rank agrees on it)."""
    saved = {name: value.detach().to("cpu", copy=True) for name, value in model.state_dict().items()}
    scaler_state = copy.deepcopy(policy.scaler.state_dict()) if policy.scaler is not None else None
    image_size, classes = config.data.image_size, config.data.num_classes

    def trial(batch: int) -> None:
        """TRIAL_STEPS steps at `batch`; its tensors and optimizer are freed when it returns or raises."""
        optimizer = build_optimizer(model, config.optimizer, config.optimizer.lr, device)
        step = TrainStep(model, optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, lambda _: 1.0), policy)
        images = torch.randn(batch, 3, image_size, image_size, device=device).contiguous(
            memory_format=policy.memory_format
        )
        labels = torch.randint(0, classes, (batch,), device=device)
        for _ in range(TRIAL_STEPS):
            step(images, labels)
        if device.type == "cuda":  # gpu_check's CPU rehearsal runs the search too (bench refuses it on a CPU)
            torch.cuda.synchronize(device)

    def fits(batch: int) -> bool:
        failed = False
        try:
            trial(batch)
        except torch.cuda.OutOfMemoryError:
            failed = True  # the exception (and the trial's frame, its tensors) is gone after this block
        except RuntimeError as exc:  # cuBLAS/cuDNN workspace allocation, or a tensor too large to index
            if not any(text in str(exc) for text in ALLOCATION_FAILURES):
                raise
            failed = True
        model.zero_grad(set_to_none=True)
        if device.type == "cuda":  # on a CPU, dropping the references frees the memory
            gc.collect()
            torch.cuda.empty_cache()
        log.info("find_max_batch: batch %d %s", batch, "does not fit" if failed else "fits")
        return not failed

    found = search(fits, config.data.batch_size, config.data.batch_size * GROWTH_LIMIT)
    model.load_state_dict(saved)  # the trials' optimizer steps changed the weights (and BN statistics)
    if policy.scaler is not None:
        assert scaler_state is not None  # saved above whenever there is a scaler
        policy.scaler.load_state_dict(scaler_state)
    if ctx.distributed:
        import torch.distributed as dist

        agreed = torch.tensor([found], device=device)
        dist.all_reduce(agreed, op=dist.ReduceOp.MIN)
        found = int(agreed.item())
    log.info("find_max_batch: data.batch_size=%d fits (asked for %d)", found, config.data.batch_size)
    return found
