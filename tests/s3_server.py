"""A real S3 endpoint for the storage tests: moto's server on 127.0.0.1 (real HTTP, real
signing), one per test module that asks for it, plus the fake credentials to talk to it."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Dict, Iterator

import pytest

# Fake, but distinctive: the no-secret-in-any-output test greps for this value.
SECRET = "bench-test-secret-9f3c2e71d4"
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "benchtestkey", "AWS_SECRET_ACCESS_KEY": SECRET, "AWS_DEFAULT_REGION": "us-east-1"}


@dataclass
class S3Server:
    endpoint: str

    def admin(self):
        import boto3

        # a session of its own: boto3's default one caches whatever environment it first saw
        session = boto3.session.Session(aws_access_key_id=CREDENTIALS["AWS_ACCESS_KEY_ID"],
                                        aws_secret_access_key=SECRET, region_name="us-east-1")
        return session.client("s3", endpoint_url=self.endpoint)

    def new_bucket(self) -> str:
        name = f"bench-{uuid.uuid4().hex[:12]}"
        self.admin().create_bucket(Bucket=name)
        return name

    def overrides(self, bucket: str, *extra: str) -> list:
        return ["storage=s3", f"storage.endpoint={self.endpoint}", f"storage.bucket={bucket}", *extra]


def s3_env(**extra: str) -> Dict[str, str]:
    return {**CREDENTIALS, **extra}


@pytest.fixture(scope="module")
def s3_server() -> Iterator[S3Server]:
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield S3Server(f"http://{host}:{port}")
    finally:
        server.stop()
