"""S3 object stores behind the ObjectStore interface of bench.storage.objects.

Three clients, picked by `storage.client`:
- obstore (default): Rust object_store, the fastest and leanest client here.
- s3torchconnector: the AWS CRT client PyTorch users on AWS run.
- boto3: the reference Python client (also what tests and admin work use).

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
import os
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Callable, Iterator, List, Mapping, Optional, Tuple, TypeVar

T = TypeVar("T")

NO_BUCKET = "the bucket does not exist"
# Phrases in the clients' error texts, mapped to what the user should hear.
_REASONS = (
    (("NoSuchBucket", "bucket does not exist"), NO_BUCKET),
    (("InvalidAccessKeyId", "SignatureDoesNotMatch", "AccessDenied", "403 Forbidden", "ExpiredToken",
      "Unauthenticated", "PermissionDenied", "credentials"),
     "access denied: check AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY or AWS_PROFILE"),
    (("error sending request", "CONNECTION_REFUSED", "Connection refused", "Could not connect",
      "timed out", "dns error", "Name or service not known", "HOST_NOT_FOUND"),
     "the endpoint cannot be reached"),
)


class StorageError(RuntimeError):
    """An object store that cannot be used; str() is the one sentence shown to the user."""


def parse_s3_url(location: str) -> Tuple[str, str]:
    """'s3://bucket/a/b/' -> ('bucket', 'a/b')."""
    if not location.startswith("s3://"):
        raise ValueError(f"not an s3:// URL: {location!r}")
    bucket, _, prefix = location[len("s3://"):].partition("/")
    return bucket, prefix.strip("/")


def join_key(*parts: str) -> str:
    return "/".join(p.strip("/") for p in parts if p and p.strip("/"))


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
    def from_config(cls, bucket: str, prefix: str, storage: Mapping[str, Any]) -> "S3Settings":
        return cls(bucket=bucket, prefix=prefix, endpoint=storage.get("endpoint") or None,
                   region=storage.get("region") or "us-east-1", max_attempts=int(storage.get("max_attempts", 5)),
                   timeout_s=float(storage.get("timeout_s", 60.0)),
                   connect_timeout_s=float(storage.get("connect_timeout_s", 5.0)))

    @property
    def url(self) -> str:
        return f"s3://{join_key(self.bucket, self.prefix)}"

    @property
    def where(self) -> str:
        return f"bucket {self.bucket!r} at {self.endpoint or 'AWS (region ' + self.region + ')'}"

    def key(self, key: str) -> str:
        return join_key(self.prefix, key)


def _reason(exc: BaseException) -> Optional[str]:
    text = str(exc).split("Debug source:")[0]  # obstore appends its config (retry_timeout: ...)
    for phrases, reason in _REASONS:
        if any(p.lower() in text.lower() for p in phrases):
            return reason
    return None


def _first_line(exc: BaseException) -> str:
    line = (str(exc).strip().splitlines() or [""])[0]
    return line[:240]


class _S3Store:
    """Shared error handling: a missing key stays FileNotFoundError (callers test for it);
    a store-level failure becomes StorageError."""

    client_name = ""

    def __init__(self, settings: S3Settings):
        self.settings = settings
        self.url = settings.url

    def _call(self, operation: str, key: str, action: Callable[[], T], missing_key: Callable[[BaseException], bool]
              ) -> T:
        try:
            return action()
        except StorageError:
            raise
        except Exception as exc:  # noqa: BLE001 - each client has its own exception tree
            reason = _reason(exc)
            if reason != NO_BUCKET and missing_key(exc):
                raise FileNotFoundError(f"{self.settings.url}/{key}: no such object") from exc
            raise StorageError(f"S3 {operation} of {self.settings.key(key) or '/'!r} failed for {self.settings.where} "
                               f"with client {self.client_name}: {reason or 'request failed'} "
                               f"({type(exc).__name__}: {_first_line(exc)})") from exc

    def check_access(self) -> None:
        """One LIST request: a missing bucket, refused credentials or a dead endpoint fail here."""
        self._call("LIST", "", self._list_one, lambda exc: False)

    def _list_one(self) -> None:
        raise NotImplementedError


# ---- obstore ---------------------------------------------------------------------------------


class ObstoreStore(_S3Store):
    client_name = "obstore"

    def __init__(self, settings: S3Settings):
        super().__init__(settings)
        import obstore
        from obstore.store import S3Store

        self._obstore = obstore
        options: dict = {"timeout": timedelta(seconds=settings.timeout_s),
                         "connect_timeout": timedelta(seconds=settings.connect_timeout_s)}
        config: dict = {"region": settings.region}
        if settings.endpoint:
            config.update(endpoint=settings.endpoint, virtual_hosted_style_request=False)
            options["allow_http"] = settings.endpoint.startswith("http://")
        retry = {"max_retries": settings.max_attempts - 1,
                 "retry_timeout": timedelta(seconds=settings.timeout_s * settings.max_attempts),
                 "backoff": {"init_backoff": timedelta(milliseconds=100), "max_backoff": timedelta(seconds=5),
                             "base": 2}}
        self._store = S3Store(settings.bucket, prefix=settings.prefix or None, config=config,
                              client_options=options, retry_config=retry,
                              credential_provider=_boto3_credentials_unless_in_env())

    def _missing(self, exc: BaseException) -> bool:
        return isinstance(exc, FileNotFoundError)

    def get(self, key: str) -> bytes:
        return self._call("GET", key, lambda: bytes(self._obstore.get(self._store, key).bytes()), self._missing)

    def get_range(self, key: str, start: int, length: int) -> bytes:
        return self._call("GET", key, lambda: bytes(self._obstore.get_range(self._store, key, start=start,
                                                                            length=length)), self._missing)

    def put(self, key: str, data: bytes) -> None:
        self._call("PUT", key, lambda: self._obstore.put(self._store, key, data), self._missing)

    def list(self, prefix: str = "") -> List[Tuple[str, int]]:
        def run() -> List[Tuple[str, int]]:
            stream = self._obstore.list(self._store, prefix=prefix or None)
            return sorted((meta["path"], meta["size"]) for meta in stream.collect())

        return self._call("LIST", prefix, run, lambda exc: False)

    def exists(self, key: str) -> bool:
        try:
            self._call("HEAD", key, lambda: self._obstore.head(self._store, key), self._missing)
        except FileNotFoundError:
            return False
        return True

    def _list_one(self) -> None:
        stream = self._obstore.list(self._store, chunk_size=1)
        next(iter(stream), None)


def _boto3_credentials_unless_in_env() -> Any:
    """obstore reads AWS_ACCESS_KEY_ID & co itself; for profiles, SSO and instance roles it
    borrows boto3's credential chain."""
    if os.environ.get("AWS_ACCESS_KEY_ID"):
        return None
    import boto3
    from obstore.auth.boto3 import Boto3CredentialProvider

    return Boto3CredentialProvider(boto3.Session())


