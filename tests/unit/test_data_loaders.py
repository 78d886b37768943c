"""The real data options in-process, on tiny datasets written in the test: batch contract,
labels, pixels through shards, sharding across ranks and workers, corrupt and unreadable files."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from forked_bench import left_alive
from PIL import Image

from bench.config import compose
from bench.config.data import DataConfig
from bench.data.loader import epoch_batch_sampler
from bench.data.registry import build_batches
from bench.data.shards import consumer_plan
from bench.data.transforms import IMAGENET_MEAN, IMAGENET_STD, center_crop_box, decode_crop, resize_into
from bench.errors import DataError

CPU = torch.device("cpu")
CLASSES = 4  # the `datasets` fixture's image folders


def data_cfg(name: str, root: Path, **values) -> DataConfig:
    """The data group as `python -m bench data=<name> data.root=<root> data.<key>=<value> ...` has it
    (small batches, 32x32, in-process loading unless num_workers is given)."""
    values = {
        "split": "train",
        "batch_size": 8,
        "image_size": 32,
        "num_classes": 100,
        "num_workers": 0,
        "pin_memory": "false",
        "persistent_workers": "false",
        "prefetch_factor": 2,
        **values,
    }
    overrides = [f"data.{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in values.items()]
    return compose(f"data={name}", f"data.root={root}", *overrides).data


def take(cfg: dict, count: int, memory_format=torch.contiguous_format, seed_rank=None) -> list:
    """`count` batches; seed_rank=r: as rank r of 2, with run seed r."""
    ranks = {} if seed_rank is None else {"rank": seed_rank, "world_size": 2}
    batches = build_batches(cfg, CPU, memory_format, seed=seed_rank or 0, **ranks)
    taken = [next(batches) for _ in range(count)]
    _facts.clear()
    _facts.update(batches.facts)
    batches.close()
    return taken


_facts: dict = {}


def dataset_facts() -> dict:
    """The facts (dataset_size, corrupt_skipped, ...) of the iterator the last take() read."""
    return dict(_facts)


def to_uint8(images: torch.Tensor) -> np.ndarray:
    """Undo the ImageNet normalisation: NHWC uint8-valued floats."""
    mean = torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1) * 255
    std = torch.tensor(IMAGENET_STD).view(1, 3, 1, 1) * 255
    return (images * std + mean).permute(0, 2, 3, 1).numpy()


@pytest.mark.parametrize(
    "split,memory_format,decoder",
    [("train", torch.contiguous_format, "simplejpeg"), ("val", torch.channels_last, "pil")],
)
@pytest.mark.slow  # starts processes inside bench (workers, readers, a fork)
def test_imagefolder_batches_follow_the_contract(datasets, tmp_path, split, memory_format, decoder):
    layout = datasets.imagenet_layout(tmp_path / "imagenet")
    cfg = data_cfg("imagefolder", tmp_path / "imagenet", split=split, batch_size=4, num_workers=2, decoder=decoder)
    batches = take(cfg, 6, memory_format)  # more than one pass over val (8 images): the iterator cycles
    for images, labels in batches:
        assert images.shape == (4, 3, 32, 32) and images.dtype == torch.float32
        assert images.is_contiguous(memory_format=memory_format)
        assert labels.dtype == torch.int64 and labels.min() >= 0 and labels.max() < CLASSES
        assert images.min() > -2.2 and images.max() < 2.7  # ImageNet-normalised 0..255 pixels
    labels = torch.cat([labels for _, labels in batches])
    assert set(labels.tolist()) == set(range(CLASSES))
    facts = dataset_facts()
    assert facts["dataset_size"] == len(layout[split]) and facts["dataset_classes"] == CLASSES
    assert facts["corrupt_skipped"] == 0


def test_val_pass_is_the_folder_in_order_with_center_crops(datasets, tmp_path):
    paths = datasets.image_folder(tmp_path / "flat", images=8)
    cfg = data_cfg("imagefolder", tmp_path / "flat", split="val", batch_size=8)
    ((images, labels),) = take(cfg, 1)
    ordered = sorted(paths)  # ImageFolder order: class folders, then file names
    assert labels.tolist() == [int(os.path.basename(os.path.dirname(p))[-3:]) for p in ordered]
    # an independent reference: PIL's antialiased bilinear resize of the center crop (64x48 -> 42x42 -> 32x32)
    left, top, side, _ = center_crop_box(64, 48)
    reference = np.asarray(
        Image.open(ordered[3]).convert("RGB").resize((32, 32), Image.BILINEAR, box=(left, top, left + side, top + side))
    )
    assert np.abs(to_uint8(images)[3] - reference).mean() < 3.0


def test_held_batches_are_never_overwritten(datasets, tmp_path):
    """Output buffers are reused on the CPU only when nobody holds them."""
    datasets.image_folder(tmp_path / "flat", images=16)
    cfg = data_cfg("imagefolder", tmp_path / "flat", split="val", batch_size=4)
    batches = build_batches(cfg, CPU, torch.contiguous_format, seed=0)
    held = [next(batches) for _ in range(4)]
    copies = [images.clone() for images, _ in held]
    more = [next(batches)[0] for _ in range(8)]
    assert all(torch.equal(images, copy) for (images, _), copy in zip(held, copies, strict=True))
    assert len({t.data_ptr() for t in more}) < len(more)  # ...and reused when they are free
    batches.close()


@pytest.mark.slow  # starts processes inside bench (workers, readers, a fork)
def test_cifar100_reads_the_python_format(datasets, tmp_path):
    written = datasets.cifar100(tmp_path / "cifar-100-python")
    cfg = data_cfg("cifar100", tmp_path / "cifar-100-python", split="val", batch_size=12)
    ((images, labels),) = take(cfg, 1)
    assert labels.tolist() == written["test"][b"fine_labels"]
    native = written["test"][b"data"].reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)
    assert np.abs(to_uint8(images) - native).max() < 0.01  # val at 32: the pixels themselves
    assert dataset_facts()["dataset_size"] == 12 and dataset_facts()["dataset_classes"] == 100

    ((resized, _),) = take(
        data_cfg("cifar100", tmp_path / "cifar-100-python", batch_size=12, image_size=64, num_workers=1), 1
    )
    assert resized.shape == (12, 3, 64, 64)


@pytest.mark.slow  # starts processes inside bench (workers, readers, a fork)
def test_shards_round_trip_labels_and_pixels(datasets, tmp_path, capsys):
    """prepare -> read (val: no augmentation): every source image comes back once, with its label
    and its pixels within JPEG re-encoding tolerance."""
    layout = datasets.imagenet_layout(tmp_path / "imagenet", train=16, val=8)
    from bench.tools.data import main as data_command

    assert (
        data_command(
            [
                "prepare",
                "--src",
                str(tmp_path / "imagenet"),
                "--dst",
                str(tmp_path / "shards"),
                "--size",
                "48",
                "--shard-size",
                "3",
                "--workers",
                "2",
                "--no-progress",
            ]
        )
        == 0
    )
    printed = capsys.readouterr().out
    assert "train: 16 images in 6 shards" in printed and "val: 8 images in 3 shards" in printed

    cfg = data_cfg("shards", tmp_path / "shards", split="val", batch_size=8)
    ((images, labels),) = take(cfg, 1)
    got = to_uint8(images)
    expected = np.empty((len(layout["val"]), 32, 32, 3), np.uint8)
    for slot, path in enumerate(layout["val"]):
        resize_into(expected[slot], decode_crop(Path(path).read_bytes(), False, 32, None), flip=False)
    source_labels = [int(os.path.basename(os.path.dirname(p))[-3:]) for p in layout["val"]]
    matched = []
    for image, label in zip(got, labels.tolist(), strict=True):
        errors = np.abs(expected.astype(np.float32) - image).mean(axis=(1, 2, 3))
        best = int(errors.argmin())
        assert errors[best] < 6.0, errors[best]  # JPEG re-encoding at quality 90
        assert source_labels[best] == label
        matched.append(best)
    assert sorted(matched) == list(range(len(layout["val"])))
    facts = dataset_facts()
    assert facts["dataset_size"] == 8 and facts["dataset_shards"] == 3


def test_ranks_read_disjoint_samples(tmp_path):
    """DistributedSampler: rank 0 and 1 of 2 split the dataset, reshuffled each epoch. Its seed comes
    from the dataset, not the run seed, which the trainer may vary per rank."""
    cfg = data_cfg("imagefolder", tmp_path, batch_size=4)
    per_rank = [[i for batch in epoch_batch_sampler(40, cfg, True, rank, 2, "x") for i in batch] for rank in (0, 1)]
    assert len(per_rank[0]) == len(per_rank[1]) == 20
    assert set(per_rank[0]).isdisjoint(per_rank[1]) and set(per_rank[0]) | set(per_rank[1]) == set(range(40))
    assert per_rank[0] != sorted(per_rank[0])  # shuffled
    sampler = epoch_batch_sampler(40, cfg, True, 0, 2, "x")
    sampler.sampler.set_epoch(1)
    assert [i for batch in sampler for i in batch] != per_rank[0]


@pytest.mark.parametrize("shards", [7, 2])
def test_shard_consumers_read_disjoint_records(shards):
    """Whole shards per consumer when there are enough, else every consumer strides the records."""
    counts = [5] * shards
    starts = np.cumsum([0, *counts[:-1]])
    seen = []
    for consumer in range(4):
        for shard, record_filter in consumer_plan(
            counts, epoch=3, seed=0, shuffle=True, consumer=consumer, consumers=4
        ):
            rows = range(counts[shard])
            if record_filter:
                rows = [r for r in rows if (starts[shard] + r) % record_filter[0] == record_filter[1]]
            seen += [int(starts[shard]) + r for r in rows]
    assert sorted(seen) == list(range(sum(counts)))


@pytest.mark.slow  # starts processes inside bench (workers, readers, a fork)
def test_corrupt_image_is_skipped_and_counted_unless_strict(datasets, tmp_path):
    datasets.image_folder(tmp_path / "flat", images=12)
    bad = tmp_path / "flat" / "class001" / "broken.jpg"
    bad.write_bytes(b"\xff\xd8\xff\xe0 this is not a JPEG")
    cfg = data_cfg("imagefolder", tmp_path / "flat", split="val", batch_size=13, num_workers=1)
    ((images, labels),) = take(cfg, 1)
    assert images.shape[0] == 13 and dataset_facts()["corrupt_skipped"] == 1
    # broken.jpg sorts first in class001: its slot holds the next image, of the same class
    assert labels.tolist() == [0] * 3 + [1] * 4 + [2] * 3 + [3] * 3

    with pytest.raises(DataError, match=f"corrupt image {bad}"):
        take(dataclasses.replace(cfg, strict=True), 1)


@pytest.mark.slow  # starts processes inside bench (workers, readers, a fork)
def test_unreadable_file_names_its_path(datasets, tmp_path):
    datasets.image_folder(tmp_path / "flat", images=8)
    dangling = tmp_path / "flat" / "class000" / "gone.jpg"
    dangling.symlink_to(tmp_path / "nowhere.jpg")
    cfg = data_cfg("imagefolder", tmp_path / "flat", split="val", batch_size=9, num_workers=1)
    with pytest.raises(DataError, match=f"cannot read {dangling}: No such file"):
        take(cfg, 1)


def test_more_classes_than_the_head(datasets, tmp_path):
    datasets.image_folder(tmp_path / "flat", images=8)
    with pytest.raises(DataError, match=r"has 4 classes but data.num_classes=3"):
        build_batches(data_cfg("imagefolder", tmp_path / "flat", num_classes=3), CPU, torch.contiguous_format, 0)


def test_dct_downscaled_decode_matches_a_full_decode():
    """A crop far larger than the output is decoded at 1/8 scale: same picture, a fraction of the pixels."""
    import io
    import random

    from bench.data.sample_images import synthetic_jpeg

    data = synthetic_jpeg(np.random.default_rng(0), 500, 375)
    crop = decode_crop(data, False, 32, random.Random(0))
    assert max(crop.shape[:2]) < 375 / 7  # decoded at 1/8 scale (375 / 1.14 / 8 = 41 pixels)
    fast = np.empty((32, 32, 3), np.uint8)
    resize_into(fast, crop, flip=False)
    left, top, side, _ = center_crop_box(500, 375)
    full = Image.open(io.BytesIO(data)).convert("RGB")
    reference = np.asarray(full.resize((32, 32), Image.BILINEAR, box=(left, top, left + side, top + side)))
    assert np.abs(fast.astype(np.float32) - reference).mean() < 8.0


def test_default_worker_count_shares_the_cpus_between_local_ranks(monkeypatch):
    from bench.data.loader import resolve_workers

    default, none = compose().data, compose("data.num_workers=0").data
    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: set(range(16)))
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")
    assert resolve_workers(default) == 4
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "1")
    assert resolve_workers(default) == 8
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "32")
    assert resolve_workers(default) == 1
    assert resolve_workers(none) == 0


@pytest.mark.slow  # starts processes inside bench (workers, readers, a fork)
@pytest.mark.parametrize("name", ["imagefolder", "shards"])
def test_two_ranks_with_their_own_seeds_train_on_disjoint_halves(datasets, tmp_path, name):
    """One image per class, so a label names its image: ranks 0 and 1 of 2, given different run
    seeds (as the trainer does), each read one half of the shuffled training set."""
    datasets.image_folder(tmp_path / "flat", images=8, classes=8)
    root = tmp_path / "flat"
    if name == "shards":
        from bench.data.prepare import prepare

        prepare(str(root), str(tmp_path / "shards"), size=48, shard_size=2, workers=1, progress=False)
        root = tmp_path / "shards"
    cfg = data_cfg(name, root, batch_size=4)
    halves = [take(cfg, 1, seed_rank=rank)[0][1].tolist() for rank in (0, 1)]
    assert set(halves[0]).isdisjoint(halves[1]) and set(halves[0]) | set(halves[1]) == set(range(8))


def test_au_and_input_bound_from_the_data_wait(datasets, tmp_path):
    from bench.runtime.reporting import input_pipeline

    assert input_pipeline(0.25) == {"au": 0.75, "input_bound": True}
    assert input_pipeline(0.05) == {"au": 0.95, "input_bound": False}
    assert input_pipeline(0.10000001)["input_bound"] is True  # au just under 0.90
    datasets.image_folder(tmp_path / "flat", images=8)
    take(data_cfg("imagefolder", tmp_path / "flat", batch_size=4), 1)
    facts = dataset_facts()
    assert facts["dataset_size"] == 8 and facts["corrupt_skipped"] == 0


def test_worker_batch_slots_are_reused_only_after_release():
    from bench.data.loader import RING_SLOTS, _SharedBatchRing, release_batch

    ring = _SharedBatchRing((2, 4, 4, 3))
    first, first_release = ring.take()
    second, _ = ring.take()
    assert first.data_ptr() != second.data_ptr() and first.is_shared()
    release_batch(first_release)
    again, _ = ring.take()
    assert again.data_ptr() == first.data_ptr()  # released: reused
    taken = [ring.take() for _ in range(RING_SLOTS)]  # more than the ring holds: fresh, untracked batches
    assert (
        taken[-1][1] is None
        and len({t.data_ptr() for t, _ in taken} | {first.data_ptr(), second.data_ptr()}) == RING_SLOTS + 2
    )


@pytest.mark.slow  # starts processes inside bench (workers, readers, a fork)
def test_worker_slot_reuse_never_changes_a_batch(datasets, tmp_path):
    """A val pass cycled 6 times through 2 workers (slots reused) equals the same pass in-process."""
    datasets.image_folder(tmp_path / "flat", images=16)
    cfg = data_cfg("imagefolder", tmp_path / "flat", split="val", batch_size=4, prefetch_factor=2)
    in_process = take(cfg, 4)
    through_workers = take(dataclasses.replace(cfg, num_workers=2), 24)
    for number, (images, labels) in enumerate(through_workers):
        expected_images, expected_labels = in_process[number % 4]
        assert torch.equal(labels, expected_labels) and torch.equal(images, expected_images), number


class _WritesAFile:
    """A pickle payload: unpickling it calls pathlib.Path.touch on the marker (code, not data)."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        import pathlib

        return pathlib.Path.touch, (pathlib.Path(self.marker),)


