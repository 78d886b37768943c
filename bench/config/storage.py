"""The `storage` group: where checkpoints, shards and the storage benchmark's dataset live
(StorageLocation, read by bench.storage), and the storage benchmark's own keys
(bench.config.storage_benchmark.StorageBenchmarkConfig, read by bench.iobench). StorageConfig is
both in one group, so every key keeps its path (`storage.root`, `storage.runs`,
`storage.workload.num_files`); code that only needs the where takes a StorageLocation.

S3 credentials have no key here on purpose: they come from the AWS environment or profile
only, since the config is saved in .hydra/ and logged to MLflow."""

from __future__ import annotations

import importlib.util
import re
from dataclasses import dataclass
from typing import Optional
from urllib.parse import urlparse

from bench.config.fields import Checks, positive
from bench.config.storage_benchmark import PROCESSES_NEED, Readers, StorageBenchmarkConfig
from bench.errors import ConfigError

# Loose on purpose: AWS wants 3-63 lowercase characters, but some S3-compatible stores take
# other names; the server has the last word (and its refusal is one clear line too).
BUCKET_NAME = re.compile(r"^[^/\s]+$")


@dataclass
class StorageLocation(Checks):
    """Where data lives, and how the store is reached: a local directory or an S3 bucket."""

    KEY = "storage"
    name: str = "local"  # a backend in bench.registries.BACKENDS, or one of your own: mypkg.store:MyBackend
    # local: a directory (null: the run's output directory)
    root: Optional[str] = None
    save_checkpoint: bool = False  # training: write a checkpoint after the measured window
    checkpoint_name: str = "checkpoint.pt"
    fsync: bool = True
    # local reads bypass the page cache (O_DIRECT, or fadvise DONTNEED where O_DIRECT is refused)
    direct_io: bool = False
    # s3: null endpoint = AWS; http(s)://host:port for MinIO, Ceph, moto ...
    endpoint: Optional[str] = None
    bucket: Optional[str] = None
    prefix: str = ""
    region: str = "us-east-1"
    client: str = "obstore"  # an S3 client in bench.registries.S3_CLIENTS, or mypkg.s3:MyStore
    max_attempts: int = positive(5)  # tries per request (5xx, throttling, timeouts retried with backoff)
    timeout_s: float = positive(60.0)  # per request
    connect_timeout_s: float = positive(5.0)

    def rules(self) -> None:
        self.registered("name")
        self.registered("client")
        if not self.checkpoint_name or "/" in self.checkpoint_name or self.checkpoint_name in (".", ".."):
            self._fail("checkpoint_name", "a file name (no '/'): the checkpoint goes into storage.root")
        if self.name != "s3" or self.endpoint is None:
            return
        parsed = urlparse(self.endpoint)
        if parsed.username or parsed.password:
            # the config is logged to MLflow and saved in .hydra/: credentials come from AWS_* / the profile
            self._fail(
                "endpoint",
                "a URL without user:password (set AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY or AWS_PROFILE instead)",
                "<hidden: it carries credentials>",
            )
        if parsed.scheme not in ("http", "https") or not parsed.hostname:
            self._fail("endpoint", "an http:// or https:// URL such as http://minio:9000, or null for AWS")

    def check_bucket(self) -> None:
        """storage=s3 with something to store (the storage benchmark, or checkpoints) needs a bucket."""
        if self.name != "s3":
            return
        if not BUCKET_NAME.match(self.bucket or ""):
            self._fail(
                "bucket",
                "a bucket name (no '/': put paths in storage.prefix) with storage=s3 "
                "(mode=storage or storage.save_checkpoint=true)",
            )
        self.check_s3_extra()

    def check_s3_extra(self) -> None:
        """The clients of the `s3` extra (an offline kit may leave them out): boto3 (its credential chain
        serves every client) and the one storage.client names; s3torchconnector says its own."""
        wanted = ["boto3"] + (["obstore"] if self.client == "obstore" else [])
        if missing := [name for name in wanted if not _installed(name)]:
            self._fail(
                "client",
                f"a client that is installed here: {' and '.join(missing)} missing, "
                "pip install 'bench[s3]' brings them (offline: a kit built with --extras s3)",
                str(self.client),
            )


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a module set to None in sys.modules
        return False


@dataclass
class StorageConfig(StorageBenchmarkConfig, StorageLocation):
    """The whole `storage` group: StorageLocation's keys first, then the benchmark's (as always)."""

    def __post_init__(self) -> None:
        self.check_benchmark()
        self.rules()
        if self.workload.readers == Readers.processes and (self.name == "s3" or self.direct_io):
            # the same sentence as bench.iobench.reader's, where a store is met that the config did not name
            raise ConfigError("storage.workload.readers", "processes", PROCESSES_NEED)