# ---- boto3 -----------------------------------------------------------------------------------


def boto3_client(settings: S3Settings, max_pool_connections: int = 64) -> Any:
    """A boto3 S3 client with the store's endpoint, timeouts and retries (also for admin work)."""
    import boto3
    from botocore.config import Config

    config = Config(region_name=settings.region, connect_timeout=settings.connect_timeout_s,
                    read_timeout=settings.timeout_s, max_pool_connections=max_pool_connections,
                    retries={"max_attempts": settings.max_attempts, "mode": "standard"},
                    s3={"addressing_style": "path"} if settings.endpoint else None)
    return boto3.session.Session().client("s3", endpoint_url=settings.endpoint, config=config)


class Boto3Store(_S3Store):
    client_name = "boto3"

    def __init__(self, settings: S3Settings):
        super().__init__(settings)
        self._client = boto3_client(settings)

    @staticmethod
    def _missing(exc: BaseException) -> bool:
        code = getattr(exc, "response", {}).get("Error", {}).get("Code", "")
        return code in ("NoSuchKey", "404", "NotFound")

    def _get(self, key: str, **extra: Any) -> bytes:
        response = self._client.get_object(Bucket=self.settings.bucket, Key=self.settings.key(key), **extra)
        return response["Body"].read()

    def get(self, key: str) -> bytes:
        return self._call("GET", key, lambda: self._get(key), self._missing)

    def get_range(self, key: str, start: int, length: int) -> bytes:
        return self._call("GET", key, lambda: self._get(key, Range=f"bytes={start}-{start + length - 1}"),
                          self._missing)

    def put(self, key: str, data: bytes) -> None:
        self._call("PUT", key, lambda: self._client.put_object(Bucket=self.settings.bucket,
                                                               Key=self.settings.key(key), Body=data),
                   self._missing)

    def _pages(self, prefix: str) -> Iterator[dict]:
        paginator = self._client.get_paginator("list_objects_v2")
        return paginator.paginate(Bucket=self.settings.bucket, Prefix=_list_prefix(self.settings, prefix))

    def list(self, prefix: str = "") -> List[Tuple[str, int]]:
        def run() -> List[Tuple[str, int]]:
            found = [(obj["Key"], obj["Size"]) for page in self._pages(prefix) for obj in page.get("Contents", [])]
            return _relative_sorted(self.settings, found)

        return self._call("LIST", prefix, run, lambda exc: False)

    def exists(self, key: str) -> bool:
        try:
            self._call("HEAD", key, lambda: self._client.head_object(Bucket=self.settings.bucket,
                                                                     Key=self.settings.key(key)), self._missing)
        except FileNotFoundError:
            return False
        return True

    def _list_one(self) -> None:
        self._client.list_objects_v2(Bucket=self.settings.bucket, MaxKeys=1,
                                     Prefix=_list_prefix(self.settings, ""))


