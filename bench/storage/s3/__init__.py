"""storage=s3: an S3 bucket through one of three clients, picked by `storage.client`
(bench.registries.S3_CLIENTS maps the client name to its store class, an S3Store below), and what
every client shares: the settings taken from the storage config, the one-sentence errors, and the
base class that turns each client's exceptions into them.

Credentials are never read from the config: each client takes them from the standard AWS
chain (AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY / AWS_SESSION_TOKEN, AWS_PROFILE and
~/.aws, instance roles). Custom endpoints (MinIO, Ceph, moto) get path-style requests, and
plain-http endpoints are allowed explicitly. A failed request (5xx, throttling, timeouts,
dropped connections) is retried here, not in the clients, with exponential backoff,
`storage.max_attempts` tries in all, each retry said in one line as it happens (s3torchconnector's
CRT retries inside, unsaid); a missing key, a missing bucket or refused credentials are not
retried. What stops the store from working becomes one StorageError sentence naming the
endpoint and the bucket.
"""

from __future__ import annotations

import dataclasses
import logging
import re
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, List, Optional, Tuple, TypeVar

from bench.config.storage import StorageLocation
from bench.errors import StorageError
from bench.registries import S3_CLIENTS, load_named
from bench.storage.base import Backend, ObjectStore, join_key

T = TypeVar("T")

log = logging.getLogger("bench")

NO_BUCKET = "the bucket does not exist"
DENIED = "access denied: check AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY or AWS_PROFILE"
UNANSWERED = "the endpoint took the connection but did not answer in time"
UNREACHABLE = "the endpoint cannot be reached"
MAX_BACKOFF_S = 5.0  # between tries: 0.1 s, doubled each time, at most this
# Phrases in the clients' error texts (any case), mapped to what the user should hear: the first match.
_REASONS = (
    ("NoSuchBucket|bucket does not exist", NO_BUCKET),
    ("Read timeout|ReadTimeout", UNANSWERED),
    ("InvalidAccessKeyId|SignatureDoesNotMatch|AccessDenied|403 Forbidden|ExpiredToken", DENIED),
    ("Unauthenticated|PermissionDenied|credentials", DENIED),
    ("error sending request|CONNECTION_REFUSED|Connection refused|Could not connect|Connect timeout", UNREACHABLE),
    ("timed out|dns error|Name or service not known|HOST_NOT_FOUND", UNREACHABLE),
)


@dataclass(frozen=True)
class S3Settings:
    bucket: str
    prefix: str
    endpoint: Optional[str]
    region: str
    max_attempts: int
    timeout_s: float
    connect_timeout_s: float

    @classmethod
    def from_config(cls, location: str, storage: StorageLocation) -> "S3Settings":
        """For 's3://bucket/a/b/' (bucket 'bucket', prefix 'a/b'), with the storage config's endpoint and limits."""
        if not location.startswith("s3://"):
            raise ValueError(f"not an s3:// URL: {location!r}")
        bucket, _, prefix = location[len("s3://") :].partition("/")
        limits = storage.max_attempts, storage.timeout_s, storage.connect_timeout_s
        return cls(bucket, prefix.strip("/"), storage.endpoint or None, storage.region, *limits)

    @property
    def url(self) -> str:
        return f"s3://{join_key(self.bucket, self.prefix)}"

    @property
    def where(self) -> str:
        return f"bucket {self.bucket!r} at {self.endpoint or 'AWS (region ' + self.region + ')'}"

    def checking(self) -> "S3Settings":
        """For the endpoint check: one try, storage.connect_timeout_s for the answer too."""
        return dataclasses.replace(self, max_attempts=1, timeout_s=self.connect_timeout_s)

    def key(self, key: str) -> str:
        return join_key(self.prefix, key)

    def list_prefix(self, prefix: str) -> str:
        full = self.key(prefix)
        return full + "/" if full else ""

    def relative_sorted(self, found: List[Tuple[str, int]]) -> List[Tuple[str, int]]:
        cut = len(self.prefix) + 1 if self.prefix else 0
        return sorted((key[cut:], size) for key, size in found)


