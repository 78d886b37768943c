"""storage=s3: an S3 bucket through one of three clients, picked by `storage.client`
(a registry: the client name maps to its store class)."""

from __future__ import annotations

import importlib
from pathlib import Path

from bench.config.storage import S3Client, StorageLocation
from bench.storage.base import ObjectStore, join_key
from bench.storage.s3.settings import S3Settings, S3Store, parse_s3_url, require_credentials

CLIENTS = {
    S3Client.obstore: "bench.storage.s3.obstore_store:ObstoreStore",
    S3Client.boto3: "bench.storage.s3.boto3_store:Boto3Store",
    S3Client.s3torchconnector: "bench.storage.s3.torchconnector_store:S3TorchConnectorStore",
}


def open_s3_store(location: str, storage: StorageLocation) -> S3Store:
    """An ObjectStore for s3://bucket/prefix with the client, endpoint, region and retries of
    the storage config; checks access once (one LIST) so a bad setup fails here, clearly."""
    bucket, prefix = parse_s3_url(location)
    settings = S3Settings.from_config(bucket, prefix, storage)
    storage.check_s3_extra()  # where the config's own check did not run (bench.data, the doctor)
    require_credentials(settings)
    module, _, name = CLIENTS[storage.client].partition(":")
    store: S3Store = getattr(importlib.import_module(module), name)(settings)
    store.check_access()
    return store


class S3Backend:
    """storage=s3: storage.bucket / storage.prefix."""

    def __init__(self, cfg: StorageLocation):
        self.cfg = cfg

    def location(self, run_dir: Path, subdir: str = "") -> str:
        return "s3://" + join_key(self.cfg.bucket or "", self.cfg.prefix, subdir)

    def open(self, location: str) -> ObjectStore:
        return open_s3_store(location, self.cfg)

    def checkpoint_store(self, run_dir: Path, subdir: str = "") -> ObjectStore:
        return self.open(self.location(run_dir, subdir))

    def describe(self, store: ObjectStore) -> str:
        return str(self.cfg.client)
