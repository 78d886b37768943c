"""`python -m bench.data prepare`: an image folder -> pre-resized JPEG shards in a directory or S3.

Images are shuffled once (so every shard mixes classes), cut into shards of --shard-size, and
each shard is encoded and written by one process of a pool; meta.json is written last.

The pool's processes are spawned, not forked: the main process opens the store to write each
split's meta.json, and an S3 client (obstore's tokio runtime, boto3's threads) copied by fork
into the next split's pool froze on a lock or crashed. They end with the command: on SIGTERM
and Ctrl-C the pool is terminated, and a worker whose parent died (SIGKILL) is killed by the
kernel (PR_SET_PDEATHSIG, bench.machine.children).
"""

from __future__ import annotations

import io
import multiprocessing
import os
import random
import re
import sys
import threading
import time
from contextlib import contextmanager
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

from PIL import Image
from tqdm import tqdm

from bench.config.storage import StorageLocation
from bench.data.layout import imagefolder_base, scan_image_folder, shard_split_key, val_classes
from bench.data.shardformat import encode_shard, is_bench_shard, make_meta, shard_key
from bench.errors import DataError, Interrupted
from bench.machine.children import CHILD_GRACE_S, die_with_parent, sigterm_raises
from bench.storage import writer_lock
from bench.storage.base import open_store

SPLITS = ("train", "val")
SHARD_NAME = re.compile(r"shard-\d{5,}\.bin")  # bench.data.shardformat.shard_key's names
_stores: Dict[str, Any] = {}


def resized_jpeg(path: str, size: int, quality: int) -> bytes:
    """The image with its short side brought down to `size` (never up), as a baseline JPEG."""
    with Image.open(path) as image:
        width, height = image.size
        scale = min(1.0, size / min(width, height))
        target = (max(1, round(width * scale)), max(1, round(height * scale)))
        if scale < 1:
            image.draft("RGB", target)  # DCT-domain downscale to at least `target` (JPEG only)
        rgb = image.convert("RGB")
        rgb = rgb.resize(target, Image.Resampling.BICUBIC, reducing_gap=3.0) if rgb.size != target else rgb
        out = io.BytesIO()
        rgb.save(out, "JPEG", quality=quality)
        return out.getvalue()


def _write_shard(
    task: Tuple[str, StorageLocation, str, List[Tuple[str, int]], int, int],
) -> Tuple[Dict[str, Any], List[str]]:
    location, storage, key, items, size, quality = task
    records, skipped = [], []
    for path, label in items:
        try:
            records.append((resized_jpeg(path, size, quality), label))
        except (OSError, ValueError, SyntaxError, Image.DecompressionBombError):
            skipped.append(path)
    blob = encode_shard(records)
    if location not in _stores:  # one store per pool process (an S3 store checks access when opened)
        _stores[location] = open_store(location, storage)
    _stores[location].put(key, blob)
    return {"key": key, "count": len(records), "bytes": len(blob)}, skipped


@contextmanager
def _pool(processes: int) -> Iterator[Any]:
    """A spawn pool that is terminated however the block ends (SIGTERM raises Interrupted here). In each
    pool process Ctrl-C is the parent's to handle, and the kernel kills it when its parent dies. A
    worker still there CHILD_GRACE_S after the pool's SIGTERM is killed: one blocked in native code (an
    S3 request) with a Python SIGTERM handler (coverage's, a site's) never runs it, and the pool's
    terminate() would wait for it for ever."""
    spawn = multiprocessing.get_context("spawn")
    stragglers: Optional[threading.Timer] = None
    try:
        with sigterm_raises(), spawn.Pool(processes, die_with_parent, (os.getpid(),)) as pool:
            try:
                yield pool
            finally:  # armed through the pool's terminate() as the block ends (it starts no worker after)
                workers = list(pool._pool)  # type: ignore[attr-defined]
                stragglers = threading.Timer(CHILD_GRACE_S, lambda: [w.kill() for w in workers if w.exitcode is None])
                stragglers.daemon = True
                stragglers.start()
    except KeyboardInterrupt:
        raise Interrupted("SIGINT") from None
    finally:
        if stragglers is not None:
            stragglers.cancel()


