"""The measured window, epoch by epoch: steps, then (when due) validation and a checkpoint, which
are left out of the window; a progressive-resizing phase change at an epoch boundary; a stop
at the first evaluation that reaches train.target_accuracy.

Throughput keeps its definition: images of the counted steps / the counted seconds. Wall time
for time-to-accuracy counts everything from the first training step (evaluations included, as
MLPerf Training counts it), carried over from the checkpoint a run resumed from.
"""

from __future__ import annotations

import logging
import signal
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Dict, List, Optional

import torch
from tqdm import tqdm

from bench.analysis.stats import percentile
from bench.config import BenchConfig
from bench.errors import Interrupted
from bench.launch.context import RankContext
from bench.train.evaluate import evaluate
from bench.train.resume import Position, TrainingCheckpoints, rng_states
from bench.train.result import EpochRecord
from bench.train.timing import StepClock

log = logging.getLogger(__name__)


class SignalFlag:
    """SIGTERM/SIGINT noted, not raised, while training with checkpoints: the loop finishes the
    step it is in, writes a checkpoint, then ends the run KILLED (a signal raised mid-step could
    leave the weights half updated)."""

    def __init__(self, enabled: bool):
        self.enabled = enabled and threading.current_thread() is threading.main_thread()
        self.signum: Optional[int] = None
        self._previous: Dict[int, Any] = {}

    def __enter__(self) -> "SignalFlag":
        if self.enabled:
            for sig in (signal.SIGTERM, signal.SIGINT):
                self._previous[sig] = signal.signal(sig, self._note)
        return self

    def _note(self, signum: int, _frame: Any) -> None:
        self.signum = signum

    def __exit__(self, *exc: Any) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)


@dataclass
class Session:
    """What the epochs work on (built by bench.train.loop.train)."""

    config: BenchConfig
    ctx: RankContext
    eager: torch.nn.Module  # the plain model: evaluated and checkpointed
    optimizer: torch.optim.Optimizer
    scheduler: Any
    policy: Any
    step: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
    data: Any  # bench.train.loop.EpochData: batches by epoch (progressive phases, passes)
    val: Any = None  # one_pass() of the val split, when train.eval_every
    checkpoints: Optional[TrainingCheckpoints] = None
    start: Position = field(default_factory=lambda: Position(0))
    history: List[EpochRecord] = field(default_factory=list)  # epochs done before a resume
    wall_offset: float = 0.0  # training wall seconds before a resume

    def state(self, wall_seconds: float, epochs: List[EpochRecord]) -> Dict[str, Any]:
        scaler = self.policy.scaler
        return {"model": self.eager.state_dict(), "optimizer": self.optimizer.state_dict(),
                "scheduler": self.scheduler.state_dict(), "scaler": scaler.state_dict() if scaler else None,
                "rng": rng_states(), "wall_seconds": wall_seconds, "history": [asdict(e) for e in epochs]}


