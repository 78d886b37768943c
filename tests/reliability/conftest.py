"""Fixtures of the reliability suite."""

from __future__ import annotations

import os
import subprocess
import uuid
from pathlib import Path

import pytest


def _listing(root: Path) -> list:
    return sorted((str(path.relative_to(root)), path.stat().st_size) for path in root.rglob("*"))


@pytest.fixture(scope="module")
def place_data(tmp_path_factory, datasets):
    """The bad-input rows' data folders, written once per module (JPEGs and a shard: ~219 rows used
    to write them each). Read-only for the rows: `places` checks each test left them as they were."""
    root = tmp_path_factory.mktemp("places")
    (root / "empty").mkdir()
    datasets.image_folder(root / "images", images=8)
    (root / "notimages" / "class0").mkdir(parents=True)
    for number in range(3):
        (root / "notimages" / "class0" / f"img{number}.jpg").write_text("a text file named like an image")
    (root / "finished").mkdir()
    (root / "finished" / "run_summary.json").write_text("{}")
    _shards_with_a_bad_label(root / "badshards")
    return root, _listing(root)


@pytest.fixture
def places(tmp_path, place_data):
    """`{tmp}` is the test's own directory (with `a-file` in it); the data folders are the module's."""
    root, written = place_data
    (tmp_path / "a-file").write_text("x")
    yield {"tmp": tmp_path, **{name: root / name for name in ("empty", "images", "notimages", "badshards", "finished")}}
    assert _listing(root) == written, "a bad-input row changed the module's shared data folders"


def _shards_with_a_bad_label(root) -> None:
    """A split of one shard, in bench's own format, whose second record has label -1 (issue 18)."""
    import io

    from PIL import Image

    from bench.data.shardformat import encode_shard, make_meta, shard_key

    jpeg = io.BytesIO()
    Image.new("RGB", (8, 8), (200, 40, 40)).save(jpeg, format="JPEG")
    blob = encode_shard([(jpeg.getvalue(), 0), (jpeg.getvalue(), -1)])
    (root / "train").mkdir(parents=True)
    (root / shard_key("train", 0)).write_bytes(blob)
    shards = [{"key": shard_key("train", 0), "count": 2, "bytes": len(blob)}]
    (root / "train" / "meta.json").write_bytes(make_meta("train", ["a", "b"], shards, 8, 90, []))


# ---- a real small disk: tmpfs mounts (root only; skipped where this process may not mount) ----


def _mount_tmpfs(where: Path, options: str) -> bool:
    where.mkdir(parents=True, exist_ok=True)
    return (
        subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(where)], capture_output=True).returncode
        == 0
    )


@pytest.fixture
def small_disk(tmp_path):
    """mount(options) -> a fresh tmpfs mounted in tmp_path, unmounted after the test."""
    mounted = []

    def mount(options: str) -> Path:
        where = tmp_path / f"disk-{uuid.uuid4().hex[:6]}"
        if os.geteuid() != 0 or not _mount_tmpfs(where, options):
            pytest.skip("needs permission to mount a tmpfs (root)")
        mounted.append(where)
        return where

    yield mount
    for where in mounted:
        subprocess.run(["umount", "-l", str(where)], capture_output=True)


def _fill(disk: Path) -> None:
    """Write until the filesystem says it is full."""
    try:
        with open(disk / "filler", "wb") as fh:
            while True:
                fh.write(b"\0" * 65536)
                fh.flush()
    except OSError:  # full (also when it is full already: the file cannot even be made)
        pass


@pytest.fixture
def fill_disk():
    """fill_disk(path): write into `path` until its filesystem says it is full."""
    return _fill
