"""The two halves of the storage layer together: `python -m bench.data prepare` writes shards
to an S3 server on 127.0.0.1 and a training run reads them back with data=shards storage=s3."""

from __future__ import annotations

import subprocess
import sys

from conftest import TINY, all_runs, bench_env, radix_metrics, run_bench, sqlite_uri
from data_builders import image_folder
from s3_server import SECRET, s3_env


def test_shards_prepared_to_s3_train_through_storage_s3(tmp_path, s3_server):
    bucket = s3_server.new_bucket()
    image_folder(tmp_path / "flat", images=24)
    env = bench_env(tracking_uri=sqlite_uri(tmp_path / "mlflow.db"), **s3_env())
    prepared = subprocess.run(
        [sys.executable, "-m", "bench.data", "prepare", "--src", str(tmp_path / "flat"),
         "--dst", f"s3://{bucket}/shards", "--size", "40", "--shard-size", "10", "--workers", "1", "--no-progress",
         "--storage", f"endpoint={s3_server.endpoint}"],
        capture_output=True, text=True, timeout=180, env=env)
    assert prepared.returncode == 0, prepared.stderr
    keys = [o["Key"] for o in s3_server.admin().list_objects_v2(Bucket=bucket)["Contents"]]
    assert any(k.startswith("shards/") for k in keys)

    base = [a for a in TINY if not a.startswith("data.num_classes=")]
    metrics = radix_metrics(run_bench(tmp_path, [
        *base, "data=shards", f"data.root=s3://{bucket}/shards", "data.num_classes=10", "data.num_workers=1",
        *s3_server.overrides(bucket), f"hydra.run.dir={tmp_path}/run"], env=env))
    assert metrics["data"] == "shards" and metrics["dataset_size"] == 24 and metrics["dataset_shards"] == 3
    assert metrics["measured_steps"] == 3
    (run,) = all_runs(sqlite_uri(tmp_path / "mlflow.db"))
    assert run.info.status == "FINISHED"
    assert SECRET not in str(run.data.params) + str(run.data.tags)
    assert not any(SECRET in p.read_text(errors="ignore") for p in (tmp_path / "run").rglob("*") if p.is_file())
