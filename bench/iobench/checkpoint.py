"""Checkpoint workloads, as MLPerf Storage runs them (2025+): `checkpoint_count` checkpoints
written (torch.save of real tensors, fsync'd on local disks), the page cache dropped, then read
back (torch.load, compared). With checkpoint_writers=all every simulated accelerator writes and
reads its 1/N share at the same time and the slowest one sets the time; with `one`, client 0
writes it all (DLIO 2.0.0). Serialisation is timed apart from the store's write, and
deserialisation apart from its read. Periodic checkpoints (checkpoint_every_steps) are written
from inside the read loop by the same code.

Each checkpoint is a record {phase, index, bytes, serialize_s, write_s, read_s, load_s}, merged
over the clients into the phase's figures (`add_checkpoint_figures`). Per checkpoint (one index),
the slowest client sets the time (MLPerf: "the metric for duration is the maximum time across all
GPUs") and its GB/s is the bytes of all clients over that time; figures are then averaged over the
`checkpoint_count` checkpoints.
- checkpoint_write_seconds / _gbps: serialise + store (the names' meaning since they existed);
- checkpoint_store_write_seconds / _gbps: the store alone (fsync'd on a local disk): MLPerf's figure;
- checkpoint_serialize_seconds, and the same three for reads (store_read: the fetch alone,
  checkpoint_deserialize_seconds: torch.load), the reads after the page cache was dropped
  (checkpoint_cache_drop says how, or why it could not be).
Periodic checkpoints (written during the read phase) get periodic_checkpoint_* figures.

Unless storage.workload.checkpoint_keep is set, the checkpoints are benchmark litter: a periodic
one is deleted when the next is written, and the client deletes all it wrote when its phase ends
(bench.iobench.accelerators). On a local disk the phase first checks that its checkpoints fit in the
free space (bench.iobench.freespace), and a full disk is reported naming the path.
"""

from __future__ import annotations

import io
import time
from pathlib import PurePosixPath
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple

from bench.iobench.freespace import human, shortfall, write_error
from bench.iobench.result import ReaderResult, RunFigures
from bench.maths.stats import mean
from bench.storage.base import ObjectStore, serialize

CHECKPOINT_DIR = "iobench-checkpoints"  # under storage.root (null: the run's directory)
OVERHEAD = 8192  # torch.save's framing per checkpoint file (measured: about 3 KiB for these tensors)
TENSORS = 8  # a checkpoint is a handful of large tensors plus small ones, like a model's
# what each checkpoint_<name>_seconds times (the slowest client's sum of these steps)
CHECKPOINT_TIMES = {
    "write": ("serialize_s", "write_s"),
    "store_write": ("write_s",),
    "read": ("read_s", "load_s"),
    "store_read": ("read_s",),
}
Sync = Callable[[], None]  # waits until every client got here (a barrier), or nothing with one client


def checkpoint_key(name: str, tag: str, client: Optional[int]) -> str:
    """`checkpoint.pt` -> `checkpoint-<tag>.rank<client>.pt` (no tag: one checkpoint; no client: the whole)."""
    path = PurePosixPath(name)
    stem = f"{path.stem}-{tag}" if tag else path.stem
    return f"{stem}.rank{client}{path.suffix}" if client is not None else f"{stem}{path.suffix}"


def final_keys(name: str, count: int, owners: Iterable[Optional[int]]) -> List[str]:
    """The keys of `count` checkpoints (tagged with their index when several) of each owner."""
    return [checkpoint_key(name, str(i) if count > 1 else "", owner) for i in range(count) for owner in owners]


def drop_cache(store: ObjectStore, keys: List[str]) -> str:
    drop = getattr(store, "drop_cache", None)
    return drop(keys) if drop is not None else "none (an object store: nothing cached on this host)"


class Checkpointer:
    """One client's checkpoints: its share of the state, serialised fresh for every write."""

    def __init__(self, store: ObjectStore, name: str, size_mb: float, client: int, writers: int = 1, keep: bool = True):
        self.store, self.name, self.client = store, name, client
        self.owner = client if writers > 1 else None  # a key of its own when several clients write a share
        self.writers, self.keep = writers, keep  # clients writing a share at once; keep: leave the files
        import torch

        generator = torch.Generator().manual_seed(client)
        per_tensor = max(1, int(size_mb * 2**20 / 4 / TENSORS))  # float32
        model = {f"layer{i}.weight": torch.randn(per_tensor, generator=generator) for i in range(TENSORS)}
        self.state: Dict[str, Any] = {"model": model, "step": 0}
        self.nbytes = sum(t.numel() * t.element_size() for t in self.state["model"].values()) + OVERHEAD
        self.records: List[Dict[str, Any]] = []
        self.writing = ""  # the key being written, for an error's message

    def write(self, phase: str, index: int, tag: str) -> str:
        key = self.writing = checkpoint_key(self.name, tag, self.owner)
        start = time.perf_counter()
        data = serialize(self.state)
        serialized = time.perf_counter()
        self.store.put(key, data)
        seconds = dict(serialize_s=serialized - start, write_s=time.perf_counter() - serialized)
        self.records.append(dict(phase=phase, index=index, bytes=len(data), **seconds, key=key))
        return key

    def read(self, record: Dict[str, Any]) -> None:
        import torch

        start = time.perf_counter()
        data = self.store.get(record["key"])
        fetched = time.perf_counter()
        loaded = torch.load(io.BytesIO(data), weights_only=True)
        record.update(read_s=fetched - start, load_s=time.perf_counter() - fetched)
        if not torch.equal(loaded["model"]["layer0.weight"], self.state["model"]["layer0.weight"]):
            raise RuntimeError(f"checkpoint {self.store.url}/{record['key']} read back different tensors")

    def periodic(self, step: int) -> float:
        """For the read loop: write one checkpoint at `step`, return the seconds it took."""
        start = time.perf_counter()
        earlier = [r["key"] for r in self.records if r["phase"] == "periodic"]
        if earlier and not self.keep:  # one periodic checkpoint on the disk at a time
            self.store.delete(earlier[-1])
        self.write("periodic", step, f"step{step}")
        return time.perf_counter() - start

    def room_for(self, count: int) -> Optional[str]:
        """Why `count` checkpoints (of every writer) cannot fit on this local disk, or None; the
        files of the same names already there (a kept earlier run) are replaced, so they count as room."""
        if (root := getattr(self.store, "root", None)) is None:  # an object store: no free-space figure
            return None
        keys = set(final_keys(self.name, count, [self.owner]))
        there = sum(size for key, size in self.store.list() if key in keys)
        need = max(0, count * self.nbytes - there) * self.writers
        return shortfall(f"{count} checkpoint(s) of {human(self.nbytes * self.writers)}", need, root)

    def remove_written(self) -> None:
        """Delete every checkpoint this client wrote (benchmark data, not a model to keep)."""
        for key in {r["key"] for r in self.records}:
            self.store.delete(key)


