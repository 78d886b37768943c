"""The doctor's input-pipeline rung splits the loader's CPU time by stage for every real-data
loader: a JPEG folder, shards (on local disk and on a loopback S3 server) and CIFAR-100. Real
files, real decodes, the loader's own functions."""

from __future__ import annotations

from pathlib import Path

from bench.data.shardformat import encode_shard, make_meta, shard_key
from bench.doctor.figures import LoaderFigures
from bench.doctor.loader import loader_rung, stage_split
from bench.storage.base import open_store

STAGES = {"read", "decode", "augment", "collate", "host_to_device"}


def _write_shards(store, jpegs: list, per_shard: int = 10) -> int:
    """The images of `jpegs` (JPEG files) as train/ shards with their meta.json, as `python -m
    bench.data prepare` lays them out; returns the shard count."""
    shards = []
    for number, start in enumerate(range(0, len(jpegs), per_shard)):
        blob = encode_shard([(Path(p).read_bytes(), i % 4) for i, p in enumerate(jpegs[start : start + per_shard])])
        store.put(shard_key("train", number), blob)
        shards.append(
            {"key": shard_key("train", number), "count": len(jpegs[start : start + per_shard]), "bytes": len(blob)}
        )
    store.put("train/meta.json", make_meta("train", ["a", "b", "c", "d"], shards, 48, 90, []))
    return len(shards)


def _shard_config(compose, root: str, *extra: str):
    return compose(
        "+experiment=cpu_smoke",
        "model=small_cnn",
        "data=shards",
        f"data.root={root}",
        "data.num_classes=4",
        "data.num_workers=0",
        "data.batch_size=8",
        "data.image_size=32",
        *extra,
    )


def test_local_shards_are_split_by_stage_with_the_shard_read_shared_by_its_images(tmp_path, datasets, compose):
    jpegs = datasets.image_folder(tmp_path / "jpegs", images=30)
    config = _shard_config(compose, str(tmp_path / "shards"))
    _write_shards(open_store(str(tmp_path / "shards"), config.storage), jpegs)
    split = stage_split(config, budget_s=2.0)
    assert split is not None and set(split) == STAGES
    assert split["read"] > 0 and split["decode"] > 0 and split["augment"] > 0 and split["host_to_device"] > 0
    assert split["decode"] > split["read"]  # a shard is read whole once; every image is decoded
    rung = loader_rung(config, window_s=0.3)  # the rung carries it, and no "not split" note
    figures = rung.figures
    assert isinstance(figures, LoaderFigures) and figures.stage_cpu_ms is not None
    assert set(figures.stage_cpu_ms) == STAGES and figures.stage_note is None
    assert "stage_note" not in rung.figures_json()  # doctor.json: the note only where nothing was split
    assert rung.images_per_second > 0 and figures.dataset_size == 30


def test_shards_on_s3_are_split_by_stage_reading_through_the_storage_group(
    tmp_path, datasets, compose, s3_server, aws_env
):
    bucket = s3_server.new_bucket()
    jpegs = datasets.image_folder(tmp_path / "jpegs", images=20)
    config = _shard_config(compose, f"s3://{bucket}/shards", *s3_server.overrides(bucket))
    _write_shards(open_store(f"s3://{bucket}/shards", config.storage), jpegs)
    split = stage_split(config, budget_s=2.0)
    assert split is not None and set(split) == STAGES and split["read"] > 0 and split["decode"] > 0


def test_cifar100_is_split_by_stage_without_a_decode(tmp_path, datasets, compose):
    datasets.cifar100(tmp_path / "cifar", train=40)
    config = compose(
        "+experiment=cpu_smoke",
        "model=small_cnn",
        "data=cifar100",
        f"data.root={tmp_path / 'cifar'}",
        "data.num_classes=100",
        "data.num_workers=0",
        "data.batch_size=8",
        "data.image_size=32",
    )
    split = stage_split(config, budget_s=2.0)
    assert split is not None and set(split) == STAGES
    assert split["decode"] == 0.0  # raw pixels in memory: nothing to decode
    assert split["augment"] > 0 and split["collate"] > 0 and split["host_to_device"] > 0
