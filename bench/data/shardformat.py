"""The shard format (torch-free, shared by the reader and `python -m bench.data prepare`).

A split is `<root>/<split>/meta.json` plus shard objects `<root>/<split>/shard-NNNNN.bin`. A shard is
its JPEG records back to back, then an index of (offset, length, label) int64 triples, then a
24-byte trailer (index offset, record count, magic): one object, read with one GET, no sidecar.
meta.json is written last, so a reader never sees a half-written dataset.
"""

from __future__ import annotations

import json
import struct
from typing import Any, Dict, List, Sequence, Tuple

import numpy as np

from bench.data.layout import shard_split_key
from bench.errors import DataError

MAGIC = b"BSHARD01"
TRAILER = struct.Struct("<QQ8s")
FORMAT = "bench-shards"
VERSION = 1


def shard_key(split: str, number: int) -> str:
    return f"{split}/shard-{number:05d}.bin"


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


def make_meta(split: str, classes: List[str], shards: List[Dict[str, Any]], size: int, quality: int,
              skipped: List[str]) -> bytes:
    meta = {"format": FORMAT, "version": VERSION, "split": split, "classes": classes,
            "count": sum(s["count"] for s in shards), "size": size, "quality": quality,
            "shards": shards, "skipped": skipped}
    return (json.dumps(meta, indent=1) + "\n").encode()


def read_meta(store: Any, split: str) -> Dict[str, Any]:
    key = shard_split_key(split)
    if not store.exists(key):
        raise DataError(f"{store.url} holds no {key}: expected shards written by `python -m bench.data prepare` "
                        "(is data.split right?)")
    try:
        meta = json.loads(store.get(key))
    except ValueError as exc:
        raise DataError(f"{store.url}/{key} is not valid JSON ({exc})") from None
    if meta.get("format") != FORMAT or not meta.get("shards"):
        raise DataError(f"{store.url}/{key} does not describe bench shards (or lists none)")
    return meta
