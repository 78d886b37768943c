"""Record checking and what it costs: storage.workload.verify_records (on by default: a damaged
record is an error; off: the lengths only, a read ceiling that says it is not an MLPerf result),
TFRecord's streamed checks wherever a piece's edge falls, and the read ceiling command's
unchecked reader, CPU seconds per GB and fio timed by the span of its I/O."""

from __future__ import annotations

import os
import shutil

import pytest

from bench.config import compose
from bench.errors import ConfigError
from bench.iobench.figures import qualification, read_figures
from bench.iobench.formats.base import CorruptFile, FileSpec, Unchecked, format_for
from bench.iobench.formats.tfrecord import FrameStream, frame
from bench.iobench.pipeline import Fetcher
from bench.iobench.prepare import prepare_dataset
from bench.iobench.reader import run_reader
from bench.registries import FORMATS
from bench.storage.local import LocalStore


def storage(*overrides: str):
    return compose(
        "mode=storage",
        "storage.workload.num_files=4",
        "storage.workload.samples_per_file=4",
        "storage.workload.record_size=3000",
        "storage.workload.batch_size=4",
        "storage.workload.read_threads=2",
        "storage.workload.checkpoint_size_mb=0",
        "storage.workload.format=tfrecord",
        *overrides,
    ).storage


def flip(path, where: int) -> None:
    data = bytearray(path.read_bytes())
    data[where] ^= 0x01
    path.write_bytes(bytes(data))


@pytest.mark.slow  # starts processes inside bench (workers, readers, a fork)
@pytest.mark.parametrize("read_mode", ["whole_file", "sample"])
def test_a_flipped_byte_fails_the_read_with_checks_on_and_is_read_and_counted_with_them_off(tmp_path, read_mode):
    checked = storage(f"storage.workload.read_mode={read_mode}")
    assert checked.workload.verify_records  # the default: every record checked
    store = LocalStore(tmp_path)
    files = prepare_dataset(store, checked.workload, "auto", workers=1).files
    flip(tmp_path / files[0].key, 100)  # a data byte of the first record
    with pytest.raises(CorruptFile, match="bad data checksum"):
        run_reader(store, files, checked.workload)

    unchecked = storage(f"storage.workload.read_mode={read_mode}", "storage.workload.verify_records=false")
    result = run_reader(store, files, unchecked.workload)
    samples = unchecked.workload.num_files * unchecked.workload.samples_per_file
    assert result.total("all_samples") == samples
    assert result.total("all_bytes") == pytest.approx(sum(f.size for f in files))  # every byte read is counted
    figures = read_figures([result], unchecked)
    assert figures.read_samples == samples - unchecked.workload.batch_size and figures.read_bytes > 0


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_unchecked_reads_still_catch_a_short_file_in_every_format(tmp_path, fmt):
    per_file = ["storage.workload.samples_per_file=1", "storage.workload.batch_size=1"] if fmt == "jpeg" else []
    workload = storage(f"storage.workload.format={fmt}", *per_file).workload
    store = LocalStore(tmp_path)
    spec = prepare_dataset(store, workload, "auto", workers=1).files[0]
    fetcher = Fetcher(store, Unchecked(format_for(fmt)))
    path = tmp_path / spec.key
    whole = path.read_bytes()
    assert fetcher.whole_file(spec) == (spec.samples, len(whole))
    assert fetcher.sample(spec, spec.samples - 1) == format_for(fmt).sample_span(spec, 0)[1]
    path.write_bytes(whole[:-10])
    with pytest.raises(CorruptFile, match="expected"):
        fetcher.whole_file(spec)
    fetcher.close()


