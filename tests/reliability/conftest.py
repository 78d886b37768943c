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
    return {"tmp": tmp_path, "empty": tmp_path / "empty", "images": tmp_path / "images",
            "notimages": tmp_path / "notimages"}
