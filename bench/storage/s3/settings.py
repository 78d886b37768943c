"""What every S3 client shares: the settings taken from the storage config, the one-sentence
errors, and the base class that turns each client's exceptions into them.

Credentials are never read from the config: each client takes them from the standard AWS
chain (AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY / AWS_SESSION_TOKEN, AWS_PROFILE and
~/.aws, instance roles). Custom endpoints (MinIO, Ceph, moto) get path-style requests, and
plain-http endpoints are allowed explicitly. Transient failures (5xx, throttling, timeouts,
dropped connections) are retried with exponential backoff by each client's own retry logic,
`storage.max_attempts` tries in all. Anything else that stops the store from working (missing
bucket, refused credentials, unreachable endpoint) becomes one StorageError sentence naming
the endpoint and the bucket.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Callable, List, Optional, Tuple, TypeVar

from bench.config.storage import StorageLocation
from bench.errors import StorageError
from bench.storage.base import join_key

T = TypeVar("T")

NO_BUCKET = "the bucket does not exist"
# Phrases in the clients' error texts, mapped to what the user should hear.
_REASONS = (
    (("NoSuchBucket", "bucket does not exist"), NO_BUCKET),
    (
        (
            "InvalidAccessKeyId",
            "SignatureDoesNotMatch",
            "AccessDenied",
            "403 Forbidden",
            "ExpiredToken",
            "Unauthenticated",
            "PermissionDenied",
            "credentials",
        ),
        "access denied: check AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY or AWS_PROFILE",
    ),
    (
        (
            "error sending request",
            "CONNECTION_REFUSED",
            "Connection refused",
            "Could not connect",
            "timed out",
            "dns error",
            "Name or service not known",
            "HOST_NOT_FOUND",
        ),
        "the endpoint cannot be reached",
    ),
)


def parse_s3_url(location: str) -> Tuple[str, str]:
    """'s3://bucket/a/b/' -> ('bucket', 'a/b')."""
    if not location.startswith("s3://"):
        raise ValueError(f"not an s3:// URL: {location!r}")
    bucket, _, prefix = location[len("s3://") :].partition("/")
    return bucket, prefix.strip("/")


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
    def from_config(cls, bucket: str, prefix: str, storage: StorageLocation) -> "S3Settings":
        return cls(
            bucket=bucket,
            prefix=prefix,
            endpoint=storage.endpoint or None,
            region=storage.region,
            max_attempts=storage.max_attempts,
            timeout_s=storage.timeout_s,
            connect_timeout_s=storage.connect_timeout_s,
        )

    @property
    def url(self) -> str:
        return f"s3://{join_key(self.bucket, self.prefix)}"

    @property
    def where(self) -> str:
        return f"bucket {self.bucket!r} at {self.endpoint or 'AWS (region ' + self.region + ')'}"

    def key(self, key: str) -> str:
        return join_key(self.prefix, key)

    def list_prefix(self, prefix: str) -> str:
        full = self.key(prefix)
        return full + "/" if full else ""

    def relative_sorted(self, found: List[Tuple[str, int]]) -> List[Tuple[str, int]]:
        cut = len(self.prefix) + 1 if self.prefix else 0
        return sorted((key[cut:], size) for key, size in found)


def _reason(exc: BaseException) -> Optional[str]:
    text = str(exc).split("Debug source:")[0]  # obstore appends its config (retry_timeout: ...)
    for phrases, reason in _REASONS:
        if any(p.lower() in text.lower() for p in phrases):
            return reason
    return None


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [""])[0][:240]


class S3Store:
    """Shared error handling: a missing key stays FileNotFoundError (callers test for it);
    a store-level failure becomes StorageError."""

    client_name = ""

    def __init__(self, settings: S3Settings):
        self.settings = settings
        self.url = settings.url
        self.mode = self.client_name

    def _missing(self, exc: BaseException) -> bool:
        raise NotImplementedError

    def _call(self, operation: str, key: str, action: Callable[[], T], missing_key: Optional[bool] = True) -> T:
        try:
            return action()
        except StorageError:
            raise
        except Exception as exc:  # each client has its own exception tree
            reason = _reason(exc)
            if missing_key and reason != NO_BUCKET and self._missing(exc):
                raise FileNotFoundError(f"{self.settings.url}/{key}: no such object") from exc
            raise StorageError(
                f"S3 {operation} of {self.settings.key(key) or '/'!r} failed for {self.settings.where} "
                f"with client {self.client_name}: {reason or 'request failed'} "
                f"({type(exc).__name__}: {_first_line(exc)})"
            ) from exc

    def exists(self, key: str) -> bool:
        try:
            self._call("HEAD", key, lambda: self._head(key))
        except FileNotFoundError:
            return False
        return True

    def check_access(self) -> None:
        """One LIST request: a missing bucket, refused credentials or a dead endpoint fail here."""
        self._call("LIST", "", self._list_one, missing_key=False)

    # the ObjectStore operations, each client's own
    def get(self, key: str) -> bytes:
        raise NotImplementedError

    def get_range(self, key: str, start: int, length: int) -> bytes:
        raise NotImplementedError

    def put(self, key: str, data: bytes) -> None:
        raise NotImplementedError

    def list(self, prefix: str = "") -> List[Tuple[str, int]]:
        raise NotImplementedError

    def delete(self, key: str) -> None:
        raise NotImplementedError

    def _head(self, key: str) -> object:
        raise NotImplementedError

    def _list_one(self) -> None:
        raise NotImplementedError


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