def test_a_cifar_file_that_would_run_code_is_refused_and_runs_nothing(tmp_path, datasets):
    import pickle

    from bench.data.cifar100 import load_cifar100
    from bench.errors import DataError

    datasets.cifar100(tmp_path / "cifar")
    assert len(load_cifar100(str(tmp_path / "cifar"), "train")[0]) == 40  # a real one still loads
    marker = tmp_path / "ran"
    payload = pickle.dumps({b"data": _WritesAFile(marker), b"fine_labels": [0]})
    pickle.loads(payload)  # the payload is real: loaded as plain pickle, it writes the file
    assert marker.exists()
    marker.unlink()
    (tmp_path / "cifar" / "train").write_bytes(payload)
    with pytest.raises(DataError, match=r"is refused: it asks for pathlib.*Path.touch"):
        load_cifar100(str(tmp_path / "cifar"), "train")
    assert not marker.exists()


@pytest.fixture
def cifar_archive_server(tmp_path, datasets):
    """CIFAR-100 as torchvision downloads it (cifar-100-python.tar.gz), served on 127.0.0.1 from a
    local copy made by the datasets fixture: the download path runs for real, with no internet."""
    import hashlib
    import http.server
    import tarfile
    import threading

    datasets.cifar100(tmp_path / "src" / "cifar-100-python")
    archive = tmp_path / "served" / "cifar-100-python.tar.gz"
    archive.parent.mkdir()
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(tmp_path / "src" / "cifar-100-python", arcname="cifar-100-python")
    handler = lambda *a, **k: http.server.SimpleHTTPRequestHandler(*a, directory=str(archive.parent), **k)  # noqa: E731
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield (
            f"http://127.0.0.1:{server.server_address[1]}/{archive.name}",
            hashlib.md5(archive.read_bytes()).hexdigest(),
        )
    finally:
        server.shutdown()
        server.server_close()


