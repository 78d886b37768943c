"""The storage group: where a run keeps checkpoints, shards and benchmark datasets (bench.storage.base)."""
