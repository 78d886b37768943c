"""storage=s3: an S3 bucket through one of three clients, picked by `storage.client`
(a registry: the client name maps to its store class)."""

from __future__ import annotations

import importlib
import importlib.util
from pathlib import Path

from bench.config.storage import S3Client, StorageLocation
from bench.errors import ConfigProblem
from bench.storage.base import ObjectStore, join_key
from bench.storage.s3.settings import S3Settings, S3Store, parse_s3_url, require_credentials

CLIENTS = {
    S3Client.obstore: "bench.storage.s3.obstore_store:ObstoreStore",
    S3Client.boto3: "bench.storage.s3.boto3_store:Boto3Store",
    S3Client.s3torchconnector: "bench.storage.s3.torchconnector_store:S3TorchConnectorStore",
}
# the clients of the `s3` extra (an offline kit may leave them out): boto3's credential chain serves all three
S3_EXTRA = ("boto3", "obstore")


def require_s3_extra(client: S3Client) -> None:
    """storage=s3 where `pip install 'bench[s3]'` was not done: one sentence, exit 2, before any run starts."""
    wanted = [name for name in S3_EXTRA if name == "boto3" or client == S3Client.obstore]
    missing = [name for name in wanted if importlib.util.find_spec(name) is None]
    if missing:
        raise ConfigProblem(
            f"storage=s3 with storage.client={client} needs {' and '.join(missing)}, not installed here: "
            "pip install 'bench[s3]' (offline: a kit built with --extras s3)"
        )


def open_s3_store(location: str, storage: StorageLocation) -> S3Store:
    """An ObjectStore for s3://bucket/prefix with the client, endpoint, region and retries of
    the storage config; checks access once (one LIST) so a bad setup fails here, clearly."""
    bucket, prefix = parse_s3_url(location)
    settings = S3Settings.from_config(bucket, prefix, storage)
    require_s3_extra(storage.client)
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