def run_checkpoints(
    checkpointer: Optional[Checkpointer], count: int, sync: Sync, heartbeat: Callable[[], None] = lambda: None
) -> Tuple[str, Optional[str]]:
    """Sync, `count` writes, every client's done (sync), cache dropped, sync, `count` reads. A client
    that writes nothing (checkpoint_writers=one, not client 0) passes None and only syncs, so
    the barriers line up; a failure (a full disk) is returned, not raised, for the same reason.
    Returns (how the cache was dropped, the error or None)."""
    if checkpointer is None:  # nothing to write: the barriers only, as a writing client passes them
        for _ in range(3):
            sync()
        return "", None
    # before the barrier: no client writes while another one looks
    error, how, written = checkpointer.room_for(count), "", []
    sync()  # every client starts writing at once, as ranks of a job do after a step
    if error is None:
        try:
            for index in range(count):
                checkpointer.write("final", index, str(index) if count > 1 else "")
                heartbeat()  # a rank's watchdog counts checkpoints as steps
            written = [r for r in checkpointer.records if r["phase"] == "final"]
        except Exception as exc:
            error = write_error(exc, f"{checkpointer.store.url}/{checkpointer.writing}")
    sync()
    if written:
        how = drop_cache(checkpointer.store, [r["key"] for r in written])
    sync()
    if written and error is None:
        try:
            for record in written:
                checkpointer.read(record)
                heartbeat()
        except Exception as exc:
            error = f"{type(exc).__name__}: {getattr(exc, 'strerror', None) or exc}"
    return how, error


def _by_index(results: Sequence[ReaderResult], phase: str) -> List[List[Dict[str, Any]]]:
    found: Dict[Any, List[Dict[str, Any]]] = {}
    for result in results:
        for record in result.checkpoints:
            if record["phase"] == phase:
                found.setdefault((result.run, record["index"]), []).append(record)
    return [found[index] for index in sorted(found)]


def _slowest(groups: List[List[Dict[str, Any]]], *parts: str) -> Optional[float]:
    """Mean over checkpoints of the slowest client's time for `parts` (all of them recorded)."""
    times = [
        max(sum(r[p] for p in parts) for r in group) for group in groups if all(p in r for r in group for p in parts)
    ]
    return mean(times)


def _gbps(size: Optional[float], seconds: Optional[float]) -> Optional[float]:
    return size / seconds / 1e9 if size and seconds else None


def add_checkpoint_figures(figures: RunFigures, results: Sequence[ReaderResult]) -> RunFigures:
    """The checkpoint phase's figures (and the periodic checkpoints') set on `figures`, returned."""
    if errors := [r.checkpoint_error for r in results if r.checkpoint_error]:
        figures.checkpoint_error = errors[0]
    if final := _by_index(results, "final"):
        size = mean([sum(r["bytes"] for r in group) for group in final])
        figures.checkpoint_bytes = int(size) if size else None
        figures.checkpoint_count = len({r["index"] for group in final for r in group})
        figures.checkpoint_clients = len(final[0])
        figures.checkpoint_serialize_seconds = _slowest(final, "serialize_s")
        figures.checkpoint_deserialize_seconds = _slowest(final, "load_s")
        for name, parts in CHECKPOINT_TIMES.items():  # checkpoint_<name>_seconds and _gbps
            setattr(figures, f"checkpoint_{name}_seconds", seconds := _slowest(final, *parts))
            setattr(figures, f"checkpoint_{name}_gbps", _gbps(size, seconds))
        if drops := sorted({r.checkpoint_cache_drop for r in results if r.checkpoint_cache_drop}):
            figures.checkpoint_cache_drop = ", ".join(drops)
    if periodic := _by_index(results, "periodic"):
        size = mean([sum(r["bytes"] for r in group) for group in periodic])
        figures.periodic_checkpoints = len({r["index"] for group in periodic for r in group})
        figures.periodic_checkpoint_bytes = int(size) if size else None
        figures.periodic_checkpoint_seconds = _slowest(periodic, "serialize_s", "write_s")
        figures.periodic_checkpoint_store_write_gbps = _gbps(size, _slowest(periodic, "write_s"))
    return figures
