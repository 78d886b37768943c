"""storage.client=boto3: the reference Python client (also what tests and admin work use), and
the endpoint check every S3 store makes first, whatever its client."""

from __future__ import annotations

from typing import Any, List, Optional, Tuple

from bench.storage.s3 import S3Settings, S3Store


def boto3_client(settings: S3Settings, max_pool_connections: int = 64, attempts: Optional[int] = None) -> Any:
    """A boto3 S3 client with the store's endpoint and timeouts; `attempts` tries per request
    (default storage.max_attempts; a store's client makes one: S3Store retries, saying so)."""
    import boto3
    from botocore.config import Config

    config = Config(
        region_name=settings.region,
        connect_timeout=settings.connect_timeout_s,
        read_timeout=settings.timeout_s,
        max_pool_connections=max_pool_connections,
        retries={"total_max_attempts": attempts or settings.max_attempts, "mode": "standard"},  # the first included
        s3={"addressing_style": "path"} if settings.endpoint else None,
    )
    return boto3.session.Session().client("s3", endpoint_url=settings.endpoint, config=config)


def check_endpoint(settings: S3Settings, client: str) -> None:
    """One LIST of at most one key, once, with storage.connect_timeout_s to connect and to answer,
    before any long work: a missing bucket, refused credentials, an endpoint that refuses or
    never answers fail here in seconds (a request of the run waits storage.timeout_s for large
    transfers, storage.max_attempts times). Made with boto3 whatever the store's client (the
    CRT of s3torchconnector has no timeout to set)."""
    checker = Boto3Store(settings.checking())
    checker.client_name = (
        f"{client} (its endpoint check, by boto3: one request, "
        f"storage.connect_timeout_s={settings.connect_timeout_s:g} s)"
    )
    checker._call("LIST", "", checker._list_one, missing_key=False)


class Boto3Store(S3Store):
    client_name = "boto3"

    def __init__(self, settings: S3Settings):
        super().__init__(settings)
        self._client = boto3_client(settings, attempts=1)

    def _missing(self, exc: BaseException) -> bool:
        return getattr(exc, "response", {}).get("Error", {}).get("Code", "") in ("NoSuchKey", "404", "NotFound")

    def _get(self, key: str, **extra: Any) -> bytes:
        return self._client.get_object(Bucket=self.settings.bucket, Key=self.settings.key(key), **extra)["Body"].read()

    def _get_range(self, key: str, start: int, length: int) -> bytes:
        return self._get(key, Range=f"bytes={start}-{start + length - 1}")

    def _put(self, key: str, data: bytes) -> None:
        self._client.put_object(Bucket=self.settings.bucket, Key=self.settings.key(key), Body=data)

    def _list(self, prefix: str) -> List[Tuple[str, int]]:
        pages = self._client.get_paginator("list_objects_v2").paginate(
            Bucket=self.settings.bucket, Prefix=self.settings.list_prefix(prefix)
        )
        found = [(obj["Key"], obj["Size"]) for page in pages for obj in page.get("Contents", [])]
        return self.settings.relative_sorted(found)

    def _delete(self, key: str) -> None:
        self._client.delete_object(Bucket=self.settings.bucket, Key=self.settings.key(key))

    def _head(self, key: str) -> Any:
        return self._client.head_object(Bucket=self.settings.bucket, Key=self.settings.key(key))

    def _list_one(self) -> None:
        self._client.list_objects_v2(Bucket=self.settings.bucket, MaxKeys=1, Prefix=self.settings.list_prefix(""))
