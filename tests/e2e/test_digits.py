"""`python -m bench.data digits`: scikit-learn's 8x8 digits written as an image folder, as real
processes: the layout and counts, the images, a rerun that does nothing, one-line errors for bad
options, and a training run of `python -m bench data=imagefolder` over the folder written."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from PIL import Image

CLASSES = [str(c) for c in range(10)]


def digits(bench, dst, *extra, module="bench.data"):
    return bench.run("digits", "--dst", str(dst), *extra, module=module)


def one_error_line(bench, proc) -> str:
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
    errors = bench.error_lines(proc.stderr)
    assert len(errors) == 1, proc.stderr
    return errors[0]


def images_in(root: Path) -> dict:
    """{split: {class: [file names]}}"""
    return {
        split: {c: sorted(os.listdir(root / split / c)) for c in sorted(os.listdir(root / split))}
        for split in ("train", "val")
    }


@pytest.fixture(scope="module")
def written(bench_at, tmp_path_factory):
    """The digits at the defaults (32x32 png, 0.2 val, seed 0), written once for the module."""
    bench = bench_at(tmp_path_factory.mktemp("digits"))
    dst = bench.cwd / "digits"
    proc = digits(bench, dst)
    assert proc.returncode == 0, proc.stderr
    return bench, dst, proc


def test_digits_layout_counts_and_images(written):
    _, dst, proc = written
    assert proc.stdout.strip() == f"wrote 1437 train and 360 val images (10 classes, 32x32 png) to {dst}"
    found = images_in(dst)
    assert list(found["train"]) == CLASSES and list(found["val"]) == CLASSES
    train = sum(len(files) for files in found["train"].values())
    val = sum(len(files) for files in found["val"].values())
    assert (train, val) == (1437, 360)
    names = [name for split in found.values() for files in split.values() for name in files]
    assert len(set(names)) == 1797 and all(name.endswith(".png") for name in names)  # each image once
    for c in CLASSES:  # stratified: every class in val, about a fifth of it
        share = len(found["val"][c]) / (len(found["val"][c]) + len(found["train"][c]))
        assert 0.18 < share < 0.22, (c, share)
    manifest = json.loads((dst / "digits.json").read_text())
    assert (manifest["train"], manifest["val"], manifest["classes"]) == (1437, 360, 10)
    assert (manifest["size"], manifest["format"], manifest["seed"], manifest["val_fraction"]) == (32, "png", 0, 0.2)
    for split in ("train", "val"):
        for c in ("0", "7"):
            with Image.open(dst / split / c / found[split][c][0]) as image:
                image.load()
                assert (image.format, image.size, image.mode) == ("PNG", (32, 32), "RGB")
                assert image.getextrema()[0][1] > 128  # a real digit, not a blank
    assert not [p for p in dst.parent.iterdir() if ".tmp-" in p.name]  # no temporary dir left


def test_digits_rerun_is_a_no_op(written):
    bench, dst, _ = written
    before = {p: p.stat().st_mtime_ns for p in dst.rglob("*")}
    again = digits(bench, dst)
    assert again.returncode == 0, again.stderr
    assert again.stdout.strip() == (
        f"{dst} already holds the digits: 1437 train and 360 val images (10 classes, 32x32 png); nothing to do"
    )
    assert {p: p.stat().st_mtime_ns for p in dst.rglob("*")} == before
    other = digits(bench, dst, "--size", "16")  # other options on the same folder: refused, nothing touched
    assert "--dst=" in one_error_line(bench, other) and "32x32 png" in other.stderr
    assert {p: p.stat().st_mtime_ns for p in dst.rglob("*")} == before


def test_digits_options_jpeg_size_fraction_seed(bench, tmp_path):
    dst = tmp_path / "nested" / "digits16"
    proc = digits(
        bench,
        dst,
        "--format",
        "jpeg",
        "--size",
        "16",
        "--val-fraction",
        "0.5",
        "--seed",
        "3",
        module="bench.tools.data",
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"wrote 898 train and 899 val images (10 classes, 16x16 jpeg) to {dst}"
    found = images_in(dst)
    assert all(found["val"][c] and found["train"][c] for c in CLASSES)
    first = dst / "val" / "3" / found["val"]["3"][0]
    with Image.open(first) as image:
        assert (image.format, image.size, image.mode) == ("JPEG", (16, 16), "RGB")
    # the seed picks the split: seed 3 and seed 0 put different images in val
    default = tmp_path / "seed0"
    assert digits(bench, default, "--val-fraction", "0.5", "--size", "8").returncode == 0
    assert images_in(default)["val"] != {
        c: [n.replace(".jpg", ".png") for n in files] for c, files in found["val"].items()
    }


# digits' bad flags (and that they write nothing) are rows of the bad-input table (tests/reliability/bad_inputs.py)


def test_digits_dst_that_is_a_file_or_holds_other_files(bench, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    assert "--dst=" in one_error_line(bench, digits(bench, blocker)) and blocker.read_text() == "x"
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "mine.txt").write_text("keep")
    assert "no digits.json" in one_error_line(bench, digits(bench, busy))
    assert os.listdir(busy) == ["mine.txt"]
    empty = tmp_path / "empty"
    empty.mkdir()  # an empty directory is filled
    assert digits(bench, empty, "--size", "8").returncode == 0 and (empty / "digits.json").is_file()