def test_verify_records_false_is_a_ceiling_not_an_mlperf_result_and_jpeg_decoding_needs_it():
    from bench.iobench.result import RunFigures

    config = storage("storage.workload.verify_records=false", "storage.workload.computation_time=0.1")
    qualifies, _, why = qualification(RunFigures(mlperf_au_pass=True), config, 1, 1)
    assert not qualifies and "verify_records=false" in why
    _, _, why = qualification(RunFigures(mlperf_au_pass=True), storage("storage.workload.computation_time=0.1"), 1, 1)
    assert "verify_records" not in why
    with pytest.raises(ConfigError) as info:
        storage(
            "storage.workload.format=jpeg",
            "storage.workload.samples_per_file=1",
            "storage.workload.batch_size=1",
            "storage.workload.jpeg_decode=true",
            "storage.workload.verify_records=false",
        )
    assert info.value.key == "storage.workload.jpeg_decode"


@pytest.mark.parametrize("piece", [1, 5, 12, 13, 3000, 3016, 7777])
@pytest.mark.parametrize(
    "where,words",
    [
        (3016 + 2, "bad length checksum of the record at byte 3016"),  # record 1's length field
        (3016 + 9, "bad length checksum of the record at byte 3016"),  # its length's checksum
        (2 * 3016 - 2, "bad data checksum of the record at byte 3016"),  # its data's checksum
    ],
)
def test_tfrecord_framing_is_checked_wherever_a_piece_edge_falls(piece, where, words):
    spec = FileSpec("k", 0, 3, 3000)
    data = bytearray(b"".join(frame(os.urandom(3000)) for _ in range(3)))
    data[where] ^= 0x10

    stream = FrameStream(spec)
    with pytest.raises(CorruptFile, match=words):
        for at in range(0, len(data), piece):
            stream.feed(memoryview(data)[at : at + piece])
        stream.finish()


CEILING = ["--files", "4", "--samples-per-file", "4", "--record-size", "65536", "--threads", "2", "--rounds", "1"]


@pytest.mark.slow  # starts processes inside bench (workers, readers, a fork)
@pytest.mark.skipif(shutil.which("fio") is None, reason="needs fio (Debian: apt-get install fio)")
def test_the_ceiling_reports_what_checking_costs_warm_and_cold_by_default(tmp_path, capsys):
    """--format tfrecord adds the unchecked reader; the default --modes both runs warm, then cold;
    every mode prints every reader's CPU seconds per GB and the cost of checking."""
    from bench.tools import storage_ceiling

    assert storage_ceiling.main([*CEILING, "--format", "tfrecord", "--root", str(tmp_path / "data")]) == 0
    out = capsys.readouterr().out
    for mode in ("warm", "cold"):
        assert f"{mode} round 1: bench" in out and f"{mode} bench/unchecked" in out
        assert f"{mode} unchecked/fio" in out and f"{mode} unchecked/plain" in out
        cpu = next(line for line in out.splitlines() if line.startswith(f"{mode} CPU-s/GB: "))
        assert all(f"{name} " in cpu for name in ("bench", "unchecked", "fio", "plain"))
        assert f"{mode} checking costs " in out and f"{mode} fio's own figure" in out
    assert out.index("warm round 1") < out.index("cold round 1")
    assert "leaves the last 64 bytes of each" in out  # TFRecord's framing: fio skips a short tail


def test_fio_is_timed_from_its_first_io_to_its_last(tmp_path):
    from bench.tools.iobench_compare import fio_figures, fio_job, io_span_ms

    job = fio_job(["a", "b", "c"], 2, 4096, str(tmp_path / "pass"))
    assert "write_iops_log=" in job and "log_unix_epoch=1" in job and "filename=a:c" in job
    (tmp_path / "pass_iops.1.log").write_text("1000, 1, 0, 4096, 0\n1003, 1, 0, 4096, 0\n")
    (tmp_path / "pass_iops.2.log").write_text("1010, 1, 0, 4096, 0\n1040, 1, 0, 4096, 0\n")
    assert io_span_ms(tmp_path) == 40  # the jobs ran staggered: the longest ran 30 ms, the pass 40
    nbytes, own = fio_figures({"jobs": [{"read": {"io_bytes": 4_000_000, "runtime": 2}}]})
    assert nbytes == 4_000_000 and own == pytest.approx(2000.0)  # fio's own figure: its longest job
