"""The doctor's storage rung reads the user's files with the storage benchmark's reader
(bench.iobench.reader.run_reader), in the loader's pattern, within its window; and that reader's
deadline ends a read early. Real files, real reads."""

from __future__ import annotations

import os
import time

import pytest

import bench.doctor.storage_read as storage_read
from bench.doctor.cli import _details
from bench.doctor.figures import StorageFigures
from bench.doctor.storage_read import read_workload, storage_rung
from bench.iobench.formats.base import FileSpec
from bench.iobench.reader import run_reader
from bench.storage.local import LocalStore


def _files(root, count: int, size: int) -> list:
    root.mkdir(parents=True, exist_ok=True)
    specs = []
    for index in range(count):
        (root / f"f{index:03d}.bin").write_bytes(os.urandom(size))
        specs.append(FileSpec(f"f{index:03d}.bin", index, 1, size, size))
    return specs


@pytest.mark.slow  # starts processes inside bench (workers, readers, a fork)
def test_the_rung_reads_a_jpeg_folder_whole_through_the_storage_benchmarks_reader(
    tmp_path, datasets, compose, monkeypatch
):
    paths = datasets.image_folder(tmp_path / "jpegs", images=24, classes=3)
    calls = []

    def spy(store, files, workload, **options):  # the real reader, its arguments noted
        calls.append((store, list(files), workload, options))
        return run_reader(store, files, workload, **options)

    monkeypatch.setattr(storage_read, "run_reader", spy)
    config = compose(
        "+experiment=cpu_smoke",
        "model=small_cnn",
        "data=imagefolder",
        f"data.root={tmp_path / 'jpegs'}",
        "data.num_classes=3",
        "data.num_workers=2",
        "data.batch_size=8",
    )
    # the window is wall time, start-ups included: 2 s a pass (cold, warm) holds a whole pass of 24 files on a
    # loaded machine under coverage too (0.4 s held 4 files there)
    rung = storage_rung(config, window_s=4.0, images_in_dataset=24)
    figures = rung.figures
    assert isinstance(figures, StorageFigures)
    total = sum(os.path.getsize(p) for p in paths)
    assert figures.dataset_files == 24 and figures.threads == 2
    assert figures.readers == "processes"  # local files: forked readers, as the loader's workers
    assert figures.dataset_megabytes == total / 1e6
    assert figures.files_read >= 24  # whole passes: a small folder is read again and again in the window
    assert figures.warm_megabytes_per_second > 0 and figures.cold_megabytes_per_second > 0
    assert rung.images_per_second > 0 and figures.cache == "warm"  # 24 small files fit in memory
    store, files, workload, options = calls[0]
    assert isinstance(store, LocalStore) and store.root == tmp_path / "jpegs"
    assert sorted(f.key for f in files) == sorted(os.path.relpath(p, tmp_path / "jpegs") for p in paths)
    assert all(f.size == os.path.getsize(tmp_path / "jpegs" / f.key) for f in files)
    # the loader's pattern: its workers as readers, its batch, a shuffled pass, lengths checked only
    assert (workload.read_threads, workload.batch_size, workload.shuffle) == (2, 8, "file")
    assert workload.verify_records is False and workload.computation_time == 0
    assert "window_s" in options  # a duration from the readers' start, not a deadline set before their fork


@pytest.mark.slow  # starts processes inside bench (workers, readers, a fork)
def test_a_deadline_ends_the_readers_epoch_early(tmp_path):
    specs = _files(tmp_path / "data", 12, 4096)
    store = LocalStore(tmp_path / "data")
    workload = read_workload(specs, threads=2, batch=2, seed=0)
    whole = run_reader(store, specs, workload).epochs[0]
    assert (whole.all_samples, whole.all_bytes) == (12, 12 * 4096)
    passed = run_reader(store, specs, workload, deadline=time.perf_counter() - 1).epochs[0]
    assert passed.all_samples == 0 and passed.all_bytes == 0  # already past: not one step


