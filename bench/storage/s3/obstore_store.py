"""storage.client=obstore (default): Rust object_store, the fastest and leanest client here."""

from __future__ import annotations

import os
from datetime import timedelta
from typing import TYPE_CHECKING, Any, List, Tuple

from bench.storage.s3 import S3Settings, S3Store

if TYPE_CHECKING:  # obstore's config types exist in its stubs only
    from obstore.store import ClientConfig, RetryConfig, S3Config


class ObstoreStore(S3Store):
    client_name = "obstore"

    def __init__(self, settings: S3Settings):
        super().__init__(settings)
        import obstore
        from obstore.store import S3Store as ObstoreS3

        self._obstore = obstore
        options: ClientConfig = {
            "timeout": timedelta(seconds=settings.timeout_s),
            "connect_timeout": timedelta(seconds=settings.connect_timeout_s),
        }
        s3_config: S3Config = {"region": settings.region}
        if settings.endpoint:
            s3_config["endpoint"] = settings.endpoint
            s3_config["virtual_hosted_style_request"] = False
            options["allow_http"] = settings.endpoint.startswith("http://")
        retry: RetryConfig = {  # one try: S3Store retries, saying so
            "max_retries": 0,
            "retry_timeout": timedelta(seconds=settings.timeout_s),
            "backoff": {"init_backoff": timedelta(milliseconds=100), "max_backoff": timedelta(seconds=5), "base": 2},
        }
        self._store = ObstoreS3(
            settings.bucket,
            prefix=settings.prefix or None,
            config=s3_config,
            client_options=options,
            retry_config=retry,
            credential_provider=_boto3_credentials_unless_in_env(),
        )

    def _missing(self, exc: BaseException) -> bool:
        return isinstance(exc, FileNotFoundError)

    def _get(self, key: str) -> bytes:
        return bytes(self._obstore.get(self._store, key).bytes())

    def _get_range(self, key: str, start: int, length: int) -> bytes:
        return bytes(self._obstore.get_range(self._store, key, start=start, length=length))

    def _put(self, key: str, data: bytes) -> None:
        self._obstore.put(self._store, key, data)

    def _list(self, prefix: str) -> List[Tuple[str, int]]:
        stream = self._obstore.list(self._store, prefix=prefix or None)
        return sorted((meta["path"], meta["size"]) for meta in stream.collect())

    def _delete(self, key: str) -> None:
        self._obstore.delete(self._store, key)

    def _head(self, key: str) -> Any:
        return self._obstore.head(self._store, key)


def _boto3_credentials_unless_in_env() -> Any:
    """obstore reads AWS_ACCESS_KEY_ID & co itself; for profiles, SSO and instance roles it
    borrows boto3's credential chain."""
    if os.environ.get("AWS_ACCESS_KEY_ID"):
        return None
    import boto3
    from obstore.auth.boto3 import Boto3CredentialProvider

    return Boto3CredentialProvider(boto3.Session())