def test_cifar100_download_fetches_into_data_root_and_refuses_offline_in_one_line(
    tmp_path, monkeypatch, cifar_archive_server, compose
):
    """Issue 21: data=cifar100 data.download=true through torchvision's downloader (its URL pointed at
    a loopback server holding a local copy); unreachable, one line that says what to do."""
    from torchvision.datasets import CIFAR100

    from bench.data.layout import check_cifar100
    from bench.errors import DataError

    url, md5 = cifar_archive_server
    monkeypatch.setattr(CIFAR100, "url", url)
    monkeypatch.setattr(CIFAR100, "tgz_md5", md5)
    root = tmp_path / "cifar"
    config = compose("data=cifar100", f"data.root={root}", "data.download=true", "allow_cpu=true")
    check_cifar100(config.data)
    assert sorted(p.name for p in root.iterdir()) == ["meta", "test", "train"]  # in place, archive gone

    monkeypatch.setattr(CIFAR100, "url", "http://127.0.0.1:9/cifar-100-python.tar.gz")  # nothing listens there
    offline = compose("data=cifar100", f"data.root={tmp_path / 'offline'}", "data.download=true", "allow_cpu=true")
    with pytest.raises(DataError) as info:
        check_cifar100(offline.data)
    line = str(info.value)
    assert line.startswith(f"data.download=true could not fetch CIFAR-100 into {tmp_path / 'offline'} (URLError")
    assert "\n" not in line and "copy cifar-100-python/" in line
    assert list((tmp_path / "offline").iterdir()) == []  # nothing half-fetched left


