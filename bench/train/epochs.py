"""The measured window, epoch by epoch: steps, then (when due) validation and a checkpoint, which
are left out of the window; a progressive-resizing phase change at an epoch boundary; a stop
at the first evaluation that reaches train.target_accuracy. On a terminal, the window's progress bar
(benchmark.progress): the log lines print above it and it stays whole; with train.target_accuracy
it says the run may stop early.

Throughput keeps its definition: images of the counted steps / the counted seconds. Wall time
for time-to-accuracy counts everything from the first training step (evaluations included, as
MLPerf Training counts it), carried over from the checkpoint a run resumed from.

Validation: top-1 and top-5 on the val split, with the val transform, under inference mode
and the run's precision. Every rank reads its own share (each sample once, bench.data.loader's
eval_batch_sampler) and the counts are all-reduced, so the accuracy is over the whole split.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import sys
import threading
import time
from typing import Any, Dict, List, Optional, Tuple

import torch
import torch.nn as nn
from tqdm import tqdm
from tqdm.contrib.logging import logging_redirect_tqdm

from bench.errors import Interrupted
from bench.maths.stats import percentile
from bench.rank_context import RankContext
from bench.runtime.precision import PrecisionPolicy
from bench.runtime.timing import SignalFlag, StepClock
from bench.train.build import TrainingRun
from bench.train.result import Accuracy, EpochRecord, TrainResult
from bench.train.resume import Position

log = logging.getLogger(__name__)
# the bar of a window a reached target may end early: the time left it shows is an upper bound
TARGET_BAR = "{l_bar}{bar}| {n_fmt}/{total_fmt} [{elapsed}, at most {remaining} left, {rate_fmt}]"


class MeasuredWindow:
    """One measured window: `run()` opens it on the clock, runs each epoch's steps (`run_steps`),
    closes each epoch (`close_epoch`: its record, then evaluation and checkpoint outside the
    window) and returns the window's figures (`figures`)."""

    def __init__(self, run: TrainingRun, clock: StepClock, first_step_at: float, flag: SignalFlag):
        self.training, self.clock, self.planned, self.flag = run, clock, run.planned, flag
        self.first_step_at, benchmark, target = first_step_at, run.config.benchmark, run.config.train.target_accuracy
        self.deadline = time.perf_counter() + benchmark.measure_seconds if benchmark.measure_seconds else None
        # a thread lock for the bar: tqdm's default takes a multiprocessing one, which a rank ended by
        # SIGTERM left to the resource tracker's "leaked semaphore" warning (issue 28)
        tqdm.set_lock(threading.RLock())
        # the window's bar on stderr, drawn on a terminal only. With a target the run may end at any
        # evaluation: the bar says so, and its time left is an upper bound
        self.progress = tqdm(
            total=run.planned,
            unit="step",
            file=sys.stderr,
            mininterval=1.0,
            leave=False,
            disable=None if benchmark.progress and run.ctx.is_reporter else True,
            desc=f"may stop at val top-1 {target:g}" if target is not None else None,
            bar_format=TARGET_BAR if target is not None else None,
        )
        # what the window has counted so far, over its epochs
        self.epochs: List[EpochRecord] = list(run.history)  # a resumed run's earlier epochs first
        self.steps = self.images = 0
        self.loss = torch.zeros(())  # the last step's
        self.data_wait_ms: List[float] = []  # the host's wait for each step's batch
        self.stop = False  # the window ends after this epoch (measure_steps/seconds, or the target reached)
        self.reached: Optional[EpochRecord] = None  # the first epoch whose evaluation reached train.target_accuracy
        self.evaluation: Dict[str, Any] = {}  # the last evaluation's figures

    def wall_seconds(self) -> float:
        """Training wall time so far (time-to-accuracy's clock), a resumed run's earlier time included."""
        return time.perf_counter() - self.first_step_at + self.training.wall_offset

    def run(self) -> TrainResult:
        run = self.training
        # while the bar is drawn, the root logger's console handlers write through tqdm.write (the bar
        # cleared, the line written, the bar redrawn below it): a log line never lands on the bar's line
        with logging_redirect_tqdm() if not self.progress.disable else contextlib.nullcontext():
            self.clock.mark()  # the window opens here
            for epoch in range(run.start.epoch, run.config.train.epochs):
                if self.steps >= self.planned or self.stop:
                    break
                run.mlperf.start("block_start", first_epoch_num=epoch + 1, epoch_count=1)
                run.mlperf.start("epoch_start", epoch_num=epoch + 1)
                skip = run.start.step_in_epoch if epoch == run.start.epoch else 0  # a resumed run's steps done
                batches = run.data.enter(epoch, skip)
                first = len(self.clock) - 1, len(self.data_wait_ms)
                steps = run.data.steps(epoch)
                index = self.run_steps(batches, epoch, skip, steps)
                self.close_epoch(epoch, first, index - skip, index >= steps)
            self.clock.sync()
            self.progress.close()
        return self.figures()

    def toward(self, done: int) -> str:
        """The progress line's goal: the planned steps, or the window's clock when benchmark.measure_seconds
        ends the window first at the pace so far (a doctor's rung: its seconds, not 100000 epochs' steps)."""
        seconds, left = self.training.config.benchmark.measure_seconds, (self.deadline or 0.0) - time.perf_counter()
        if not seconds or (seconds - left) / done * (self.planned - done) <= left:
            return f"/{self.planned}"
        return f" ({seconds - left:.1f} of {seconds:g} s)"

    def run_steps(self, batches: Any, epoch: int, skip: int, steps: int) -> int:
        """Epoch `epoch`'s steps from `skip` on; the index after the last step taken. The hot loop:
        the counters are locals, written back to the window once the epoch's steps end."""
        run, clock, flag, progress = self.training, self.clock, self.flag, self.progress
        planned, log_every, deadline = self.planned, run.config.benchmark.log_every, self.deadline
        last_epoch = epoch == run.config.train.epochs - 1
        data_wait, done, images_done, loss = self.data_wait_ms, self.steps, self.images, self.loss
        index = skip
        while index < steps:
            try:
                t0 = time.perf_counter()
                images, labels = next(batches)
                data_wait.append((time.perf_counter() - t0) * 1000.0)
                loss = run.step(images, labels)
            except BaseException:
                if flag.signum is None:
                    raise
                index -= 1  # the step did not happen: the checkpoint must not count it
            clock.mark()
            done, index, images_done = done + 1, index + 1, images_done + run.data.batch_size
            progress.update()
            if flag.signum is not None:
                self.save(Position(epoch, index) if index < steps else Position(epoch + 1))
                raise Interrupted(signal.Signals(flag.signum).name)
            at_sync_point = not run.ctx.distributed or done % log_every == 0 or done == planned
            if (at_sync_point and _deadline_passed(deadline, run.ctx)) or done >= planned:
                self.stop = index < steps or not last_epoch
                break
            if done % log_every == 0:
                clock.sync()  # a log interval: the one place the host waits for the device
                # the last log_every steps (done is a multiple of it)
                window = clock.seconds_between(len(clock) - 1 - log_every, len(clock) - 1)
                log.info(
                    "step %d%s  loss %.4f  %.1f img/s (last %d steps)",
                    done,
                    self.toward(done),
                    loss.item(),
                    log_every * run.data.batch_size / window,
                    log_every,
                )
        self.steps, self.images, self.loss = done, images_done, loss
        return index

    def close_epoch(self, epoch: int, first: Tuple[int, int], steps: int, complete: bool) -> None:
        """The epoch's record, then its evaluation and checkpoint when due (both outside the window);
        `first`: the clock mark and the data wait the epoch starts at; `steps`: the steps it took in
        this window; `complete`: it ran to its end."""
        run, train = self.training, self.training.config.train
        self.clock.sync()
        record = self.epoch_record(epoch, first, steps)
        run.mlperf.end("epoch_stop", epoch_num=record.epoch, samples_count=record.images * run.ctx.world_size)
        if train.eval_every and run.val is not None and self.due(epoch, train.eval_every):
            self.evaluate(record)
        run.mlperf.end("block_stop", first_epoch_num=record.epoch)
        self.epochs.append(record)
        if run.checkpoints is not None and complete and self.due(epoch, run.config.checkpoint.every_epochs):
            self.clock.pause()
            self.save(Position(epoch + 1))
            self.clock.resume()

    def due(self, epoch: int, every: int) -> bool:
        """Epoch `epoch` (from 0) ends an interval of `every` epochs (0: none), the run or the window (a
        reached target ends it: asked again after the evaluation)."""
        last = epoch == self.training.config.train.epochs - 1
        return last or self.stop or bool(every and (epoch + 1) % every == 0)

    def evaluate(self, record: EpochRecord) -> None:
        """Validation on `record`'s epoch, left out of the window; a reached target ends the window."""
        run = self.training
        self.clock.pause()
        run.mlperf.start("eval_start", epoch_num=record.epoch)
        figures = self.evaluation = evaluate(run.eager, run.val, run.policy, run.ctx)
        record.val_top1, record.val_top5 = figures["val_top1"], figures["val_top5"]
        run.mlperf.event("eval_accuracy", record.val_top1, epoch_num=record.epoch)
        run.mlperf.end("eval_stop", epoch_num=record.epoch)
        record.eval_seconds, record.wall_seconds = figures["eval_seconds"], self.wall_seconds()
        log.info(
            "epoch %d: val top-1 %.4f, top-5 %.4f (%d images, %.2f s)",
            record.epoch,
            record.val_top1,
            record.val_top5,
            figures["val_images"],
            figures["eval_seconds"],
        )
        self.clock.resume()
        target = run.config.train.target_accuracy
        if target is not None and record.val_top1 >= target and self.reached is None:
            self.reached, self.stop = record, True
            reached = (
                f"epoch {record.epoch}: val top-1 {record.val_top1:.4f} >= {target:g} after {record.wall_seconds:.1f} s"
            )
            log.info("target reached at %s: the run stops here", reached)  # said on the terminal, not only in the JSON

    def epoch_record(self, epoch: int, first: Tuple[int, int], steps: int) -> EpochRecord:
        clock, data, (first_mark, first_wait) = self.clock, self.training.data, first
        span = clock.seconds_between(first_mark, len(clock) - 1)
        data_wait = sum(self.data_wait_ms[first_wait:]) / 1000.0  # the host waiting on next(batches)
        batch = data.batch_size
        times = clock.step_times_ms(first_mark) if steps else []  # this epoch's only: epoch ends stay cheap
        return EpochRecord(
            epoch=epoch + 1,
            steps=steps,
            images=steps * batch,
            seconds=span,
            images_per_second=steps * batch / span if span > 0 else 0.0,
            loss=float(self.loss.item()),
            lr=float(self.training.step.applied_lr),  # the lr its last step trained with
            step_time_ms_p50=percentile(times, 50),
            data_wait_seconds=data_wait,
            compute_seconds=max(0.0, span - data_wait),
            image_size=data.image_size if data.progressive else None,
            batch_size=batch if data.progressive else None,
        )

    def save(self, position: Position) -> None:
        run = self.training
        if run.checkpoints is not None and run.ctx.is_reporter:
            run.checkpoints.save(run.state(self.wall_seconds(), self.epochs), position)

    def figures(self) -> TrainResult:
        """The window's figures (bench.train.loop pools the repeats' and adds the run's)."""
        clock, run = self.clock, self.training
        return TrainResult(
            measured_steps=self.steps,
            measured_images=self.images,
            window_seconds=clock.seconds_between(0, len(clock) - 1),
            step_times_ms=clock.step_times_ms(),
            data_wait_ms=self.data_wait_ms,
            epochs=self.epochs,
            final_lr=float(run.step.applied_lr),
            final_loss=float(self.loss.item()),
            accuracy=self.accuracy_figures(),
        )

    def accuracy_figures(self) -> Optional[Accuracy]:
        """The window's accuracy figures from its evaluated epochs; time to target where one is set (None
        without evaluation)."""
        target = self.training.config.train.target_accuracy
        if not (evaluated := [e for e in self.epochs if e.val_top1 is not None]):
            return None
        reached = self.reached
        return Accuracy(
            val_top1=evaluated[-1].val_top1,
            val_top5=evaluated[-1].val_top5,
            val_top1_best=max(e.val_top1 for e in evaluated if e.val_top1 is not None),
            eval_seconds=sum(e.eval_seconds or 0.0 for e in evaluated),
            evaluations=len(evaluated),
            train_wall_seconds=self.wall_seconds(),
            val_images=self.evaluation.get("val_images"),
            target_accuracy=target,
            reached_target=(reached is not None) if target is not None else None,
            time_to_target_seconds=reached.wall_seconds if reached and target is not None else None,
            epochs_to_target=reached.epoch if reached and target is not None else None,
        )


