"""The storage benchmark's phases in-process: prepare reuse rules, the emulated training loop's
accounting (steps, warm-up, AU under slow storage) and how clients are merged."""

from __future__ import annotations

import os
import time

import pytest

from bench.config import compose
from bench.config.storage import StorageConfig
from bench.iobench.figures import read_figures
from bench.iobench.formats.base import CorruptFile, format_for
from bench.iobench.prepare import DatasetMissing, encode_file, plan_files, prepare_dataset, prepare_figures
from bench.iobench.reader import run_reader
from bench.iobench.result import EpochStats, ReaderResult, Request
from bench.storage.local import LocalStore

SMALL = {
    "name": "t",
    "num_files": 6,
    "samples_per_file": 4,
    "record_size": 1000,
    "batch_size": 4,
    "read_threads": 2,
    "prefetch": 1,
    "checkpoint_size_mb": 0,
}


def storage(**changes) -> StorageConfig:
    """The storage group of `mode=storage storage.workload.<key>=<value> ...`: a small workload."""
    values = {**SMALL, **changes}
    return compose(
        "mode=storage", *[f"storage.workload.{k}={'null' if v is None else v}" for k, v in values.items()]
    ).storage


def workload(**changes):
    return storage(**changes).workload


WORKLOAD = workload()


class SlowStore(LocalStore):
    """Every read takes at least `delay` seconds: storage that cannot keep up."""

    def __init__(self, root, delay):
        super().__init__(root)
        self.delay = delay

    def get(self, key):
        time.sleep(self.delay)
        return super().get(key)


def test_prepare_auto_reuses_then_rewrites_what_changed(tmp_path):
    store = LocalStore(tmp_path)
    first = prepare_dataset(store, WORKLOAD, "auto", workers=2)
    assert not first.skipped and sum(f.size for f in first.files) == 6 * 4 * 1000
    summary = prepare_figures(first)
    assert (
        len(first.put_latencies_ms) == 6
        and 0 < summary.prepare_put_latency_ms_p50 <= summary.prepare_put_latency_ms_p99
    )
    assert prepare_dataset(store, WORKLOAD, "auto", workers=2).skipped
    assert prepare_dataset(store, WORKLOAD, "never", workers=2).skipped

    (tmp_path / first.files[2].key).write_bytes(b"short")  # a damaged file is noticed
    redo = prepare_dataset(store, WORKLOAD, "auto", workers=2)
    assert not redo.skipped and "file_00002.bin" in redo.reason
    assert (tmp_path / first.files[2].key).stat().st_size == 4000

    bigger = workload(record_size=2000)  # another workload: not the same dataset
    with pytest.raises(DatasetMissing, match=r"storage.prepare=never but the dataset at .* was made for"):
        prepare_dataset(store, bigger, "never", workers=2)
    assert not prepare_dataset(store, bigger, "auto", workers=2).skipped
    assert not prepare_dataset(store, bigger, "always", workers=2).skipped


def test_prepare_never_on_an_empty_store(tmp_path):
    with pytest.raises(DatasetMissing, match="no dataset manifest"):
        prepare_dataset(LocalStore(tmp_path / "nothing"), WORKLOAD, "never", workers=1)


@pytest.mark.parametrize("fmt", ["raw", "npz"])
def test_formats_round_trip_and_catch_short_files(fmt):
    spec = plan_files(workload(num_files=2, format=fmt))[0]
    data = encode_file(spec, fmt, seed=0)[0]
    assert format_for(fmt).check_file(memoryview(data), spec) == 4
    with pytest.raises(CorruptFile):
        format_for(fmt).check_file(memoryview(data[:-10]), spec)


def test_record_size_stdev_varies_per_file_and_is_reproducible():
    sizes = [f.record_size for f in plan_files(workload(num_files=20, record_size_stdev=300))]
    assert len(set(sizes)) > 10 and sizes == [
        f.record_size for f in plan_files(workload(num_files=20, record_size_stdev=300))
    ]
    assert 500 < sum(sizes) / len(sizes) < 1500


@pytest.mark.slow  # starts processes inside bench (workers, readers, a fork)
def test_reader_counts_steps_without_the_warm_up_one(tmp_path):
    store = LocalStore(tmp_path)
    files = prepare_dataset(store, WORKLOAD, "auto", workers=2).files
    result = run_reader(store, files, workload(epochs=2, computation_time=0.002))
    assert [e.steps for e in result.epochs] == [5, 6]  # 6 steps per epoch, the very first is warm-up
    assert result.total("samples") == 11 * 4 and result.total("bytes") == pytest.approx(11 * 4 * 1000)
    assert result.total("compute_s") == pytest.approx(11 * 0.002)
    capped = run_reader(store, files, workload(epochs=3, max_steps=4))
    assert capped.total("steps") == 3 and len(capped.epochs) == 1