def val_labels(root: Path, name: str) -> list:
    """The labels of one validation pass over data=<name> at `root`, in its order."""
    from bench.data.registry import build_val_batches

    val = build_val_batches(data_cfg(name, root, batch_size=64), CPU, torch.contiguous_format)
    return [label for _, labels in val.one_pass() for label in labels.tolist()]


def prepare_quietly(src: Path, dst: Path, shard_size: int = 3) -> int:
    from bench.tools.data import main as data_command

    args = ["--size", "40", "--shard-size", str(shard_size), "--workers", "1", "--no-progress"]
    return data_command(["prepare", "--src", str(src), "--dst", str(dst), *args])


@pytest.mark.slow  # starts processes inside bench (workers, readers, a fork)
def test_val_lacking_a_class_keeps_train_labels_in_both_formats(datasets, tmp_path, capsys, caplog):
    """Issue 39.1: val/ without class001 was labelled with its own class list (class002 -> 1, class003 -> 2),
    so a model that fits train/ scored 0.50 on the images it had learnt. val/ now takes train/'s labels, in
    the image folder and in the shards prepare writes from it; shards an earlier prepare labelled with
    val/'s own list are mapped to train/'s when read."""
    import shutil

    datasets.imagenet_layout(tmp_path / "images", train=8, val=8)
    shutil.rmtree(tmp_path / "images" / "val" / "class001")
    assert val_labels(tmp_path / "images", "imagefolder") == [0, 0, 2, 2, 3, 3]

    assert prepare_quietly(tmp_path / "images", tmp_path / "shards") == 0
    said = capsys.readouterr().out
    assert "val: 6 images in 2 shards" in said and "lacking train/'s class(es) class001" in said
    meta = json.loads((tmp_path / "shards" / "val" / "meta.json").read_text())
    assert meta["classes"] == [f"class{n:03d}" for n in range(CLASSES)]
    assert sorted(val_labels(tmp_path / "shards", "shards")) == [0, 0, 2, 2, 3, 3]

    # shards written split by split as prepare did before: val/ labelled 0..2 by its own three classes
    shutil.move(str(tmp_path / "images" / "val"), str(tmp_path / "valonly" / "val"))
    assert prepare_quietly(tmp_path / "valonly", tmp_path / "shards") == 0
    assert json.loads((tmp_path / "shards" / "val" / "meta.json").read_text())["classes"] == [
        "class000",
        "class002",
        "class003",
    ]
    assert sorted(val_labels(tmp_path / "shards", "shards")) == [0, 0, 2, 2, 3, 3]

    # a val/ class train/ lacks has no label: refused, naming it (the image folder's preflight, and prepare)
    (tmp_path / "images" / "val").mkdir()
    shutil.copytree(tmp_path / "valonly" / "val" / "class002", tmp_path / "images" / "val" / "zebra")
    from bench.data.registry import check_location

    with pytest.raises(DataError, match=r"val has 1 class\(es\) that train/ lacks: zebra"):
        check_location(data_cfg("imagefolder", tmp_path / "images"), validation=True)
    assert prepare_quietly(tmp_path / "images", tmp_path / "refused") == 2
    assert "that train/ lacks: zebra" in capsys.readouterr().err
    assert not (tmp_path / "refused" / "train").exists()  # refused before anything was written