def test_the_rung_reads_shards_on_s3_through_the_storage_groups_settings(s3_server, aws_env, compose):
    """data=shards on s3:// (a loopback S3 server): the shards that train/meta.json lists, read by
    the storage benchmark's reader through storage=s3's endpoint, one figure (no page cache)."""
    from bench.data.shardformat import encode_shard, make_meta, shard_key
    from bench.storage.base import open_store

    bucket = s3_server.new_bucket()
    config = compose(
        "+experiment=cpu_smoke",
        "model=small_cnn",
        "data=shards",
        f"data.root=s3://{bucket}/shards",
        "data.num_classes=2",
        "data.num_workers=2",
        *s3_server.overrides(bucket),
    )
    store = open_store(f"s3://{bucket}/shards", config.storage)
    shards = []
    for number in range(3):
        blob = encode_shard([(os.urandom(3000), index % 2) for index in range(4)])
        store.put(shard_key("train", number), blob)
        shards.append({"key": shard_key("train", number), "count": 4, "bytes": len(blob)})
    store.put("train/meta.json", make_meta("train", ["a", "b"], shards, 32, 90, []))
    store.put("val/ignored.bin", b"x" * 5000)  # not the split's: never read
    rung = storage_rung(config, window_s=0.5, images_in_dataset=12)
    figures = rung.figures
    assert isinstance(figures, StorageFigures)
    assert figures.cache == "remote" and figures.store.endswith(f"{bucket}/shards")
    assert figures.dataset_files == 3 and figures.dataset_megabytes == sum(s["bytes"] for s in shards) / 1e6
    assert figures.files_read >= 3 and figures.megabytes_per_second > 0 and rung.images_per_second > 0
    assert figures.cold_megabytes_per_second is None and figures.warm_megabytes_per_second is None
    assert _details(rung).startswith(f"{figures.megabytes_per_second:,.0f} MB/s from ")  # the page's row


@pytest.mark.slow  # starts processes inside bench (workers, readers, a fork)
def test_the_rungs_window_starts_once_its_readers_run_however_slow_their_fork(tmp_path, monkeypatch):
    """Issue 29: the rung's deadline was set before run_reader forked the readers; a fork slower
    than the window (a loaded machine) left no time, and the rung read 0 files. Here the readers'
    start takes longer than the whole window, for real (a sleep in it)."""
    import bench.iobench.reader as reader

    specs = _files(tmp_path / "data", 8, 4096)
    store = LocalStore(tmp_path / "data")
    real_open = reader.open_readers

    def slow_open(*args, **kwargs):
        opened = real_open(*args, **kwargs)
        time.sleep(0.3)  # a fork that took longer than the window
        return opened

    monkeypatch.setattr(reader, "open_readers", slow_open)
    read, size, _seconds = storage_read.read_pass(
        store, specs, read_workload(specs, threads=2, batch=2, seed=0), window_s=0.2, cold=False
    )
    assert read > 0 and size > 0


def test_a_small_folders_passes_keep_to_the_window_in_wall_time_start_ups_included(monkeypatch):
    """A pass over a small folder reads in 1 ms but starts in 100 ms (its readers forked, the cache
    dropped): the 0.4 s window holds 4 passes, not the 400 that counting the reading alone made (a folder
    of 24 small JPEGs took 202 passes and 16x its window). The first pass has the whole window."""
    specs = [FileSpec(f"f{index:03d}.jpg", index, 1, 1000, 1000) for index in range(24)]
    clock, windows = [0.0], []

    def a_pass(store, files, workload, window_s, cold):
        windows.append(window_s)
        clock[0] += 0.101
        return len(files), 1000 * len(files), 0.001

    monkeypatch.setattr(storage_read, "read_pass", a_pass)
    monkeypatch.setattr(storage_read, "time", type("Clock", (), {"perf_counter": staticmethod(lambda: clock[0])}))
    read, size, seconds = storage_read.passes(None, specs, read_workload(specs, 2, 8, 0), 0.4, cold=True)
    assert (read, size, len(windows)) == (4 * 24, 4 * 24_000, 4)
    assert seconds == pytest.approx(0.004)  # the figure is the reading's own time
    assert windows[0] == 0.4 and windows[1:] == pytest.approx([0.299, 0.198, 0.097])