class S3Store:
    """Shared error handling: a missing key stays FileNotFoundError (callers test for it);
    a store-level failure becomes StorageError."""

    client_name = ""
    retries_itself = False  # True: the client's own retries, storage.max_attempts tries

    def __init__(self, settings: S3Settings):
        self.settings, self.url, self.mode = settings, settings.url, self.client_name

    _missing: Callable[[BaseException], bool]  # is this client's exception a missing key?

    def _call(self, operation: str, key: str, action: Callable[[], T], missing_key: Optional[bool] = True) -> T:
        attempts = 1 if self.retries_itself else self.settings.max_attempts
        for attempt in range(1, attempts + 1):
            try:
                return action()
            except StorageError:
                raise
            except Exception as exc:  # each client has its own exception tree
                text = str(exc).split("Debug source:")[0]  # obstore appends its config (retry_timeout: ...)
                reason = next((why for phrases, why in _REASONS if re.search(phrases, text, re.IGNORECASE)), None)
                if missing_key and reason != NO_BUCKET and self._missing(exc):
                    raise FileNotFoundError(f"{self.settings.url}/{key}: no such object") from exc
                what = (
                    f"S3 {operation} of {self.settings.key(key) or '/'!r} failed for {self.settings.where} "
                    f"with client {self.client_name}"
                )
                error = f"{type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0][:240]}"
                # after Ctrl-C the interpreter waits for reader threads: no more tries then
                if attempt == attempts or reason in (NO_BUCKET, DENIED) or not threading.main_thread().is_alive():
                    tries = f" after {attempt} tries" if attempt > 1 else ""
                    raise StorageError(f"{what}: {reason or 'request failed'} ({error}){tries}") from exc
                pause = min(MAX_BACKOFF_S, 0.1 * 2 ** (attempt - 1))
                log.warning("%s (try %d of %d: %s); trying again in %.1f s", what, attempt, attempts, error, pause)
                time.sleep(pause)
        raise AssertionError("unreachable")  # the last try returned or raised

    # the ObjectStore operations, through _call; each client writes the raw ones (_get, _put, ...)
    _get: Callable[[str], bytes]
    _get_range: Callable[[str, int, int], bytes]
    _put: Callable[[str, bytes], object]
    _list: Callable[[str], List[Tuple[str, int]]]  # (key, size) under the prefix, sorted
    _delete: Callable[[str], object]
    _head: Callable[[str], object]

    def get(self, key: str) -> bytes:
        return self._call("GET", key, lambda: self._get(key))

    def get_range(self, key: str, start: int, length: int) -> bytes:
        return self._call("GET", key, lambda: self._get_range(key, start, length))

    def put(self, key: str, data: bytes) -> None:
        self._call("PUT", key, lambda: self._put(key, data))

    def list(self, prefix: str = "") -> List[Tuple[str, int]]:
        return self._call("LIST", prefix, lambda: self._list(prefix), missing_key=False)

    def exists(self, key: str) -> bool:
        try:
            self._call("HEAD", key, lambda: self._head(key))
        except FileNotFoundError:
            return False
        return True

    def delete(self, key: str) -> None:
        self._call("DELETE", key, lambda: self._delete(key), missing_key=False)


def require_credentials(settings: S3Settings) -> None:
    """Fail in one sentence when the AWS chain has nothing, instead of a client's slow
    instance-metadata probe and a cryptic signing error later."""
    import boto3

    logging.getLogger("botocore.credentials").setLevel(logging.WARNING)  # "Found credentials in ..." each time
    if boto3.Session().get_credentials() is None:
        raise StorageError(
            f"no AWS credentials found for {settings.where}: set AWS_ACCESS_KEY_ID and "
            "AWS_SECRET_ACCESS_KEY (or AWS_PROFILE) in the environment"
        )


class S3Backend(Backend):
    """storage=s3: storage.bucket / storage.prefix."""

    def location(self, run_dir: Path, subdir: str = "") -> str:
        return "s3://" + join_key(self.cfg.bucket or "", self.cfg.prefix, subdir)

    def open(self, location: str) -> ObjectStore:
        """A store for s3://bucket/prefix with the client, endpoint, region and retries of the storage
        config; the endpoint is checked first (one short LIST), so a bad setup or an endpoint that does
        not answer fails here, in seconds, clearly."""
        from bench.storage.s3.boto3_store import check_endpoint

        settings = S3Settings.from_config(location, self.cfg)
        self.cfg.check_s3_extra()  # where the config's own check did not run (bench.data, the doctor)
        require_credentials(settings)
        check_endpoint(settings, str(self.cfg.client))
        return load_named("storage.client", self.cfg.client, S3_CLIENTS)(settings)  # an S3Store

    def describe(self, store: ObjectStore) -> str:
        return self.cfg.client
