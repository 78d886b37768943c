"""storage=s3: an S3 bucket through one of three clients, picked by `storage.client`
(bench.registries.S3_CLIENTS maps the client name to its store class)."""

from __future__ import annotations

from pathlib import Path

from bench.registries import S3_CLIENTS, load_named
from bench.storage.base import Backend, ObjectStore, join_key
from bench.storage.s3.settings import S3Settings, parse_s3_url, require_credentials


class S3Backend(Backend):
    """storage=s3: storage.bucket / storage.prefix."""

    def location(self, run_dir: Path, subdir: str = "") -> str:
        return "s3://" + join_key(self.cfg.bucket or "", self.cfg.prefix, subdir)

    def open(self, location: str) -> ObjectStore:
        """A store for s3://bucket/prefix with the client, endpoint, region and retries of the storage
        config; the endpoint is checked first (one short LIST), so a bad setup or an endpoint that does
        not answer fails here, in seconds, clearly."""
        from bench.storage.s3.boto3_store import check_endpoint

        settings = S3Settings.from_config(*parse_s3_url(location), self.cfg)
        self.cfg.check_s3_extra()  # where the config's own check did not run (bench.data, the doctor)
        require_credentials(settings)
        check_endpoint(settings, str(self.cfg.client))
        return load_named("storage.client", self.cfg.client, S3_CLIENTS)(settings)  # an S3Store

    def describe(self, store: ObjectStore) -> str:
        return self.cfg.client
