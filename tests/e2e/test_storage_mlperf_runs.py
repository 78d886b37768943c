"""The storage benchmark as MLPerf Storage runs it, end to end in real processes: two "hosts" of
two simulated accelerators each (torch.distributed ranks over gloo on 127.0.0.1) merged on rank 0;
the harness on one host (warm-up + measured runs, evaluation passes, periodic and repeated
checkpoints, hdf5); the checkpoint-only workload. Three `python -m bench` runs (the first is two
processes, one per "host"), each checked through its final line, files, store and MLflow run."""

from __future__ import annotations

import csv
import json

import pytest
from mlflow import MlflowClient

from bench.maths.stats import percentile
from bench.rank_context import free_port

HANG_GUARD_S = 900
FILES, SAMPLES, RECORD, EPOCHS = 8, 4, 4096, 2
TINY = [
    "mode=storage",
    f"storage.workload.num_files={FILES}",
    f"storage.workload.samples_per_file={SAMPLES}",
    f"storage.workload.record_size={RECORD}",
    f"storage.workload.epochs={EPOCHS}",
    "storage.workload.read_threads=2",
    "storage.workload.computation_time=0.005",
    "storage.prepare_workers=2",
]


def rows(path):
    with path.open() as fh:
        return list(csv.DictReader(fh))


def test_two_hosts_of_two_accelerators_merge_every_client_on_rank_0(bench, tmp_path):
    bench.with_store()
    root = tmp_path / "shared"  # storage both "hosts" see
    common = [
        *TINY,
        "storage.workload.batch_size=2",
        "storage.workload.format=tfrecord",
        "storage.workload.read_mode=sample",
        "storage.workload.shuffle=sample",
        "storage.workload.shuffle_buffer=4",
        "storage.workload.checkpoint_size_mb=2",
        "storage.workload.checkpoint_writers=all",
        "storage.workload.checkpoint_count=2",
        "storage.workload.checkpoint_keep=true",
        f"storage.root={root}",
        "distributed=ddp",
        "distributed.nnodes=2",
        "distributed.nproc_per_node=2",
        f"distributed.rdzv_endpoint=127.0.0.1:{free_port()}",
        f"distributed.timeout_s={HANG_GUARD_S}",
    ]
    leader, follower = bench.run_two_nodes(common, tmp_path)
    metrics = bench.metrics(leader)
    assert follower.returncode == 0, follower.stderr
    assert follower.stdout == "" and not (tmp_path / "node1" / "run_summary.json").exists()
    assert metrics["hosts"] == 2 and metrics["accelerators"] == metrics["clients"] == 4
    assert metrics["format"] == "tfrecord" and metrics["read_mode"] == "sample" and metrics["shuffle"] == "sample"

    run_dir = tmp_path / "node0"
    clients = rows(run_dir / "clients.csv")
    assert [int(c["client"]) for c in clients] == [0, 1, 2, 3] and [int(c["node"]) for c in clients] == [0, 0, 1, 1]
    # every request of every client, each once: in sample mode one request per measured sample
    requests = rows(run_dir / "read_latency.csv")
    assert {r["client"] for r in requests} == {"0", "1", "2", "3"}
    assert len(requests) == metrics["read_requests"] == metrics["read_samples"] == 4 * (EPOCHS * 2 * SAMPLES - 2)
    assert all(int(r["bytes"]) == RECORD + 16 for r in requests)  # one framed record per read
    files = [{r["key"] for r in requests if r["client"] == c} for c in "0123"]
    assert all(len(f) == 2 for f in files) and len(set().union(*files)) == FILES  # disjoint shards
    latencies = [float(r["latency_ms"]) for r in requests]  # percentiles over ALL requests
    assert metrics["latency_ms_p50"] == pytest.approx(percentile(latencies, 50), abs=1e-3)
    assert metrics["latency_ms_p99"] == pytest.approx(percentile(latencies, 99), abs=1e-3)
    epochs = rows(run_dir / "epochs.csv")
    assert len(epochs) == 4 * EPOCHS and sum(int(e["all_samples"]) for e in epochs) == EPOCHS * FILES * SAMPLES
    per_epoch = [sum(float(e["samples_per_second"]) for e in epochs if e["epoch"] == str(n)) for n in (1, 2)]
    assert metrics["mlperf_samples_per_second"] == pytest.approx(sum(per_epoch) / 2, rel=1e-3)  # summed, averaged

    summary = json.loads((run_dir / "run_summary.json").read_text())
    assert summary["prepare"]["written_by_client"] == [2, 2, 2, 2]  # each client wrote its 1/N
    dataset = root / "iobench-dataset"
    assert len(list(dataset.glob("file_*.tfrecord"))) == FILES and (dataset / "_manifest.json").is_file()
    saved = sorted(p.name for p in (root / "iobench-checkpoints").iterdir())
    assert saved == [f"checkpoint-{i}.rank{r}.pt" for i in (0, 1) for r in range(4)]
    assert metrics["checkpoint_clients"] == 4 and metrics["checkpoint_count"] == 2
    assert metrics["checkpoint_bytes"] == sum(
        (root / "iobench-checkpoints" / f"checkpoint-0.rank{r}.pt").stat().st_size for r in range(4)
    )
    assert metrics["checkpoint_cache_drop"] == "posix_fadvise_dontneed"
    (run,) = bench.runs()
    assert run.info.status == "FINISHED" and run.data.metrics["hosts"] == 2
    assert len(MlflowClient(bench.uri).get_metric_history(run.info.run_id, "epoch_samples_per_second")) == EPOCHS


