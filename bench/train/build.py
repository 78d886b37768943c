"""Building a training run: everything `bench.train.loop.train` needs before its first step, made
from the config in this order: the process (seed, threads, cuDNN), a checkpoint to resume from,
the precision policy, the model, the batch (benchmark.find_max_batch picks it before anything
else is sized by it), the batches epoch by epoch, the optimizer and its lr schedule, DDP,
torch.compile, and the optimizer step that the measured window runs.

benchmark.find_max_batch: the largest per-process batch that trains without running out of GPU
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

One optimizer step, as the phases bench.train.loop times one by one: clear the gradients,
forward (under autocast, with the loss), backward (scaled for fp16), update (gradient clipping on
unscaled gradients, the optimizer step, the lr schedule). Calling a `TrainStep` runs the phases
back to back with nothing in between: it is what the measured window runs.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import gc
import logging
from dataclasses import asdict
from typing import Any, Callable, Dict, List, Optional

import torch
import torch.nn as nn

from bench.config import BenchConfig
from bench.errors import BenchError, CheckpointError
from bench.launch.process_group import all_gather
from bench.rank_context import RankContext
from bench.runtime.device import prepare_process
from bench.runtime.epoch_data import EpochData
from bench.runtime.models import build_model, maybe_compile
from bench.runtime.precision import PrecisionPolicy, build_precision
from bench.train.checkpoint_format import check_model_fits
from bench.train.mlperf_log import MlperfLog
from bench.train.optim import build_optimizer, build_scheduler, effective_lr, unreached
from bench.train.result import EpochRecord
from bench.train.resume import Position, TrainingCheckpoints, rng_states

log = logging.getLogger(__name__)


class TrainingRun:
    """A training run, built: what the warm-up and the window work on, and the window's state."""

    def __init__(
        self,
        config: BenchConfig,
        device: torch.device,
        ctx: RankContext,
        on_step: Optional[Callable[[], None]],
        checkpoints: Optional[TrainingCheckpoints],
    ):
        """`on_step()` runs after every step (the launched workers' hang watchdog); `checkpoints`: the
        run's folder, claimed (bench.train.resume.claimed_checkpoints), when it writes or resumes."""
        prepare_process(config, device, ctx)
        self.device, self.ctx, self.checkpoints = device, ctx, checkpoints
        # the checkpoint's state a resumed run starts from, and where the measured window starts
        self.resumed = resumed = checkpoints.load(config.train.resume) if checkpoints and config.train.resume else None
        self.start = start = Position(resumed["epoch"], resumed["step_in_epoch"]) if resumed else Position(0)
        self.resumed_from: str = checkpoints.loaded["resumed_from"] if resumed and checkpoints else ""
        if resumed and start.epoch >= config.train.epochs:
            raise CheckpointError(  # nothing left to measure: a run of no steps would report no figures
                f"train.resume={config.train.resume}: {self.resumed_from} ends epoch {start.epoch}, "
                f"and this run has train.epochs={config.train.epochs}: no epoch is left to train. Raise "
                "train.epochs to go on, or start without train.resume"
            )
        self.history = [EpochRecord(**e) for e in resumed["history"]] if resumed else []  # epochs done before
        self.wall_offset: float = resumed["wall_seconds"] if resumed else 0.0  # training wall seconds before
        self.policy = policy = build_precision(config.precision, device)
        # the plain model: evaluated, checkpointed, counted (Module.to takes device and memory_format
        # together at runtime; its stub has them in separate overloads)
        self.eager = build_model(config.model).to(device=device, memory_format=policy.memory_format)  # type: ignore[call-overload]
        if resumed:  # before any step: another model's checkpoint is one line, not load_state_dict's dump
            check_model_fits(resumed, self.eager, self.resumed_from)
        self.requested_batch = config.data.batch_size  # as asked, before find_max_batch
        if config.benchmark.find_max_batch:
            found = find_max_batch(config, self.eager, policy, device, ctx)
            config = dataclasses.replace(config, data=dataclasses.replace(config.data, batch_size=found))
            if device.type == "cuda":
                torch.cuda.reset_peak_memory_stats(device)  # the search's trials are not the run's peak
        self.config = config  # with benchmark.find_max_batch: the batch it found in data.batch_size
        self.data = data = EpochData(config, device, policy.memory_format, ctx, start.epoch)
        self.warmup = warmup = config.benchmark.warmup_steps
        repeats = config.benchmark.repeats
        total = data.planned(0)  # the schedule spans the whole run, resumed or not
        left = data.planned(start.epoch, start.step_in_epoch)
        # steps of the measured window (train.epochs, benchmark.measure_steps)
        self.planned = planned = min(left, config.benchmark.measure_steps or left)
        self.base_lr = effective_lr(config.optimizer, config.scheduler, data.batch_size * ctx.world_size)
        self.optimizer = optimizer = build_optimizer(self.eager, config.optimizer, self.base_lr, device)
        placed = _in_steps(config.scheduler, data, warmup)
        span = warmup + total * repeats + optimizer_steps(config)
        if ctx.is_reporter:  # what of the schedule the run will not reach: said, never squeezed into the run
            trained = warmup + total - left + planned * repeats
            for line in unreached(config.scheduler, placed, trained, span - optimizer_steps(config)):
                log.warning(line)
        self.scheduler = scheduler = build_scheduler(optimizer, placed, span, self.base_lr)
        if config.scheduler.scale_lr:
            data.on_batch_change = lambda old, new: scale_lr(optimizer, scheduler, new / old)
        # the model the step trains before torch.compile: `eager`, or its DDP wrapper
        self.wrapped = _wrap_ddp(self.eager, config, device) if ctx.distributed else self.eager
        # maybe_compile's: active, and why not (the first step may fall back)
        model, self.compile_info = maybe_compile(self.wrapped, config.compile, config.compile_mode, device)
        model.train()
        smoothing, clip_norm = config.train.label_smoothing, config.optimizer.grad_clip_norm
        self.step = TrainStep(
            model, optimizer, scheduler, policy, after=on_step, label_smoothing=smoothing, clip_norm=clip_norm
        )
        self.val: Any = None  # one_pass() of the val split, when train.eval_every (built by bench.train.loop.train)
        self.mlperf = MlperfLog()  # train.mlperf_log: MLPerf's events (bench.train.loop.train)

    def state(self, wall_seconds: float, epochs: List[EpochRecord]) -> Dict[str, Any]:
        """What a checkpoint holds of the run now (bench.train.resume writes it)."""
        scaler = self.policy.scaler
        return {
            "model": self.eager.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "scaler": scaler.state_dict() if scaler else None,
            "rng": rng_states(),
            "wall_seconds": wall_seconds,
            "history": [asdict(e) for e in epochs],
        }