def clear_split(store: Any, split: str, keep: Sequence[str]) -> Tuple[List[str], List[str]]:
    """Before a split is written: its meta.json goes (written again last, it marks the split complete:
    an interrupted prepare must not leave an earlier one's index over new shards), and the shards an
    earlier prepare left that this one does not overwrite (it had more, or was interrupted) are deleted,
    each proven bench's by its trailer. Files named like shards that are not bench's are left.
    Returns (deleted, left alone): keys."""
    store.delete(shard_split_key(split))
    removed, foreign = [], []
    for key, size in store.list(f"{split}/"):
        if key in keep or not SHARD_NAME.fullmatch(key[len(split) + 1 :]):
            continue
        if is_bench_shard(store, key, size):
            store.delete(key)
            removed.append(key)
        else:
            foreign.append(key)
    return removed, foreign


def prepare(
    src: str,
    dst: str,
    size: int = 256,
    quality: int = 90,
    shard_size: int = 1000,
    workers: Optional[int] = None,
    storage: Optional[StorageLocation] = None,
    seed: int = 0,
    progress: Optional[bool] = None,
) -> Dict[str, Any]:
    """Write every split of `src` to `dst`; returns a summary per split. progress None: a bar on a TTY."""
    workers = workers or os.cpu_count() or 1
    storage = storage or StorageLocation()
    summary: Dict[str, Any] = {}
    if not os.path.isdir(src):
        raise DataError(
            f"--src {src!r} does not exist: expected an image folder with one sub-folder per class "
            "(or train/ and val/ holding them)"
        )
    # train/ and val/ of an ImageNet layout, or "train" for a flat class-folder root
    splits = [split for split in SPLITS if os.path.isdir(os.path.join(src, split))] or ["train"]
    lacks = val_classes(src)[1] if "val" in splits else []  # a val/ class train/ lacks: refused before any write
    store = open_store(dst, storage)
    lock = writer_lock.hold(store, None, "let it end, or give this one another --dst", what="shard destination")
    writer = {**lock.owner, "src": os.path.abspath(src)}
    try:
        for split in splits:
            base = imagefolder_base(src, split)
            classes, paths, labels = scan_image_folder(base, val_classes(src)[0] if split == "val" else None)
            items = list(zip(paths, labels, strict=True))
            random.Random(seed).shuffle(items)  # every shard mixes classes
            tasks = [
                (dst, storage, shard_key(split, number), items[start : start + shard_size], size, quality)
                for number, start in enumerate(range(0, len(items), shard_size))
            ]
            removed, foreign = clear_split(store, split, [task[2] for task in tasks])
            started = time.perf_counter()
            shards, skipped = [], []
            disable = None if progress is None else not progress
            bar = tqdm(total=len(items), unit="img", desc=f"prepare {split}", file=sys.stderr, disable=disable)
            with _pool(min(workers, len(tasks))) as pool:
                for shard, bad in pool.imap_unordered(_write_shard, tasks):
                    shards.append(shard)
                    skipped.extend(bad)
                    bar.update(shard["count"] + len(bad))
            bar.close()
            shards.sort(key=lambda s: s["key"])
            store.put(f"{split}/meta.json", make_meta(split, classes, shards, size, quality, skipped, writer=writer))
            seconds = time.perf_counter() - started
            written = sum(s["count"] for s in shards)
            summary[split] = {
                "images": written,
                "shards": len(shards),
                "bytes": sum(s["bytes"] for s in shards),
                "skipped": len(skipped),
                "seconds": seconds,
                "images_per_second": written / seconds,
                "removed": removed,
                "foreign": foreign,
                "lacks": lacks if split == "val" else [],
            }
    finally:
        lock.release()
    return summary


def describe(dst: str, summary: Mapping[str, Any]) -> str:
    return "; ".join(
        f"{split}: {s['images']} images in {s['shards']} shards ({s['bytes'] / 2**20:.1f} MiB) to {dst} in "
        f"{s['seconds']:.1f} s ({s['images_per_second']:.0f} images/s), {s['skipped']} unreadable skipped"
        + _leftovers(s["removed"], s["foreign"])
        + (f", lacking train/'s class(es) {', '.join(s['lacks'])}" if s.get("lacks") else "")
        for split, s in summary.items()
    )


def _leftovers(removed: Sequence[str], foreign: Sequence[str]) -> str:
    said = f", {_count(removed, 'shard')} of an earlier prepare deleted ({_span(removed)})" if removed else ""
    if foreign:
        said += f", {_count(foreign, 'file')} named like shards but not bench's left as they are ({_span(foreign)})"
    return said


def _count(keys: Sequence[str], noun: str) -> str:
    return f"{len(keys)} {noun}{'' if len(keys) == 1 else 's'}"


def _span(keys: Sequence[str]) -> str:
    return keys[0] if len(keys) == 1 else f"{keys[0]} .. {keys[-1]}"