def test_a_symlink_loop_is_walked_once_and_said(datasets, tmp_path, caplog):
    """Issue 39.2: `ln -s . class001/sub` made 3 x 12 images into 516 (the walk followed the loop until
    ELOOP). Each real directory is read once, the links left out are named; a second link to a folder
    already read (here: another class's) is not read twice either."""
    from bench.data.layout import scan_image_folder

    datasets.image_folder(tmp_path / "flat", images=36, classes=3)
    os.symlink(".", tmp_path / "flat" / "class001" / "sub")
    os.symlink(tmp_path / "flat" / "class000", tmp_path / "flat" / "class002" / "also0")
    with caplog.at_level("WARNING", logger="bench.data.layout"):
        _, paths, labels = scan_image_folder(str(tmp_path / "flat"))
    assert len(paths) == 36 and labels.count(1) == 12 and labels.count(2) == 12
    (said,) = [r.getMessage() for r in caplog.records if "left out" in r.getMessage()]
    assert said.count(", ") == 1 and str(tmp_path / "flat" / "class001" / "sub") in said and "also0" in said


def test_hidden_files_and_folders_in_class_folders_are_not_images(datasets, tmp_path):
    """Issue 39 probe D5: a folder copied from a Mac holds `._<name>.jpg` (AppleDouble) next to each image:
    dataset_size counted them and every one was skipped as corrupt. Hidden entries are not the dataset's."""
    from bench.data.layout import scan_image_folder

    datasets.image_folder(tmp_path / "flat", images=6, classes=2)
    for image in list((tmp_path / "flat").rglob("*.jpg")):
        (image.parent / f"._{image.name}").write_bytes(b"\0\5\26\7" + bytes(80))
    (tmp_path / "flat" / "class000" / ".thumbs").mkdir()
    (tmp_path / "flat" / "class000" / ".thumbs" / "t.jpg").write_bytes(image.read_bytes())
    _, paths, labels = scan_image_folder(str(tmp_path / "flat"))
    assert len(paths) == 6 and labels.count(0) == 3 and not [p for p in paths if "/." in p]


