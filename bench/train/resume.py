"""Training checkpoints for resume (checkpoint.*, train.resume).

Where: `<checkpoint.dir>/<fingerprint>/` in the storage backend, under storage.root (default: the
launch directory) or the S3 prefix. The fingerprint names the config a checkpoint belongs to
(model, data, precision, optimizer, schedule, batch, world size, seed; not the epoch count), so
the same command line run again finds its own checkpoints with train.resume=auto, and two
configs never load each other's. One run writes a folder at a time: its rank 0 claims it before
anything is read (bench.storage.writer_lock; a second run is refused in one line naming the first).
A write is all or nothing (temp + rename on a disk, one PUT on S3), so a crash never leaves a half
file that resume would load; a temporary file a killed writer left behind is removed once the next
run holds the folder. A write that fails (a
full disk) is reported, not raised: training goes on without further checkpoints, and the run
reports its figures and ends FAILED naming the file (bench.train.report).

A checkpoint holds the model, optimizer, scheduler and GradScaler states, the position (epochs
done, steps into the next), the RNG states, the training wall time so far and the epochs'
records, so the resumed run continues numbering and timing where the first one stopped. The
file is plain data, read without running code (bench.train.checkpoint_format).

storage.save_checkpoint=true: rank 0 writes the model and optimizer state after the measured
window (every rank holds the same weights) to the storage backend, and reports its write speed.
One run writes a folder at a time (bench.storage.writer_lock): another run's write is refused.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import io
import json
import logging
import random
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional

import numpy as np
import torch

from bench.config import BenchConfig
from bench.config.run import RESUME_AUTO
from bench.config.schema import MilestoneUnit
from bench.errors import CheckpointError
from bench.launch.process_group import all_gather
from bench.rank_context import RankContext
from bench.storage.base import backend, serialize
from bench.storage.local import LocalStore
from bench.storage.writer_lock import FolderBusy, WriterLock, hold
from bench.train import checkpoint_format
from bench.train.result import CheckpointWrite

log = logging.getLogger("bench")

NAME = re.compile(r"^epoch-(\d{4,})(?:-step-(\d{6,}))?\.pt$")


def fingerprint(config: BenchConfig) -> str:
    """`<model>-<precision>-bs<batch>-<hash>`: what must match for a checkpoint to continue this run."""
    c = config
    # the schedule as far as it shapes the lr: milestones only matter to multistep (a preset that sets
    # them for a scheduler=multistep sweep keeps the fingerprint of its one-cycle runs)
    schedule = c.scheduler
    if schedule.name != "multistep":
        schedule = dataclasses.replace(schedule, milestones=[], milestone_unit=MilestoneUnit.steps)
    what = {
        "model": [c.model.arch, c.model.num_classes, str(c.model.norm), c.model.zero_init_residual],
        "data": [str(c.data.name), c.data.root, c.data.batch_size, c.data.image_size, c.data.progressive],
        "precision": str(c.precision.name),
        "optimizer": repr(c.optimizer),
        "scheduler": repr(schedule),
        "world": c.distributed.world_size,
        "scaling": str(c.distributed.scaling),
        "seed": c.seed,
        "steps_per_epoch": c.train.steps_per_epoch,
        "label_smoothing": c.train.label_smoothing,
    }
    digest = hashlib.sha256(json.dumps(what, sort_keys=True, default=str).encode()).hexdigest()[:10]
    return f"{c.model.arch}-{c.precision.name}-bs{c.data.batch_size}-{digest}"


@dataclass
class Position:
    epoch: int  # epochs completed (the next one to run, counted from 0)
    step_in_epoch: int = 0  # steps of that next epoch already done (a checkpoint written on a signal)

    @property
    def name(self) -> str:
        return f"epoch-{self.epoch:04d}" + (f"-step-{self.step_in_epoch:06d}" if self.step_in_epoch else "") + ".pt"


def rng_states() -> Dict[str, Any]:
    """Every RNG's state, as plain data (bench.train.checkpoint_format)."""
    return {
        "torch": torch.get_rng_state(),
        "numpy": checkpoint_format.numpy_rng_file_state(),
        "python": random.getstate(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
    }


def restore_rng(states: Dict[str, Any]) -> None:
    torch.set_rng_state(states["torch"])
    np.random.set_state(checkpoint_format.numpy_rng_state(states["numpy"]))
    random.setstate(states["python"])
    if states.get("cuda") is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["cuda"])


