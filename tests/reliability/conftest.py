"""Fixtures of the reliability suite."""

from __future__ import annotations

import pytest


@pytest.fixture
def places(tmp_path, datasets):
    (tmp_path / "empty").mkdir()
    datasets.image_folder(tmp_path / "images", images=8)
    (tmp_path / "notimages" / "class0").mkdir(parents=True)
    for number in range(3):
        (tmp_path / "notimages" / "class0" / f"img{number}.jpg").write_text("a text file named like an image")
    (tmp_path / "a-file").write_text("x")
    _shards_with_a_bad_label(tmp_path / "badshards")
    return {"tmp": tmp_path, "empty": tmp_path / "empty", "images": tmp_path / "images",
            "notimages": tmp_path / "notimages", "badshards": tmp_path / "badshards"}


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
