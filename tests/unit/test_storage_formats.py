"""The storage benchmark's access patterns in-process: every record format written and read back
(whole files and single samples, on local files and on S3), TFRecord framing and its CRC-32C,
the shuffle buffer, request counting across the warm-up step, the new keys' checks, and the read
ceiling command against fio and plain Python."""

from __future__ import annotations

import io
import os
import shutil

import pytest

from bench.config import compose
from bench.errors import ConfigError
from bench.iobench.figures import read_figures
from bench.iobench.formats.base import CorruptFile, FileSpec, format_for
from bench.iobench.formats.tfrecord import crc32c, frame, masked_crc
from bench.iobench.pipeline import Fetcher
from bench.iobench.prepare import prepare_dataset
from bench.iobench.reader import buffered_shuffle, file_order, run_reader, sample_order
from bench.registries import FORMATS
from bench.storage.base import open_store
from bench.storage.local import LocalStore

FORMAT_NAMES = list(FORMATS)


def storage(*overrides: str):
    return compose(
        "mode=storage",
        "storage.workload.num_files=6",
        "storage.workload.samples_per_file=4",
        "storage.workload.record_size=3000",
        "storage.workload.batch_size=4",
        "storage.workload.read_threads=2",
        "storage.workload.checkpoint_size_mb=0",
        *overrides,
    ).storage


def config(*overrides: str):
    """The whole config (the storage preflight reads the distributed group too)."""
    return compose(
        "mode=storage",
        "storage.workload.num_files=6",
        "storage.workload.samples_per_file=4",
        "storage.workload.record_size=3000",
        "storage.workload.batch_size=4",
        *overrides,
    )


def for_format(fmt: str, *overrides: str):
    per_file = ["storage.workload.samples_per_file=1", "storage.workload.batch_size=1"] if fmt == "jpeg" else []
    return storage(f"storage.workload.format={fmt}", *per_file, *overrides)