def test_the_mlperf_harness_on_one_host(bench, tmp_path):
    """A warm-up run then 2 measured runs (cache dropped between), 2 accelerator processes, hdf5
    read in transfer_size pieces, an evaluation pass per epoch, a checkpoint every 3 steps and 2
    checkpoints written and read back after each run."""
    bench.with_store()
    proc = bench.run(
        *TINY,
        "storage.workload.batch_size=4",
        "storage.workload.format=hdf5",
        "storage.workload.transfer_size=1024",
        "storage.workload.eval_num_files=2",
        "storage.workload.eval_computation_time=0.002",
        "storage.workload.seed_change_epoch=false",
        "storage.workload.checkpoint_size_mb=1",
        "storage.workload.checkpoint_count=2",
        "storage.workload.checkpoint_every_steps=3",
        "storage.workload.checkpoint_keep=true",
        "storage.accelerators=2",
        "storage.runs=2",
        "storage.warmup_runs=1",
        f"storage.root={tmp_path}/data",
        f"hydra.run.dir={tmp_path}/run",
    )
    metrics = bench.metrics(proc)
    assert "below MLPerf's dataset size" in proc.stderr and "storage.workload.num_files=8" in proc.stderr
    run_dir = tmp_path / "run"
    log = (run_dir / "bench.log").read_text()
    assert "run 1 of 3 (warm-up)" in log and "run 3 of 3 (measured)" in log
    assert log.count("page cache of 10 dataset files dropped: posix_fadvise_dontneed") == 2
    assert [r["run"] for r in rows(run_dir / "runs.csv")] == ["0", "1"]
    assert metrics["runs"] == 2 and metrics["warmup_runs"] == 1 and "runs_samples_per_second_spread_percent" in metrics
    epochs = rows(run_dir / "epochs.csv")  # 2 accelerators x 2 epochs x 2 measured runs (the warm-up dropped)
    assert len(epochs) == 8 and {e["run"] for e in epochs} == {"1", "2"}
    assert all(float(e["samples_per_second"]) > 0 and e["mlperf_au_percent"] for e in epochs)
    assert metrics["mlperf_mib_per_second"] == pytest.approx(metrics["mlperf_samples_per_second"] * RECORD / 2**20)
    assert 0 < metrics["mlperf_au_percent"] <= 100 and metrics["mlperf_au_pass"] is (metrics["mlperf_au_percent"] >= 90)
    assert metrics["eval_samples_per_second"] > 0 and metrics["eval_seconds"] > 0
    assert len(list((tmp_path / "data" / "iobench-dataset" / "eval").glob("*.h5"))) == 2
    # 4 steps per accelerator per epoch: checkpoints after steps 3 and 6, from client 0 (checkpoint_writers=one)
    assert metrics["periodic_checkpoints"] == 2 and metrics["periodic_checkpoint_seconds"] > 0
    saved = sorted(p.name for p in (tmp_path / "data" / "iobench-checkpoints").iterdir())
    assert saved == ["checkpoint-0.pt", "checkpoint-1.pt", "checkpoint-step3.pt", "checkpoint-step6.pt"]
    assert metrics["checkpoint_count"] == 2 and metrics["checkpoint_clients"] == 1
    assert metrics["checkpoint_write_seconds"] > metrics["checkpoint_store_write_seconds"] > 0  # serialisation apart
    assert metrics["checkpoint_serialize_seconds"] > 0 and metrics["checkpoint_store_read_gbps"] > 0
    assert metrics["mlperf_qualifies"] is False
    assert (
        "dataset: 8 files" in metrics["mlperf_not_qualified_because"]
        and "this was 1 + 2" in metrics["mlperf_not_qualified_because"]
    )
    (run,) = bench.runs()
    assert run.info.status == "FINISHED" and run.data.tags["mlperf_qualifies"] == "False"
    client = MlflowClient(bench.uri)
    for series in ("epoch_samples_per_second", "epoch_mlperf_au_percent", "epoch_au_percent"):
        assert len(client.get_metric_history(run.info.run_id, series)) == EPOCHS, series
    # each measured run's samples/s: what bench.compare samples of a storage run read back from MLflow
    by_run = client.get_metric_history(run.info.run_id, "run_samples_per_second")
    assert sorted(m.value for m in by_run) == sorted(float(r["samples_per_second"]) for r in rows(run_dir / "runs.csv"))
    artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert {"clients.csv", "runs.csv", "epochs.csv"} <= artifacts