@pytest.mark.slow  # starts processes inside bench (workers, readers, a fork)
def test_a_shard_that_is_not_the_one_meta_json_lists_is_refused_and_old_meta_still_reads(datasets, tmp_path):
    """Issue 39.3: a shard another prepare wrote over (here: shard 0 of a prepare of 8-image shards over one
    of 4) is refused by name, by local preflight (records and bytes), s3 preflight's listing (bytes) and the
    reader itself (records, bytes); a meta.json written before the writer and bytes fields still reads."""
    from bench.config.storage import StorageLocation
    from bench.data.shardformat import check_s3_shards, check_shard_dataset

    datasets.image_folder(tmp_path / "flat", images=12)
    assert prepare_quietly(tmp_path / "flat", tmp_path / "a", shard_size=4) == 0
    assert prepare_quietly(tmp_path / "flat", tmp_path / "b", shard_size=8) == 0
    shard = tmp_path / "a" / "train" / "shard-00000.bin"
    mine = shard.read_bytes()
    shard.write_bytes((tmp_path / "b" / "train" / "shard-00000.bin").read_bytes())
    cfg = data_cfg("shards", tmp_path / "a", batch_size=12)
    for check in (
        lambda: check_shard_dataset(cfg),
        lambda: check_s3_shards(str(tmp_path / "a"), StorageLocation(), ["train"]),
        lambda: take(cfg, 1),
    ):
        with pytest.raises(
            DataError, match=f"{shard}.* holds .*but its meta.json lists .*written by pid {os.getpid()}"
        ):
            check()

    shard.write_bytes(mine)
    meta_path = tmp_path / "a" / "train" / "meta.json"
    meta = json.loads(meta_path.read_text())
    del meta["writer"]
    meta["shards"] = [{"key": s["key"], "count": s["count"]} for s in meta["shards"]]
    meta_path.write_text(json.dumps(meta))
    check_shard_dataset(cfg)
    ((_, labels),) = take(cfg, 1)
    assert len(labels) == 12 and dataset_facts()["dataset_size"] == 12