def _deadline_passed(deadline: Optional[float], ctx: RankContext) -> bool:
    """measure_seconds: with several ranks the decision is all-reduced (any rank out of time
    stops all), or a rank that stopped alone would leave the others waiting in an all-reduce."""
    if deadline is None:
        return False
    passed = time.perf_counter() >= deadline
    if not ctx.distributed:
        return passed
    import torch.distributed as dist

    flag = torch.tensor(
        [1.0 if passed else 0.0], device="cuda" if torch.cuda.is_available() and dist.get_backend() == "nccl" else "cpu"
    )
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    return bool(flag.item())


def evaluate(model: nn.Module, val: Any, policy: PrecisionPolicy, ctx: RankContext) -> Dict[str, float]:
    """`model` is the plain module (not the DDP wrapper: evaluation needs no gradient sync);
    `val.one_pass()` yields this rank's device batches."""
    start = time.perf_counter()
    was_training = model.training
    model.eval()
    # hits at 1, hits at 5, images: a tensor made outside inference mode, so it can be all-reduced in place
    counts = torch.zeros(3, dtype=torch.float64, device=next(model.parameters()).device)
    with torch.inference_mode(), policy.autocast():
        for images, labels in val.one_pass():
            logits = model(images)
            hits = logits.topk(min(5, logits.shape[1]), dim=1).indices.eq(labels[:, None])
            counts += torch.stack([hits[:, 0].sum(), hits.any(dim=1).sum(), labels.new_tensor(labels.numel())]).to(
                counts
            )
    model.train(was_training)
    if ctx.distributed:
        import torch.distributed as dist

        dist.all_reduce(counts)
    top1, top5, images = (float(v) for v in counts.tolist())
    return {
        "val_top1": top1 / images if images else 0.0,
        "val_top5": top5 / images if images else 0.0,
        "val_images": int(images),
        "eval_seconds": time.perf_counter() - start,
    }