def optimizer_steps(config: BenchConfig) -> int:
    """Optimizer steps the passes after the window take (the breakdown's, the profiled ones: the lr
    schedule must span them, OneCycleLR refuses to go past its end)."""
    breakdown = config.benchmark.breakdown_steps if config.benchmark.breakdown else 0
    return breakdown + (config.profile.steps + 1 if config.profile.enabled else 0)


def _in_steps(scheduler: Any, data: EpochData, warmup: int) -> Any:
    """scheduler.milestone_unit=epochs: each milestone becomes the optimizer step its epoch starts at
    (bench.train.optim.unreached names those past the run's end). Milestones in steps that all
    fall inside the first of several epochs are named in a warning."""
    if scheduler.milestone_unit != "epochs":
        first_epoch = data.planned(0) - data.planned(1)
        if scheduler.name == "multistep" and data.config.train.epochs > 1 and max(scheduler.milestones) < first_epoch:
            log.warning(
                "scheduler.milestones %s are optimizer steps: all fall in epoch 1 of %d (%d steps), so the lr is "
                "x%g from step %d on; scheduler.milestone_unit=epochs counts them in epochs",
                list(scheduler.milestones),
                data.config.train.epochs,
                first_epoch,
                scheduler.gamma ** len(scheduler.milestones),
                max(scheduler.milestones),
            )
        return scheduler
    steps = [warmup + _steps_before(data, epoch) for epoch in scheduler.milestones]
    return dataclasses.replace(scheduler, milestones=steps, milestone_unit="steps")


def _steps_before(data: EpochData, epoch: int) -> int:
    """Optimizer steps before epoch `epoch` (from 0) starts, counted on past the run's last epoch at its
    length: a milestone after the run stays after it (it was clamped to the run's last step, and the
    lr reported at the end was decayed by a milestone no step trained under)."""
    epochs = data.config.train.epochs
    past = epoch - epochs
    return data.planned(0) - data.planned(min(epoch, epochs)) + (past * data.steps(epochs - 1) if past > 0 else 0)


def scale_lr(optimizer: torch.optim.Optimizer, scheduler: Any, ratio: float) -> None:
    """A progressive phase changed the batch: the lr follows it (scheduler.scale_lr)."""
    for group in optimizer.param_groups:
        for key in ("lr", "initial_lr", "max_lr", "min_lr"):
            if key in group:
                group[key] *= ratio
    if hasattr(scheduler, "base_lrs"):
        scheduler.base_lrs = [lr * ratio for lr in scheduler.base_lrs]