def test_crc32c_is_castagnoli_and_the_mask_is_tensorflows():
    assert crc32c(b"123456789") == 0xE3069283  # the standard check value
    crc = crc32c(b"abc")
    assert masked_crc(b"abc") == ((((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF)
    assert crc32c(memoryview(bytearray(b"123456789"))) == 0xE3069283  # reads a reused buffer in place


def test_tfrecord_frames_round_trip_and_every_flipped_byte_is_caught():
    record = os.urandom(100)
    data = bytearray(frame(record))
    assert len(data) == 8 + 4 + 100 + 4 and int.from_bytes(data[:8], "little") == 100 and data[12:112] == record
    spec, check = FileSpec("k", 0, 1, 100), format_for("tfrecord").check_sample
    check(memoryview(data), spec)
    for where, words in ((3, "bad length checksum"), (50, "bad data checksum"), (len(data) - 1, "bad data checksum")):
        broken = bytearray(data)
        broken[where] ^= 0xFF
        with pytest.raises(CorruptFile, match=words):
            check(memoryview(broken), spec)
    with pytest.raises(CorruptFile, match="cut short"):
        check(memoryview(data)[:-3], spec)


@pytest.mark.parametrize("piece", [1, 7, 16, 3016, 5000, 100000])
def test_tfrecord_checked_as_it_streams_by_whatever_the_piece_size(piece):
    """A whole-file read feeds the checker pieces cut anywhere (transfer_size): inside a header,
    a record or a checksum; the same frames and the same errors as a whole file."""
    from bench.iobench.formats.base import FileSpec
    from bench.iobench.formats.tfrecord import FrameStream

    spec = FileSpec("k", 0, 4, 3000)
    data = memoryview(b"".join(frame(os.urandom(3000)) for _ in range(4)))

    def streamed(view):
        stream = FrameStream(spec)
        for at in range(0, len(view), piece):
            stream.feed(view[at : at + piece])
        return stream.finish()

    assert streamed(data) == 4
    flipped = bytearray(data)
    flipped[3016 + 12 + 2999] ^= 0x80  # the last data byte of record 2
    with pytest.raises(CorruptFile, match="bad data checksum of the record at byte 3016"):
        streamed(memoryview(flipped))
    with pytest.raises(CorruptFile, match="cut short"):
        streamed(data[:-1])


@pytest.mark.slow  # starts processes inside bench (workers, readers, a fork)
@pytest.mark.parametrize("fmt", FORMAT_NAMES)
@pytest.mark.parametrize("mode", ["whole_file", "sample"])
def test_every_format_is_written_and_read_back_whole_or_by_sample(tmp_path, fmt, mode):
    config = for_format(fmt, f"storage.workload.read_mode={mode}", "storage.workload.jpeg_decode=true")
    workload = config.workload
    store = LocalStore(tmp_path)
    files = prepare_dataset(store, workload, "auto", workers=2).files
    assert all(
        f.key.endswith("." + format_for(fmt).extension) and f.size == (tmp_path / f.key).stat().st_size for f in files
    )
    result = run_reader(store, files, workload)
    samples = workload.num_files * workload.samples_per_file
    assert result.total("all_samples") == samples
    measured = read_figures([result], config)
    assert measured.read_samples == samples - workload.batch_size
    per_request = 1 if mode == "sample" else workload.samples_per_file
    assert measured.read_requests == measured.read_samples // per_request  # every request once


@pytest.mark.parametrize("fmt", FORMAT_NAMES)
def test_a_sample_read_alone_is_that_sample(tmp_path, fmt):
    """Sample i's span holds the bytes the format's own reader gives for sample i."""
    workload = for_format(fmt).workload
    store = LocalStore(tmp_path)
    spec = prepare_dataset(store, workload, "auto", workers=1).files[0]
    data = (tmp_path / spec.key).read_bytes()
    last = spec.samples - 1
    offset, length = format_for(fmt).sample_span(spec, last)
    if fmt == "npz":
        import numpy as np

        assert data[offset : offset + length] == np.load(io.BytesIO(data))["x"][last].tobytes()
    elif fmt == "hdf5":
        import h5py

        with h5py.File(io.BytesIO(data), "r") as h5:
            assert data[offset : offset + length] == h5["x"][last].tobytes()
    elif fmt == "tfrecord":  # one whole frame: its header, the record, the record's checksum
        format_for(fmt).check_sample(memoryview(data[offset : offset + length]), spec)
    fetcher = Fetcher(store, format_for(fmt), decode=True)
    assert fetcher.sample(spec, last) == length
    fetcher.close()


@pytest.mark.slow  # in-process, but composes and writes a dataset in every format: ~2.4 CPU-s
@pytest.mark.parametrize("fmt", FORMAT_NAMES)
def test_a_damaged_file_is_an_error_not_a_fast_read(tmp_path, fmt):
    """A file cut short, in every format; a flipped byte inside a record, where the format has a
    checksum (TFRecord)."""
    workload = for_format(fmt, "storage.workload.jpeg_decode=true").workload
    store = LocalStore(tmp_path)
    spec = prepare_dataset(store, workload, "auto", workers=1).files[0]
    path = tmp_path / spec.key
    whole = path.read_bytes()
    fetcher = Fetcher(store, format_for(fmt), decode=True)
    assert fetcher.whole_file(spec) == (spec.samples, len(whole))
    path.write_bytes(whole[:-10])
    with pytest.raises(CorruptFile):
        fetcher.whole_file(spec)
    if fmt == "tfrecord":
        flipped = bytearray(whole)
        flipped[100] ^= 0x01
        path.write_bytes(bytes(flipped))
        with pytest.raises(CorruptFile, match="bad data checksum"):
            fetcher.whole_file(spec)
        with pytest.raises(CorruptFile, match="bad data checksum"):
            fetcher.sample(spec, 0)


def test_the_shuffle_buffer_emits_everything_once_and_never_too_early():
    import random

    items = list(range(200))
    for size in (1, 5, 50):
        out = list(buffered_shuffle(items, size, random.Random(3)))
        assert sorted(out) == items
        assert all(position >= item - (size - 1) for position, item in enumerate(out))  # at most size-1 early
        assert out == list(buffered_shuffle(items, size, random.Random(3)))  # seeded
    assert list(buffered_shuffle(items, 1, random.Random(3))) == items  # a buffer of one shuffles nothing
    full = list(buffered_shuffle(items, None, random.Random(3)))
    assert sorted(full) == items and full != items


@pytest.mark.slow  # in-process, but composes six storage configs and writes a dataset: ~2 CPU-s
def test_sample_and_file_orders_follow_shuffle_and_seed_change_epoch(tmp_path):
    files = prepare_dataset(LocalStore(tmp_path), storage().workload, "auto", workers=1).files
    none = storage("storage.workload.shuffle=none").workload
    assert sample_order(files, none, 0, 1) == [(f, i) for f in files for i in range(4)]
    legacy = storage("storage.workload.shuffle=false").workload  # the old spelling
    assert legacy.shuffle == "none" and file_order(files, legacy, 0, 2) == files
    by_file = storage("storage.workload.shuffle=true").workload
    assert by_file.shuffle == "file" and file_order(files, by_file, 0, 1) != file_order(files, by_file, 0, 2)
    order = sample_order(files, by_file, 0, 1)
    assert [i for _, i in order[:4]] == [0, 1, 2, 3]  # whole files, samples in order
    by_sample = storage("storage.workload.shuffle=sample", "storage.workload.shuffle_buffer=8").workload
    mixed = sample_order(files, by_sample, 0, 1)
    assert sorted((f.key, i) for f, i in mixed) == sorted((f.key, i) for f in files for i in range(4))
    assert [i for _, i in mixed[:4]] != [0, 1, 2, 3] or mixed[0][0] != mixed[3][0]
    fixed = storage("storage.workload.shuffle=sample", "storage.workload.seed_change_epoch=false").workload
    assert sample_order(files, fixed, 0, 1) == sample_order(files, fixed, 0, 2)  # the same order every epoch
    assert sample_order(files, fixed, 0, 1, run=1) != sample_order(files, fixed, 0, 1)  # a new seed every run


@pytest.mark.slow  # starts processes inside bench (workers, readers, a fork)
def test_files_read_ahead_in_the_warm_up_step_are_measured_requests(tmp_path):
    """One sample per file and deep read-ahead: many files finish during the (slow) warm-up step.
    Each is consumed by a later, measured step, so each is one measured request."""
    config = storage(
        "storage.workload.num_files=24",
        "storage.workload.samples_per_file=1",
        "storage.workload.batch_size=1",
        "storage.workload.prefetch=16",
        "storage.workload.computation_time=0.02",
    )
    store = LocalStore(tmp_path)
    files = prepare_dataset(store, config.workload, "auto", workers=2).files
    result = run_reader(store, files, config.workload)
    early = [r for r in result.requests if r.finished < result.window_start]
    assert early  # read ahead while the warm-up step computed, consumed after it
    measured = read_figures([result], config)
    assert measured.read_requests == measured.read_steps == measured.read_samples == 23
    assert sorted(r.step for r in result.requests) == list(range(2, 25))  # each step's request, once


def test_sample_reads_through_s3_are_ranged_gets(s3_server, aws_env):
    bucket = s3_server.new_bucket()
    config = storage(
        "storage=s3",
        f"storage.endpoint={s3_server.endpoint}",
        f"storage.bucket={bucket}",
        "storage.workload.format=tfrecord",
        "storage.workload.read_mode=sample",
        "storage.workload.shuffle=sample",
    )
    store = open_store(f"s3://{bucket}/data", config)
    files = prepare_dataset(store, config.workload, "auto", workers=2).files
    result = run_reader(store, files, config.workload)
    assert result.total("all_samples") == 24 and {r.bytes for r in result.requests} == {3000 + 16}


@pytest.mark.parametrize(
    "overrides,key",
    [
        (["storage.workload.shuffle=random"], "storage.workload.shuffle"),
        (["storage.workload.format=jpeg"], "storage.workload.samples_per_file"),
        (
            ["storage.workload.checkpoint_only=true", "storage.workload.checkpoint_size_mb=0"],
            "storage.workload.checkpoint_size_mb",
        ),
        (["storage.workload.transfer_size=0"], "storage.workload.transfer_size"),
        (["storage.runs=0"], "storage.runs"),
        (["storage.workload.checkpoint_count=0"], "storage.workload.checkpoint_count"),
    ],
)
def test_new_keys_refuse_what_cannot_work(overrides, key):
    with pytest.raises(ConfigError) as info:
        storage(*overrides)
    assert info.value.key == key


@pytest.mark.parametrize(
    "overrides,key",
    [
        (["distributed=ddp", "distributed.nproc_per_node=2", "storage.accelerators=2"], "storage.accelerators"),
        (["distributed=ddp", "distributed.nnodes=2", "distributed.rdzv_endpoint=h:1"], "storage.root"),
        (["distributed=ddp", "distributed.nproc_per_node=8"], "distributed.nproc_per_node"),
        (["storage.workload.checkpoint_size_mb=100000000"], "storage.workload.checkpoint_size_mb"),
    ],
)
def test_storage_preflight_checks_what_the_launcher_and_the_machine_bring(overrides, key):
    from bench.iobench.scenario import StorageScenario

    with pytest.raises(ConfigError) as info:
        StorageScenario().preflight(config(*overrides))
    assert info.value.key == key and "\n" not in str(info.value)


CEILING_ARGS = ["--files", "8", "--samples-per-file", "4", "--record-size", "65536", "--threads", "2", "--rounds", "1"]


@pytest.mark.slow  # starts processes inside bench (workers, readers, a fork)
@pytest.mark.skipif(shutil.which("fio") is None, reason="needs fio (Debian: apt-get install fio)")
def test_ceiling_command_runs_bench_fio_and_plain_python_warm_and_cold(tmp_path, capsys):
    from bench.tools import storage_ceiling

    args = [*CEILING_ARGS, "--root", str(tmp_path / "data")]
    assert storage_ceiling.main([*args, "--min-plain", "1000"]) == 1  # nothing is 1000x: the gate works
    out = capsys.readouterr().out
    assert "warm ratios: bench/fio" in out and "cold ratios: bench/fio" in out and "bench/plain" in out
    assert "posix_fadvise(DONTNEED)" in out
    # local files: bench reads with processes, and the same read phase from threads runs beside it
    assert "bench/threads" in out and "bench: starting and ending its readers took" in out


@pytest.mark.slow  # starts processes inside bench (workers, readers, a fork)
def test_ceiling_command_without_fio_compares_bench_with_plain_python(tmp_path, capsys, monkeypatch):
    from bench.tools import storage_ceiling

    monkeypatch.setattr(storage_ceiling.shutil, "which", lambda name: None)  # a machine without fio
    assert storage_ceiling.main([*CEILING_ARGS, "--root", str(tmp_path / "data"), "--modes", "warm"]) == 0
    out = capsys.readouterr().out
    assert "fio: not installed" in out and "bench/fio" not in out and "warm ratios: bench/plain" in out


def test_each_format_declares_what_it_adds_on_disk_in_its_own_class():
    """issue 29: the free-space check's per-format overhead was a table in diskplan.py (a fourth place
    to edit for a new format, with a silent default for a name it lacked): each Format declares it."""
    from bench.iobench.preflight import file_bytes

    for name in FORMATS:
        layout = type(format_for(name))
        assert {"overhead_per_file", "overhead_per_sample"} <= set(vars(layout)), layout
    assert file_bytes(10, 1000, "tfrecord") >= 10 * (1000 + 16)
    with pytest.raises(ValueError):
        file_bytes(10, 1000, "parquet")  # an unknown format is an error, not a guess