class TrainingCheckpoints:
    def __init__(self, config: BenchConfig):
        self.config = config
        self.folder = f"{config.checkpoint.dir.strip('/')}/{fingerprint(config)}"
        # the launch directory (bench never changes directory), not the run's dated output dir:
        # the same command line, run again, must find these
        self.store = backend(config.storage).checkpoint_store(Path.cwd(), self.folder)
        self.url: str = self.store.url
        self.saved: List[Dict[str, float]] = []  # figures of each write
        self.loaded: Dict[str, Any] = {}
        self.failed: Optional[str] = None  # the write that failed: no checkpoint is written after it
        self.lock: Optional[WriterLock] = None  # claim(): this run is the folder's one writer

    def claim(self, ctx: RankContext, run_dir: Path) -> None:
        """Before any checkpoint is read: rank 0 makes this run the folder's one writer, or every rank
        raises the FolderBusy that names the run holding it (bench.storage.writer_lock); then the
        temporary files of killed writes are removed: only now, holding the folder (a refused run
        removes nothing)."""
        refusal = None
        if ctx.is_reporter:
            try:
                self.lock = hold(self.store, run_dir, "wait for it to end, or give this run another checkpoint.dir")
            except FolderBusy as exc:
                refusal = str(exc)
        if ctx.distributed:  # the ranks load after rank 0 holds the folder: all the same checkpoint
            refusal = all_gather(refusal, ctx)[0]
        if refusal:
            raise FolderBusy(refusal)
        removed: List[str] = getattr(self.store, "remove_stale_temporaries", lambda: [])() if ctx.is_reporter else []
        if removed:
            log.info(
                "removed %d temporary file(s) of killed checkpoint writes in %s: %s",
                len(removed),
                self.url,
                ", ".join(removed),
            )

    def release(self) -> None:
        if self.lock is not None:
            self.lock.release()
            self.lock = None

    def names(self) -> List[str]:
        """Checkpoint names here, oldest first."""
        matches = [(NAME.match(key.rsplit("/", 1)[-1]), key) for key, _size in self.store.list()]
        found = [(tuple(int(g or 0) for g in match.groups()), key) for match, key in matches if match]
        return [key for _order, key in sorted(found, key=lambda pair: pair[0])]

    def save(self, state: Dict[str, Any], position: Position) -> None:
        """Write one; a failure is noted (figures(), the run's problems), not raised: the
        measurement goes on and is reported, and no later checkpoint is tried."""
        if self.failed is not None:
            return
        start = time.perf_counter()
        state = {
            **state,
            "format": checkpoint_format.FORMAT,
            "meta": checkpoint_format.run_meta(self.config),
            "epoch": position.epoch,
            "step_in_epoch": position.step_in_epoch,
        }
        try:
            size = self._write(position.name, state)
        except Exception as exc:  # any backend's write error (a full disk, a refused PUT)
            self.failed = checkpoint_format.write_failure(exc, f"{self.url}/{position.name}")
            log.warning("checkpoint not written: %s; training goes on without checkpoints", self.failed)
            return
        seconds = time.perf_counter() - start
        self.saved.append({"bytes": size, "seconds": seconds})
        log.info("checkpoint %s/%s (%.1f MB, %.2f s)", self.url, position.name, size / 1e6, seconds)
        for old in self.names()[: -self.config.checkpoint.keep_last]:
            self.store.delete(old)

    def _write(self, name: str, state: Dict[str, Any]) -> int:
        if hasattr(self.store, "put_with"):  # a disk: torch.save streams into the (temporary) file

            def stream(fh: Any) -> None:
                recorder = checkpoint_format.WriteRecorder(fh)
                try:
                    torch.save(state, recorder)  # type: ignore[arg-type]  # torch.save takes any object with write()
                except RuntimeError:  # torch's zip writer hides the OSError (a full disk) behind its own
                    if recorder.error is not None:
                        raise recorder.error from None
                    raise

            return self.store.put_with(name, stream)
        buffer = io.BytesIO()  # S3: one PUT of the whole object
        torch.save(state, buffer)
        self.store.put(name, buffer.getvalue())
        return buffer.tell()

    def load(self, resume: str) -> Optional[Dict[str, Any]]:
        """train.resume=auto: the newest checkpoint that loads (a damaged one is named and the one
        before it tried), None when there is none; a path: that checkpoint, or CheckpointError."""
        if resume != RESUME_AUTO and "/" not in resume.strip("/") and not resume.startswith(("/", ".")):
            return self._read(self.store, resume)  # a bare name: one of this config's checkpoints
        if resume != RESUME_AUTO:  # a path
            local = Path(resume)
            if not local.is_file():
                raise CheckpointError(
                    f"train.resume={resume!r} is not a checkpoint file: accepted 'auto', a file "
                    f"written by checkpoint.every_epochs, or a name in {self.url}"
                )
            return self._read(LocalStore(local.parent), local.name)
        for name in reversed(self.names()):
            try:
                return self._read(self.store, name)
            except CheckpointError as exc:
                log.warning("%s; trying the one before", exc)
        log.info("train.resume=auto: no checkpoint in %s yet, starting from the beginning", self.url)
        return None

    def _read(self, store: Any, name: str) -> Dict[str, Any]:
        start = time.perf_counter()
        try:
            data = store.get(name)
        except FileNotFoundError:
            raise CheckpointError(f"train.resume: no checkpoint {name!r} in {store.url}") from None
        state = checkpoint_format.read(data, f"{store.url}/{name}")
        checkpoint_format.check_meta(state, self.config, f"{store.url}/{name}")
        seconds = time.perf_counter() - start
        self.loaded = {
            "resumed_from": f"{store.url}/{name}",
            "checkpoint_load_seconds": seconds,
            "checkpoint_load_gbps": len(data) / seconds / 1e9 if seconds > 0 else 0.0,
            "resumed_epoch": int(state["epoch"]),
        }
        return state

    def figures(self) -> Dict[str, Any]:
        figures: Dict[str, Any] = dict(self.loaded)
        if self.failed is not None:
            figures["checkpoint_save_error"] = self.failed
        if self.saved:
            total_bytes = sum(s["bytes"] for s in self.saved)
            total_seconds = sum(s["seconds"] for s in self.saved)
            figures.update(
                checkpoints_saved=len(self.saved),
                checkpoint_save_seconds=total_seconds,
                checkpoint_save_bytes=self.saved[-1]["bytes"],
                checkpoint_save_gbps=total_bytes / total_seconds / 1e9 if total_seconds > 0 else 0.0,
                checkpoint_dir=self.url,
            )
        return figures


