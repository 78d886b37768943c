"""storage=s3: an S3 bucket through one of three clients, picked by `storage.client`
(bench.registries.S3_CLIENTS maps the client name to its store class)."""

from __future__ import annotations

from pathlib import Path

from bench.config.storage import StorageLocation
from bench.registries import S3_CLIENTS, load_named
from bench.storage.base import ObjectStore, join_key
from bench.storage.s3.settings import S3Settings, parse_s3_url, require_credentials


class S3Backend:
    """storage=s3: storage.bucket / storage.prefix."""

    def __init__(self, cfg: StorageLocation):
        self.cfg = cfg

    def location(self, run_dir: Path, subdir: str = "") -> str:
        return "s3://" + join_key(self.cfg.bucket or "", self.cfg.prefix, subdir)

    def open(self, location: str) -> ObjectStore:
        """A store for s3://bucket/prefix with the client, endpoint, region and retries of the storage
        config; the endpoint is checked first (one short LIST), so a bad setup or an endpoint that does
        not answer fails here, in seconds, clearly."""
        from bench.storage.s3.boto3_store import check_endpoint

        storage = self.cfg
        settings = S3Settings.from_config(*parse_s3_url(location), storage)
        storage.check_s3_extra()  # where the config's own check did not run (bench.data, the doctor)
        require_credentials(settings)
        check_endpoint(settings, str(storage.client))
        return load_named("storage.client", storage.client, S3_CLIENTS)(settings)  # an S3Store

    def checkpoint_store(self, run_dir: Path, subdir: str = "") -> ObjectStore:
        return self.open(self.location(run_dir, subdir))

    def describe(self, store: ObjectStore) -> str:
        return self.cfg.client
