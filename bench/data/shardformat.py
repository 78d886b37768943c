"""The shard format (torch-free, shared by the reader and `python -m bench.data prepare`).

A split is `<root>/<split>/meta.json` plus shard objects `<root>/<split>/shard-NNNNN.bin`. A shard is
its JPEG records back to back, then an index of (offset, length, label) int64 triples, then a
24-byte trailer (index offset, record count, magic): one object, read with one GET, no sidecar.
meta.json is written last, so a reader never sees a half-written dataset.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from bench.data.layout import check_local_shards, shard_split_key, train_labels
from bench.errors import DataError

MAGIC = b"BSHARD01"
TRAILER = struct.Struct("<QQ8s")
FORMAT = "bench-shards"
VERSION = 1


def shard_key(split: str, number: int) -> str:
    return f"{split}/shard-{number:05d}.bin"


def is_bench_shard(store: Any, key: str, size: int) -> bool:
    """Whether the object at `key` is a shard bench wrote: its trailer's magic, and an index that ends
    where the trailer starts (read with one ranged get of the trailer)."""
    if size < TRAILER.size:
        return False
    index_offset, count, magic = TRAILER.unpack(store.get_range(key, size - TRAILER.size, TRAILER.size))
    return magic == MAGIC and index_offset + count * 24 + TRAILER.size == size


def encode_shard(records: Sequence[Tuple[bytes, int]]) -> bytes:
    """records: (JPEG bytes, label) pairs."""
    index = np.zeros((len(records), 3), dtype="<i8")
    offset = 0
    for row, (data, label) in enumerate(records):
        index[row] = (offset, len(data), label)
        offset += len(data)
    return b"".join(data for data, _ in records) + index.tobytes() + TRAILER.pack(offset, len(records), MAGIC)


def decode_shard_index(shard: bytes, where: str) -> np.ndarray:
    """The (count, 3) index of (offset, length, label) of a whole shard object."""
    if len(shard) < TRAILER.size:
        raise DataError(f"{where} is not a bench shard (only {len(shard)} bytes)")
    index_offset, count, magic = TRAILER.unpack_from(shard, len(shard) - TRAILER.size)
    if magic != MAGIC or index_offset + count * 24 + TRAILER.size != len(shard):
        raise DataError(f"{where} is not a bench shard (bad trailer): rewrite it with `python -m bench.data prepare`")
    return np.frombuffer(shard, dtype="<i8", count=count * 3, offset=index_offset).reshape(count, 3)


def check_labels(index: np.ndarray, classes: int, where: str) -> None:
    """Every record's label is a class of the split (a label outside [0, classes) would reach the loss
    as `IndexError: Target -1 is out of bounds`, mid-run)."""
    labels = index[:, 2]
    if (bad := np.flatnonzero((labels < 0) | (labels >= classes))).size:
        row = int(bad[0])
        raise DataError(
            f"{where} record {row} has label {int(labels[row])}, outside [0, {classes}) (the {classes} classes its "
            f"meta.json lists; {bad.size} such record(s)): rewrite the shards with `python -m bench.data prepare`"
        )


def check_shard_dataset(data: Any) -> None:
    """Preflight of data=shards, local roots (s3:// ones are checked when opened, through the object store):
    the split is there (bench.data.layout), and its labels are classes."""
    if not data.root.startswith("s3://"):
        check_local_shards(data.root, data.split)
        check_local_shard_labels(data.root, data.split)


def check_local_shard_labels(root: str, split: str) -> None:
    """Read the index (and trailer) of each local shard of a split, not its images, and check its labels."""
    meta = json.loads(Path(root, shard_split_key(split)).read_text())
    classes = len(meta.get("classes", []))
    for shard in meta.get("shards", []):
        path = Path(root, shard["key"])
        try:
            with path.open("rb") as file:
                size = file.seek(0, 2)
                if size < TRAILER.size:
                    raise DataError(f"{path} is not a bench shard (only {size} bytes)")
                file.seek(size - TRAILER.size)
                index_offset, count, _magic = TRAILER.unpack(file.read(TRAILER.size))
                file.seek(index_offset)
                raw = file.read(count * 24)
        except OSError as exc:
            raise DataError(f"{path} cannot be read: {exc.strerror or exc}") from None
        if len(raw) != count * 24:
            raise DataError(
                f"{path} is not a bench shard (bad trailer): rewrite it with `python -m bench.data prepare`"
            )
        check_listed(shard, {"count": count, "bytes": size}, str(path), meta.get("writer"))
        check_labels(np.frombuffer(raw, dtype="<i8").reshape(count, 3), classes, str(path))


def check_listed(listed: Dict[str, Any], found: Dict[str, Any], where: str, writer: Any) -> None:
    """The shard at `where` is the one its meta.json lists: `found` (its "count" of records, its "bytes"; None:
    not known) equals the listing (a meta.json older than these fields, or without one of them, is not checked)."""
    if wrong := [key for key, value in found.items() if value is not None and listed.get(key, value) != value]:
        holds, lists = (
            " and ".join(f"{side[k]} {k.replace('count', 'records')}" for k in wrong) for side in (found, listed)
        )
        by = f" (written by pid {writer.get('pid')} on {writer.get('host')}, {writer.get('since')})" if writer else ""
        raise DataError(
            f"{where} holds {holds}, but its meta.json lists {lists}{by}: another prepare wrote into this "
            "destination since; write the dataset again with `python -m bench.data prepare`, one at a time"
        )


def val_label_map(store: Any) -> Optional[List[int]]:
    """train/'s label of each class val/meta.json lists (None: the same classes, or no train/ split). A val/
    that lacked a class was labelled with its own class list by prepares before issue 39: mapped to
    train/'s; a val/ class train/ lacks has no label: DataError."""
    if not store.exists(shard_split_key("train")):
        return None
    train, val = read_meta(store, "train")["classes"], read_meta(store, "val")["classes"]
    labels = train_labels(train, val, f"{store.url}/{shard_split_key('val')}")
    return None if val == train else labels


def make_meta(
    split: str, classes: List[str], shards: List[Dict[str, Any]], size: int, quality: int, skipped: List, **more: Any
) -> bytes:
    """shards: each one's key, record count and bytes (a reader checks them); `more`: e.g. the writer (its pid...)."""
    meta = {
        "format": FORMAT,
        "version": VERSION,
        "split": split,
        "classes": classes,
        "count": sum(s["count"] for s in shards),
        "size": size,
        "quality": quality,
        "shards": shards,
        "skipped": skipped,
        **more,
    }
    return (json.dumps(meta, indent=1) + "\n").encode()


def check_s3_shards(root: str, storage: Any, splits: Sequence[str]) -> None:
    """Preflight of s3:// shards (and of any with validation): each split's meta.json is there and lists shards
    (a missing val/ split was found only when the first epoch ended) of the sizes it says, and val/'s classes
    are train/'s. Listings only, no shard is read."""
    from bench.storage.base import open_store

    store = open_store(root, storage)
    for split in splits:
        meta, split = read_meta(store, str(split)), str(split)
        sizes = dict(store.list(f"{split}/"))
        for shard in meta["shards"]:
            check_listed(shard, {"bytes": sizes.get(shard["key"])}, f"{store.url}/{shard['key']}", meta.get("writer"))
    if "val" in splits:
        val_label_map(store)


def read_meta(store: Any, split: str) -> Dict[str, Any]:
    key = shard_split_key(split)
    if not store.exists(key):
        raise DataError(
            f"{store.url} holds no {key}: expected shards written by `python -m bench.data prepare` "
            "(is data.split right?)"
        )
    try:
        meta = json.loads(store.get(key))
    except ValueError as exc:
        raise DataError(f"{store.url}/{key} is not valid JSON ({exc})") from None
    if meta.get("format") != FORMAT or not meta.get("shards"):
        raise DataError(f"{store.url}/{key} does not describe bench shards (or lists none)")
    return meta