def test_checkpoint_only_workload_with_every_accelerator_writing_its_share(bench, tmp_path):
    proc = bench.run(
        "mode=storage",
        "storage.workload.checkpoint_only=true",
        "storage.workload.checkpoint_size_mb=2",
        "storage.workload.checkpoint_count=2",
        "storage.workload.checkpoint_writers=all",
        "storage.workload.checkpoint_keep=true",
        "storage.accelerators=2",
        f"storage.root={tmp_path}/data",
        "tracking.enabled=false",
        f"hydra.run.dir={tmp_path}/run",
    )
    metrics = bench.metrics(proc)
    assert "mlperf_samples_per_second" not in metrics and "read_requests" not in metrics  # nothing was read
    assert not (tmp_path / "data" / "iobench-dataset").exists()
    saved = sorted(p.name for p in (tmp_path / "data" / "iobench-checkpoints").iterdir())
    assert saved == ["checkpoint-0.rank0.pt", "checkpoint-0.rank1.pt", "checkpoint-1.rank0.pt", "checkpoint-1.rank1.pt"]
    assert metrics["checkpoint_clients"] == 2 and metrics["checkpoint_count"] == 2
    assert metrics["checkpoint_store_write_gbps"] > 0 and metrics["checkpoint_store_read_gbps"] > 0
    assert metrics["checkpoint_bytes"] >= 2 * 2**20
    assert "checkpoint-only run is not a training result" in metrics["mlperf_not_qualified_because"]
    assert "checkpoint write" in proc.stderr and "GB/s" in proc.stderr  # the headline
