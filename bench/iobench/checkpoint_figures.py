"""The checkpoint phase's figures, merged over simulated accelerators.

Per checkpoint (one index), the slowest client sets the time (MLPerf: "the metric for duration
is the maximum time across all GPUs") and its GB/s is the bytes of all clients over that time;
figures are then averaged over the `checkpoint_count` checkpoints.
- checkpoint_write_seconds / _gbps: serialise + store (the names' meaning since they existed);
- checkpoint_store_write_seconds / _gbps: the store alone (fsync'd on a local disk): MLPerf's figure;
- checkpoint_serialize_seconds, and the same three for reads (store_read: the fetch alone,
  checkpoint_deserialize_seconds: torch.load), the reads after the page cache was dropped
  (checkpoint_cache_drop says how, or why it could not be).
Periodic checkpoints (written during the read phase) get periodic_checkpoint_* figures.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence

from bench.iobench.measured import ReaderResult
from bench.iobench.result import RunFigures
from bench.maths.stats import mean


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
    errors = [r.checkpoint_error for r in results if r.checkpoint_error]
    if errors:
        figures.checkpoint_error = errors[0]
    final = _by_index(results, "final")
    if final:
        size = mean([sum(r["bytes"] for r in group) for group in final])
        write, store_write = _slowest(final, "serialize_s", "write_s"), _slowest(final, "write_s")
        read, store_read = _slowest(final, "read_s", "load_s"), _slowest(final, "read_s")
        figures.checkpoint_bytes = int(size) if size else None
        figures.checkpoint_count = len({r["index"] for group in final for r in group})
        figures.checkpoint_clients = len(final[0])
        figures.checkpoint_write_seconds, figures.checkpoint_write_gbps = write, _gbps(size, write)
        figures.checkpoint_serialize_seconds = _slowest(final, "serialize_s")
        figures.checkpoint_store_write_seconds = store_write
        figures.checkpoint_store_write_gbps = _gbps(size, store_write)
        figures.checkpoint_read_seconds, figures.checkpoint_read_gbps = read, _gbps(size, read)
        figures.checkpoint_deserialize_seconds = _slowest(final, "load_s")
        figures.checkpoint_store_read_seconds = store_read
        figures.checkpoint_store_read_gbps = _gbps(size, store_read)
        drops = sorted({r.checkpoint_cache_drop for r in results if r.checkpoint_cache_drop})
        if drops:
            figures.checkpoint_cache_drop = ", ".join(drops)
    periodic = _by_index(results, "periodic")
    if periodic:
        size = mean([sum(r["bytes"] for r in group) for group in periodic])
        seconds, store_write = _slowest(periodic, "serialize_s", "write_s"), _slowest(periodic, "write_s")
        figures.periodic_checkpoints = len({r["index"] for group in periodic for r in group})
        figures.periodic_checkpoint_bytes = int(size) if size else None
        figures.periodic_checkpoint_seconds = seconds
        figures.periodic_checkpoint_store_write_gbps = _gbps(size, store_write)
    return figures