def run_epochs(s: Session, clock: StepClock, planned: int, first_step_at: float, flag: SignalFlag) -> Dict[str, Any]:
    cfg = s.config
    log_every, train = cfg.benchmark.log_every, cfg.train
    deadline = time.perf_counter() + cfg.benchmark.measure_seconds if cfg.benchmark.measure_seconds else None
    progress = tqdm(total=planned, unit="step", file=sys.stderr, mininterval=1.0, leave=False,
                    disable=None if cfg.benchmark.progress and s.ctx.is_reporter else True)
    data_wait: List[float] = []
    epochs: List[EpochRecord] = list(s.history)
    done, images_done, loss, stop, reached = 0, 0, torch.zeros(()), False, None
    figures: Dict[str, Any] = {}  # the last evaluation's
    wall = lambda: time.perf_counter() - first_step_at + s.wall_offset  # noqa: E731
    epoch, skip = s.start.epoch, s.start.step_in_epoch
    clock.mark()  # the window opens here
    while epoch < train.epochs and done < planned and not stop:
        batches = s.data.enter(epoch, skip)
        first, steps, last_epoch = len(clock) - 1, s.data.steps(epoch), epoch == train.epochs - 1
        index = skip
        while index < steps:
            try:
                t0 = time.perf_counter()
                images, labels = next(batches)
                data_wait.append((time.perf_counter() - t0) * 1000.0)
                loss = s.step(images, labels)
            except BaseException:
                if flag.signum is None:
                    raise
                index -= 1  # the step did not happen: the checkpoint must not count it
            clock.mark()
            done, index, images_done = done + 1, index + 1, images_done + s.data.batch_size
            progress.update()
            if flag.signum is not None:
                _save(s, Position(epoch, index) if index < steps else Position(epoch + 1), wall(), epochs)
                raise Interrupted(signal.Signals(flag.signum).name)
            at_sync_point = not s.ctx.distributed or done % log_every == 0 or done == planned
            if at_sync_point and _deadline_passed(deadline, s.ctx) or done >= planned:
                stop = index < steps or not last_epoch
                break
            if done % log_every == 0:
                clock.sync()  # a log interval: the one place the host waits for the device
                recent = min(log_every, done)
                window = clock.seconds_between(len(clock) - 1 - recent, len(clock) - 1)
                log.info("step %d/%d  loss %.4f  %.1f img/s (last %d steps)", done, planned, loss.item(),
                         recent * s.data.batch_size / window, recent)
        skip = 0
        clock.sync()
        record = _record(epoch, clock, first, index - s.start.step_in_epoch * (epoch == s.start.epoch),
                         s, loss)
        complete = index >= steps
        if train.eval_every and s.val is not None and ((epoch + 1) % train.eval_every == 0 or last_epoch or stop):
            clock.pause()
            figures = evaluate(s.eager, s.val, s.policy, s.ctx)
            record.val_top1, record.val_top5 = figures["val_top1"], figures["val_top5"]
            record.eval_seconds, record.wall_seconds = figures["eval_seconds"], wall()
            log.info("epoch %d: val top-1 %.4f, top-5 %.4f (%d images, %.2f s)", record.epoch, record.val_top1,
                     record.val_top5, figures["val_images"], figures["eval_seconds"])
            clock.resume()
            if train.target_accuracy is not None and record.val_top1 >= train.target_accuracy and reached is None:
                reached, stop = record, True
        epochs.append(record)
        every = cfg.checkpoint.every_epochs
        if s.checkpoints is not None and complete and ((every and (epoch + 1) % every == 0) or last_epoch or stop):
            clock.pause()
            _save(s, Position(epoch + 1), wall(), epochs)
            clock.resume()
        epoch += 1
    clock.sync()
    progress.close()
    return {"measured_steps": done, "measured_images": images_done, "window_seconds": clock.seconds_between(0, len(clock) - 1),
            "step_times_ms": clock.step_times_ms(), "data_wait_ms": data_wait, "epochs": epochs,
            "final_lr": float(s.optimizer.param_groups[0]["lr"]), "final_loss": float(loss.item()),
            "accuracy": _accuracy(cfg, epochs, reached, wall(), figures.get("val_images"))}


def _record(epoch: int, clock: StepClock, first: int, steps: int, s: Session, loss: torch.Tensor) -> EpochRecord:
    last = len(clock) - 1
    span = clock.seconds_between(first, last)
    batch = s.data.batch_size
    times = clock.step_times_ms(first) if steps else []  # this epoch's only: epoch ends stay cheap
    return EpochRecord(epoch=epoch + 1, steps=steps, images=steps * batch, seconds=span,
                       images_per_second=steps * batch / span if span > 0 else 0.0, loss=float(loss.item()),
                       lr=float(s.optimizer.param_groups[0]["lr"]), step_time_ms_p50=percentile(times, 50),
                       image_size=s.data.image_size if s.data.progressive else None,
                       batch_size=batch if s.data.progressive else None)


def _save(s: Session, position: Position, wall_seconds: float, epochs: List[EpochRecord]) -> None:
    if s.checkpoints is not None and s.ctx.is_reporter:
        s.checkpoints.save(s.state(wall_seconds, epochs), position)


def _accuracy(cfg: BenchConfig, epochs: List[EpochRecord], reached: Optional[EpochRecord],
              wall_seconds: float, val_images: Optional[int]) -> Dict[str, Any]:
    evaluated = [e for e in epochs if e.val_top1 is not None]
    if not evaluated:
        return {}
    figures: Dict[str, Any] = {"val_top1": evaluated[-1].val_top1, "val_top5": evaluated[-1].val_top5,
                               "val_top1_best": max(e.val_top1 for e in evaluated),
                               "eval_seconds": sum(e.eval_seconds or 0.0 for e in evaluated),
                               "evaluations": len(evaluated), "train_wall_seconds": wall_seconds}
    if val_images is not None:
        figures["val_images"] = val_images  # every val image counted once, over all ranks
    target = cfg.train.target_accuracy
    if target is not None:
        figures.update(target_accuracy=target, reached_target=reached is not None,
                       time_to_target_seconds=reached.wall_seconds if reached else None,
                       epochs_to_target=reached.epoch if reached else None)
    return figures


def _deadline_passed(deadline: Optional[float], ctx: RankContext) -> bool:
    """measure_seconds: with several ranks the decision is all-reduced (any rank out of time
    stops all), or a rank that stopped alone would leave the others waiting in an all-reduce."""
    if deadline is None:
        return False
    passed = time.perf_counter() >= deadline
    if not ctx.distributed:
        return passed
    import torch.distributed as dist

    flag = torch.tensor([1.0 if passed else 0.0], device="cuda" if torch.cuda.is_available() and
                        dist.get_backend() == "nccl" else "cpu")
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    return bool(flag.item())