@contextlib.contextmanager
def claimed_checkpoints(
    config: BenchConfig, ctx: RankContext, run_dir: Path
) -> Iterator[Optional[TrainingCheckpoints]]:
    """The run's checkpoint folder (checkpoint.every_epochs or train.resume), claimed for the run's length."""
    if not (config.checkpoint.every_epochs or config.train.resume):
        yield None
        return
    checkpoints = TrainingCheckpoints(config)
    try:
        checkpoints.claim(ctx, run_dir)
        yield checkpoints
    finally:
        checkpoints.release()


Writer = Callable[[Any, Any], CheckpointWrite]


def checkpoint_writer(config: BenchConfig, out_dir: Path, ctx: RankContext) -> Optional[Writer]:
    if not config.storage.save_checkpoint or not ctx.is_reporter:
        return None
    store = backend(config.storage).checkpoint_store(out_dir)
    name = config.storage.checkpoint_name

    def write(model: Any, optimizer: Any) -> CheckpointWrite:
        """Its figures; a failure (a full disk, another run writing the folder) is reported, not
        raised: the measurement is done. The folder's writer lock is taken outside the timing."""
        lock = None
        try:
            lock = hold(store, out_dir, "give this run another storage.root or storage.checkpoint_name")
            start = time.perf_counter()
            data = serialize({"model": model.state_dict(), "optimizer": optimizer.state_dict()})
            store.put(name, data)  # all or nothing, fsync'd on a local disk (storage.fsync)
            seconds = time.perf_counter() - start
        except FolderBusy as exc:  # another run holds the folder
            return CheckpointWrite(checkpoint_error=str(exc))
        except Exception as exc:  # any backend's write error
            reason = getattr(exc, "strerror", None) or exc
            return CheckpointWrite(checkpoint_error=f"{type(exc).__name__}: {reason} ({store.url}/{name})")
        finally:
            if lock is not None:
                lock.release()
        return CheckpointWrite(
            checkpoint_path=f"{store.url}/{name}",
            checkpoint_bytes=len(data),
            checkpoint_write_seconds=seconds,
            checkpoint_write_gbps=len(data) / seconds / 1e9,
        )

    return write