@pytest.mark.slow  # starts processes inside bench (workers, readers, a fork)
def test_au_drops_when_storage_cannot_keep_up(tmp_path):
    # Margins wide enough for a busy machine: the fast side's reads (page cache, ~1 ms) hide in 200 ms
    # of compute (60 ms was 82% once in a whole-suite run: ~11 ms a step waiting for a reader thread to be
    # scheduled); the slow side's 250 ms reads on 2 threads give at most one file per 125 ms for
    # 20 ms of compute (AU <= ~16%).
    files = prepare_dataset(LocalStore(tmp_path), workload(num_files=8), "auto", workers=2).files
    fast = read_figures(
        [run_reader(LocalStore(tmp_path), files, workload(num_files=8, computation_time=0.2))],
        storage(num_files=8, computation_time=0.2),
    )
    slow = read_figures(
        [run_reader(SlowStore(tmp_path, 0.25), files, workload(num_files=8, computation_time=0.02))],
        storage(num_files=8, computation_time=0.02),
    )
    assert fast.au_percent_mean > 90 and fast.au_pass is True, fast
    assert slow.au_percent_mean < 70 and slow.au_pass is False, slow
    assert slow.data_wait_fraction > 0.3 > fast.data_wait_fraction
    assert slow.latency_ms_p50 >= 250


def fake_client(client, latencies, samples, wall):
    epoch = EpochStats(
        1, steps=samples // 4, samples=samples, bytes=samples * 1000.0, wall_s=wall, compute_s=wall * 0.95
    )
    requests = [Request(f"k{i}", 1, 4000, ms, 0.0) for i, ms in enumerate(latencies)]
    return ReaderResult(client, [epoch], requests, cpu_s=0.5)


def test_clients_merge_sums_throughput_and_pools_latencies():
    results = [
        fake_client(0, [1.0] * 100, samples=400, wall=2.0),
        fake_client(1, [3.0] * 99 + [100.0], samples=200, wall=1.0),
    ]
    merged = read_figures(results, storage(computation_time=0.1))
    assert merged.samples_per_second == pytest.approx(200 + 200)
    assert merged.read_mb_per_second == pytest.approx((400_000 / 2 + 200_000 / 1) / 1e6)
    assert merged.read_requests == 200
    assert merged.latency_ms_p50 == pytest.approx(2.0)  # halfway between the two clients' pools
    assert merged.latency_ms_max == 100.0
    assert merged.au_percent_mean == pytest.approx(95.0) and merged.au_pass is True
    assert merged.client_cpu_seconds == 1.0
    # computation_time=0 is an I/O ceiling: AU is not a pass, and has no figure at all (not 0.0)
    ceiling = read_figures(results, storage())
    assert ceiling.au_pass is False and ceiling.au_percent_mean is None and ceiling.au_percent_min is None


def test_figures_without_samples_are_absent_not_zero():
    """An accelerator whose requests all finished inside the warm-up step: no latency to report."""
    epoch = EpochStats(1, steps=1, samples=4, bytes=4000.0, wall_s=0.01, compute_s=0.0)
    metrics = read_figures([ReaderResult(0, [epoch], [], cpu_s=0.0)], storage())
    assert metrics.read_requests == 0
    for key in ("latency_ms_p50", "latency_ms_p99", "latency_ms_mean", "latency_ms_max"):
        assert key not in metrics.to_metrics(), key
    assert metrics.samples_per_second == pytest.approx(400.0)  # that figure does have samples


@pytest.mark.slow  # starts processes inside bench (workers, readers, a fork)
@pytest.mark.parametrize("backend", ["local", "s3"])
def test_compare_command_alternates_and_reports_a_ratio(capsys, backend):
    from bench.tools.iobench_compare import main

    code = main([backend, "--files", "8", "--file-kb", "64", "--threads", "2", "--rounds", "1", "--min-ratio", "1000"])
    out = capsys.readouterr().out
    assert code == 1  # nothing is 1000x its baseline: the --min-ratio gate works
    assert "round 1: ours" in out and "| baseline" in out
    ratio = float(out.split("ratio ours/baseline:")[1].split()[0])
    assert ratio > 0
    assert os.environ.get("AWS_SECRET_ACCESS_KEY") != "loopback"  # its throw-away credentials do not leak out