def _list_prefix(settings: S3Settings, prefix: str) -> str:
    full = settings.key(prefix)
    return full + "/" if full else ""


def _relative_sorted(settings: S3Settings, found: List[Tuple[str, int]]) -> List[Tuple[str, int]]:
    cut = len(settings.prefix) + 1 if settings.prefix else 0
    return sorted((key[cut:], size) for key, size in found)


# ---- s3torchconnector -------------------------------------------------------------------------


class S3TorchConnectorStore(_S3Store):
    """Writes go through its multipart writer, which some S3 look-alikes (moto) do not
    answer the way the CRT expects: prepare with obstore there, then read with this."""

    client_name = "s3torchconnector"

    def __init__(self, settings: S3Settings):
        super().__init__(settings)
        try:
            from s3torchconnector import S3ReaderConstructor
            from s3torchconnector._s3client import S3Client, S3ClientConfig
        except ImportError as exc:
            raise StorageError("storage.client=s3torchconnector needs the s3torchconnector package: "
                               "pip install 'bench[s3torch]'") from exc
        self._ranged = S3ReaderConstructor.range_based()
        config = S3ClientConfig(force_path_style=bool(settings.endpoint), max_attempts=settings.max_attempts)
        self._client = S3Client(settings.region, endpoint=settings.endpoint, s3client_config=config)

    @staticmethod
    def _missing(exc: BaseException) -> bool:
        return any(phrase in str(exc) for phrase in ("object was not found", "key does not exist", "NoSuchKey"))

    def get(self, key: str) -> bytes:
        return self._call("GET", key, lambda: self._client.get_object(self.settings.bucket,
                                                                      self.settings.key(key)).read(),
                          self._missing)

    def get_range(self, key: str, start: int, length: int) -> bytes:
        def run() -> bytes:
            reader = self._client.get_object(self.settings.bucket, self.settings.key(key),
                                             reader_constructor=self._ranged)
            reader.seek(start)
            return reader.read(length)

        return self._call("GET", key, run, self._missing)

    def put(self, key: str, data: bytes) -> None:
        def run() -> None:
            writer = self._client.put_object(self.settings.bucket, self.settings.key(key))
            writer.write(data)
            writer.close()

        self._call("PUT", key, run, self._missing)

    def list(self, prefix: str = "") -> List[Tuple[str, int]]:
        def run() -> List[Tuple[str, int]]:
            pages = self._client.list_objects(self.settings.bucket, _list_prefix(self.settings, prefix))
            return _relative_sorted(self.settings, [(o.key, o.size) for page in pages for o in page.object_info])

        return self._call("LIST", prefix, run, lambda exc: False)

    def exists(self, key: str) -> bool:
        try:
            self._call("HEAD", key, lambda: self._client.head_object(self.settings.bucket, self.settings.key(key)),
                       self._missing)
        except FileNotFoundError:
            return False
        return True

    def _list_one(self) -> None:
        next(iter(self._client.list_objects(self.settings.bucket, _list_prefix(self.settings, ""))), None)


CLIENTS = {"obstore": ObstoreStore, "boto3": Boto3Store, "s3torchconnector": S3TorchConnectorStore}


def require_credentials(settings: S3Settings) -> None:
    """Fail in one sentence when the AWS chain has nothing, instead of a client's slow
    instance-metadata probe and a cryptic signing error later."""
    import boto3

    logging.getLogger("botocore.credentials").setLevel(logging.WARNING)  # "Found credentials in ..." each time
    if boto3.Session().get_credentials() is None:
        raise StorageError(f"no AWS credentials found for {settings.where}: set AWS_ACCESS_KEY_ID and "
                           "AWS_SECRET_ACCESS_KEY (or AWS_PROFILE) in the environment")


def open_s3_store(location: str, storage: Mapping[str, Any]) -> _S3Store:
    """An ObjectStore for s3://bucket/prefix with the client, endpoint, region and retries of
    the storage config; checks access once (one LIST) so a bad setup fails here, clearly."""
    bucket, prefix = parse_s3_url(location)
    settings = S3Settings.from_config(bucket, prefix, storage)
    require_credentials(settings)
    store = CLIENTS[storage.get("client") or "obstore"](settings)
    store.check_access()
    return store
