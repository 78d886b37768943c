"""storage.client=s3torchconnector: the AWS CRT client PyTorch users on AWS run
(pip install 'bench[s3torch]').

Writes go through its multipart writer, which some S3 look-alikes (moto) do not answer the
way the CRT expects: prepare with obstore there, then read with this.
"""

from __future__ import annotations

from typing import Any, List, Tuple

from bench.errors import StorageError
from bench.storage.s3 import S3Settings, S3Store


class S3TorchConnectorStore(S3Store):
    client_name = "s3torchconnector"
    retries_itself = True  # the CRT retries a 503 even when told to try once: its retries go unsaid

    def __init__(self, settings: S3Settings):
        super().__init__(settings)
        try:
            from s3torchconnector import S3ReaderConstructor
            from s3torchconnector._s3client import S3Client, S3ClientConfig
        except ImportError as exc:
            raise StorageError(
                "storage.client=s3torchconnector needs the s3torchconnector package: pip install 'bench[s3torch]'"
            ) from exc
        self._ranged = S3ReaderConstructor.range_based()
        config = S3ClientConfig(force_path_style=bool(settings.endpoint), max_attempts=settings.max_attempts)
        self._client = S3Client(settings.region, endpoint=settings.endpoint, s3client_config=config)

    def _missing(self, exc: BaseException) -> bool:
        return any(phrase in str(exc) for phrase in ("object was not found", "key does not exist", "NoSuchKey"))

    def _get(self, key: str) -> bytes:
        return self._client.get_object(self.settings.bucket, self.settings.key(key)).read()

    def _get_range(self, key: str, start: int, length: int) -> bytes:
        reader = self._client.get_object(self.settings.bucket, self.settings.key(key), reader_constructor=self._ranged)
        reader.seek(start)
        return reader.read(length)

    def _put(self, key: str, data: bytes) -> None:
        writer = self._client.put_object(self.settings.bucket, self.settings.key(key))
        writer.write(data)
        writer.close()

    def _list(self, prefix: str) -> List[Tuple[str, int]]:
        pages = self._client.list_objects(self.settings.bucket, self.settings.list_prefix(prefix))
        return self.settings.relative_sorted([(o.key, o.size) for page in pages for o in page.object_info])

    def _delete(self, key: str) -> None:
        self._client.delete_object(self.settings.bucket, self.settings.key(key))

    def _head(self, key: str) -> Any:
        return self._client.head_object(self.settings.bucket, self.settings.key(key))