def _wrap_ddp(model: nn.Module, config: BenchConfig, device: torch.device) -> nn.Module:
    from torch.nn.parallel import DistributedDataParallel

    dist = config.distributed
    return DistributedDataParallel(
        model,
        device_ids=[device.index] if device.type == "cuda" else None,
        gradient_as_bucket_view=dist.gradient_as_bucket_view,  # no copy between grads and buckets
        static_graph=dist.static_graph,  # same graph every step: lets DDP skip per-step bookkeeping
        bucket_cap_mb=dist.bucket_cap_mb,
    )


GROWTH_LIMIT = 64
TRIAL_STEPS = 2
MAX_PROBES = 10  # after the first batch that fits: a search costs seconds, not minutes
# what CUDA libraries raise, besides torch.cuda.OutOfMemoryError, when a batch does not fit
ALLOCATION_FAILURES = ("out of memory", "ALLOC_FAILED", "canUse32BitIndexMath")


def search(fits: Callable[[int], bool], start: int, limit: int) -> int:
    """The largest batch for which `fits(batch)` holds, by the rule in the module docstring."""
    probe = functools.cache(fits)  # each batch is tried once; cache_info().currsize: the batches tried
    batch = start
    while not probe(batch):
        if batch == 1:
            raise BenchError("benchmark.find_max_batch: not even a batch of 1 fits in GPU memory")
        batch //= 2
    low, high = batch, None
    while high is None and low * 2 <= limit and probe.cache_info().currsize < MAX_PROBES:
        if probe(low * 2):
            low *= 2
        else:
            high = low * 2
    if high is None:
        return low
    while high - low > max(1, low // 16) and probe.cache_info().currsize < MAX_PROBES:
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
        try:
            trial(batch)
            failed = False
        except RuntimeError as exc:  # out of memory, cuBLAS/cuDNN workspace allocation, or a tensor too large to index
            if not isinstance(exc, torch.cuda.OutOfMemoryError) and not any(t in str(exc) for t in ALLOCATION_FAILURES):
                raise
            failed = True  # the exception (and the trial's frame, its tensors) is gone after this block
        model.zero_grad(set_to_none=True)
        if device.type == "cuda":  # on a CPU, dropping the references frees the memory
            gc.collect()
            torch.cuda.empty_cache()
        log.info("find_max_batch: batch %d %s", batch, "does not fit" if failed else "fits")
        return not failed

    found = search(fits, config.data.batch_size, config.data.batch_size * GROWTH_LIMIT)
    model.load_state_dict(saved)  # the trials' optimizer steps changed the weights (and BN statistics)
    if policy.scaler is not None and scaler_state is not None:  # saved above whenever there is a scaler
        policy.scaler.load_state_dict(scaler_state)
    found = min(all_gather(found, ctx))  # every rank's search: the smallest batch fits them all
    log.info("find_max_batch: data.batch_size=%d fits (asked for %d)", found, config.data.batch_size)
    return found


class TrainStep:
    def __init__(
        self,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        scheduler: Any,
        policy: PrecisionPolicy,
        after: Optional[Callable[[], None]] = None,
        label_smoothing: float = 0.0,
        clip_norm: Optional[float] = None,
    ):
        """`after()` runs at the end of every step (the launched workers' hang watchdog)."""
        self.model, self.optimizer, self.scheduler, self.policy = model, optimizer, scheduler, policy
        self.after, self.clip_norm = after, clip_norm
        self.criterion = nn.CrossEntropyLoss(label_smoothing=label_smoothing)
        self.scaler = policy.scaler
        self.params = [p for group in optimizer.param_groups for p in group["params"]]
        # the lr the last update applied: the schedule steps after it, so the optimizer's lr is the next step's
        self.applied_lr = float(optimizer.param_groups[0]["lr"])

    def zero_grad(self) -> None:
        self.optimizer.zero_grad(set_to_none=True)

    def forward(self, images: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        with self.policy.autocast():
            return self.criterion(self.model(images), labels)

    def backward(self, loss: torch.Tensor) -> None:
        (self.scaler.scale(loss) if self.scaler is not None else loss).backward()

    def update(self) -> None:
        scaler, clip_norm = self.scaler, self.clip_norm
        if clip_norm is not None:
            if scaler is not None:
                scaler.unscale_(self.optimizer)  # clip the true gradients, not the loss-scaled ones
            torch.nn.utils.clip_grad_norm_(self.params, clip_norm)
        if scaler is not None:
            scaler.step(self.optimizer)
            scaler.update()
        else:
            self.optimizer.step()
        self.applied_lr = self.optimizer.param_groups[0]["lr"]
        self.scheduler.step()

    def __call__(self, images: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        self.zero_grad()
        loss = self.forward(images, labels)
        self.backward(loss)
        self.update()
        if self.after is not None:
            self.after()
        return loss.detach()