# a rank's loader in a process of its own: forkserver as its default start method, as a rank that the
# elastic launcher started from its forkserver has it; one batch read, then it waits to be killed
LOADER_IN_A_RANK = """
import multiprocessing, sys, torch
from torch.utils.data import BatchSampler, SequentialSampler
from bench.config.data import DataConfig
from bench.data.loader import make_loader
multiprocessing.set_start_method("forkserver")
cfg = DataConfig(root=sys.argv[1], num_workers=1, persistent_workers=True, pin_memory=False, prefetch_factor=2)
batches = BatchSampler(SequentialSampler(range(8)), 4, drop_last=False)
reading = iter(make_loader(list(range(8)), cfg, torch.device("cpu"), batches))
next(reading)
print("read", flush=True)
sys.stdin.read()
"""


@pytest.mark.parametrize("root", ["/data/imagenet", "s3://bucket/shards"])
def test_a_killed_ranks_loader_workers_end_with_it_forked_or_from_a_forkserver(root, tmp_path):
    """SIGKILL to a rank (no clean-up of its own): its loader's workers end too, forked (the local
    options) or started from a forkserver (shards on S3); under a forkserver, torch's watchdog watches the
    forkserver, not the rank, and they were left under PID 1 for good, the forkserver with them."""
    import psutil

    rank = subprocess.Popen(
        [sys.executable, "-c", LOADER_IN_A_RANK, root],
        # the killed rank's forkserver leaves its socket's pymp-* folder: in the test's, not in /tmp
        env={**os.environ, "TMPDIR": str(tmp_path)},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    tree = []
    try:
        assert rank.stdout.readline() == "read\n", rank.communicate()[1]  # the event: a batch came from a worker
        tree = psutil.Process(rank.pid).children(recursive=True)
        assert any(p.name() == "pt_data_worker" for p in tree), tree
        rank.kill()
        rank.wait()
        left = left_alive(tree)
        assert left == [], [p.cmdline() for p in left]
    finally:
        rank.kill()
        for process in tree:
            with contextlib.suppress(psutil.Error):
                process.kill()
        rank.communicate()


def test_a_worker_on_a_kernel_without_pidfd_keeps_running_mocked(monkeypatch):
    """Linux before 5.3 has no pidfd_open (ENOSYS; mocked: this kernel has it): the watch gives up and
    returns, leaving the worker to torch's own watchdog, instead of ending a worker that is needed."""
    import errno

    from bench.data.loader import _exit_with

    def no_pidfd(pid):
        raise OSError(errno.ENOSYS, "Function not implemented")

    monkeypatch.setattr(os, "pidfd_open", no_pidfd)
    assert _exit_with(os.getpid()) is None  # returned: this process goes on


A_FETCH_BROKEN_MID_HANDSHAKE = """
import functools, os, socket, sys
from multiprocessing import resource_sharer
if sys.argv[1] == "worker":
    from bench.data import loader
    sys.excepthook = functools.partial(loader._quiet_when_the_fetch_broke, sys.excepthook)  # as _start_worker does
resource_sharer.DupFd(os.open(os.devnull, os.O_RDONLY))  # a batch's descriptor offered: the sharer thread listens
peer = socket.socket(socket.AF_UNIX)
peer.connect(resource_sharer._resource_sharer._address)
peer.close()  # the loader's process stopped mid-handshake
resource_sharer.stop()  # a whole fetch after it: the thread has handled the broken one
print("handled", flush=True)
"""


@pytest.mark.parametrize("process", ["worker", "not a loader worker"])
def test_a_fetch_broken_by_a_stopped_rank_is_quiet_in_a_loader_worker(process):
    """A SIGTERM'd DDP job printed `[rank1]: Traceback ... resource_sharer.py ... accept` now and then:
    the rank was stopped while fetching a batch's descriptors from its worker's resource-sharer thread,
    which printed the broken handshake. A loader worker's hook keeps that quiet; elsewhere Python's
    own behaviour stands (the traceback: what the hook is needed for)."""
    done = subprocess.run(
        [sys.executable, "-c", A_FETCH_BROKEN_MID_HANDSHAKE, process], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0 and done.stdout == "handled\n", done.stderr
    if process == "worker":
        assert done.stderr == ""
    else:
        assert "Traceback" in done.stderr and "resource_sharer.py" in done.stderr, done.stderr


def test_the_worker_hook_passes_every_other_exception_on():
    from bench.data.loader import _quiet_when_the_fetch_broke

    seen = []
    for error in (EOFError("not the sharer's"), ValueError("a worker's own")):
        try:
            raise error
        except Exception as exc:
            _quiet_when_the_fetch_broke(lambda *args: seen.append(args[1]), type(exc), exc, exc.__traceback__)
    assert [str(exc) for exc in seen] == ["not the sharer's", "a worker's own"]
