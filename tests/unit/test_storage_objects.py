"""The ObjectStore interface on every backend (local, direct-I/O local, S3 through obstore,
boto3 and s3torchconnector against a real HTTP server on 127.0.0.1), its retries and its
errors, and training checkpoints written through it."""

from __future__ import annotations

import http.client
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from bench.config import compose
from bench.config.storage import StorageConfig
from bench.errors import StorageError
from bench.storage.base import open_store
from bench.storage.local import DirectReadStore, LocalStore

S3_CLIENTS = ["obstore", "boto3", "s3torchconnector"]


def s3_config(endpoint: str, client: str, *extra: str) -> StorageConfig:
    """The storage group of `storage=s3 storage.endpoint=... storage.client=...` with short timeouts."""
    return compose(
        "storage=s3",
        f"storage.endpoint={endpoint}",
        f"storage.client={client}",
        "storage.max_attempts=3",
        "storage.timeout_s=10",
        "storage.connect_timeout_s=2",
        *extra,
    ).storage


def exercise(store, put) -> None:
    """put/get/get_range/list/exists on `store`; `put` writes an object (the store's own put,
    or an admin client's for a store whose writer the test server cannot serve)."""
    put("a/one.bin", b"0123456789")
    put("a/two.bin", b"xy")
    put("b/three.bin", b"")
    assert store.get("a/one.bin") == b"0123456789"
    assert store.get_range("a/one.bin", 3, 4) == b"3456"
    assert store.get("b/three.bin") == b""
    assert store.list() == [("a/one.bin", 10), ("a/two.bin", 2), ("b/three.bin", 0)]
    assert store.list("a") == [("a/one.bin", 10), ("a/two.bin", 2)]
    assert store.list("nothing-here") == []
    assert store.exists("a/two.bin") and not store.exists("a/nope.bin") and not store.exists("a")
    with pytest.raises(FileNotFoundError):
        store.get("a/nope.bin")


@pytest.mark.parametrize("direct", [False, True], ids=["posix", "direct_io"])
def test_local_store_round_trip(tmp_path, direct):
    store = open_store(str(tmp_path), compose(f"storage.direct_io={str(direct).lower()}").storage)
    assert isinstance(store, DirectReadStore) is direct
    assert store.url == str(tmp_path)
    exercise(store, store.put)


def test_direct_io_reads_unaligned_ranges_of_large_files(tmp_path):
    data = os.urandom(3 * 4096 + 123)
    LocalStore(tmp_path).put("big.bin", data)
    store = DirectReadStore(tmp_path)
    assert store.mode in ("o_direct", "fadvise_dontneed")  # Linux has both; which one depends on the filesystem
    assert store.get("big.bin") == data
    assert store.get_range("big.bin", 4095, 4099) == data[4095:8194]
    assert store.get_range("big.bin", len(data) - 5, 100) == data[-5:]


@pytest.mark.parametrize("client", S3_CLIENTS)
def test_s3_store_round_trip(s3_server, aws_env, client):
    bucket = s3_server.new_bucket()
    store = open_store(f"s3://{bucket}/run/data/", s3_config(s3_server.endpoint, client))
    assert store.url == f"s3://{bucket}/run/data"
    if client == "s3torchconnector":
        # its CRT multipart writer expects an ETag header moto's CompleteMultipartUpload does not send
        admin = s3_server.admin()

        def put(key, data):
            admin.put_object(Bucket=bucket, Key=f"run/data/{key}", Body=data)
    else:
        put = store.put
    exercise(store, put)
    # keys are relative to the prefix, and nothing lands outside it
    keys = [o["Key"] for o in s3_server.admin().list_objects_v2(Bucket=bucket)["Contents"]]
    assert sorted(keys) == ["run/data/a/one.bin", "run/data/a/two.bin", "run/data/b/three.bin"]


def test_s3_list_pages_past_a_thousand_keys(s3_server, aws_env):
    bucket = s3_server.new_bucket()
    admin = s3_server.admin()
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda i: admin.put_object(Bucket=bucket, Key=f"p/k{i:04d}", Body=b"x"), range(1005)))
    for client in ("obstore", "boto3"):
        listed = open_store(f"s3://{bucket}/p", s3_config(s3_server.endpoint, client)).list()
        assert len(listed) == 1005 and listed[0] == ("k0000", 1) and listed[-1] == ("k1004", 1)


@pytest.mark.parametrize("client", S3_CLIENTS)
def test_missing_bucket_is_one_clear_error(s3_server, aws_env, client):
    with pytest.raises(StorageError) as info:
        open_store("s3://no-such-bucket-here/x", s3_config(s3_server.endpoint, client))
    message = str(info.value)
    assert "the bucket does not exist" in message
    assert "'no-such-bucket-here'" in message and s3_server.endpoint in message and client in message
    assert "\n" not in message


@pytest.mark.parametrize("client", S3_CLIENTS)
def test_unreachable_endpoint_is_one_clear_error(aws_env, client):
    endpoint = f"http://127.0.0.1:{_closed_port()}"
    with pytest.raises(StorageError) as info:
        open_store("s3://some-bucket/x", s3_config(endpoint, client, "storage.max_attempts=1"))
    assert "the endpoint cannot be reached" in str(info.value) and endpoint in str(info.value)


def test_no_credentials_anywhere_is_one_clear_error(s3_server, monkeypatch, tmp_path):
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    with pytest.raises(StorageError, match=r"no AWS credentials found .* set AWS_ACCESS_KEY_ID"):
        open_store("s3://some-bucket/x", s3_config(s3_server.endpoint, "obstore"))


def _closed_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class FlakyProxy:
    """Forwards to the S3 server, but answers the first GET of each object with a 503."""

    def __init__(self, upstream: str):
        self.upstream = upstream.split("://", 1)[1]
        self.seen: list = []
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def _forward(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                proxy.seen.append((self.command, self.path))
                if (
                    self.command == "GET"
                    and "list-type" not in self.path
                    and proxy.seen.count((self.command, self.path)) == 1
                ):
                    self.send_response(503)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                conn = http.client.HTTPConnection(proxy.upstream, timeout=10)
                conn.request(self.command, self.path, body=body, headers=dict(self.headers))
                response = conn.getresponse()
                payload = response.read()
                self.send_response(response.status)
                for name, value in response.getheaders():
                    if name.lower() not in ("content-length", "transfer-encoding", "connection", "server", "date"):
                        self.send_header(name, value)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            do_GET = do_PUT = do_HEAD = do_POST = do_DELETE = _forward

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.mark.parametrize("client", S3_CLIENTS)
def test_transient_5xx_is_retried_and_said(s3_server, aws_env, client, caplog):
    bucket = s3_server.new_bucket()
    s3_server.admin().put_object(Bucket=bucket, Key="k/obj.bin", Body=b"payload")
    proxy = FlakyProxy(s3_server.endpoint)
    try:
        store = open_store(f"s3://{bucket}/k", s3_config(proxy.endpoint, client))
        with caplog.at_level("WARNING", logger="bench"):
            assert store.get("obj.bin") == b"payload"
        gets = [seen for seen in proxy.seen if seen[0] == "GET" and seen[1].endswith("/obj.bin")]
        assert len(gets) == 2  # the 503, then the retry that worked
        said = [r.getMessage() for r in caplog.records if "try 1 of 3" in r.getMessage()]  # as it happened
        if client == "s3torchconnector":  # the CRT retries inside, unsaid
            return
        (said,) = said
        assert "S3 GET of 'k/obj.bin' failed" in said and "503" in said and "trying again in 0.1 s" in said
    finally:
        proxy.close()


def _model_and_optimizer():
    import torch

    model = torch.nn.Linear(4, 2)
    return model, torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)


def test_training_checkpoint_goes_to_s3(s3_server, aws_env, tmp_path):
    import io

    import torch

    from bench.rank_context import RankContext
    from bench.train.resume import checkpoint_writer

    bucket = s3_server.new_bucket()
    config = compose(
        "storage=s3",
        f"storage.endpoint={s3_server.endpoint}",
        f"storage.bucket={bucket}",
        "storage.prefix=ckpt",
        "storage.save_checkpoint=true",
        "storage.checkpoint_name=model.pt",
    )
    model, optimizer = _model_and_optimizer()
    result = checkpoint_writer(config, tmp_path, RankContext())(model, optimizer)
    assert result.checkpoint_path == f"s3://{bucket}/ckpt/model.pt"
    body = s3_server.admin().get_object(Bucket=bucket, Key="ckpt/model.pt")["Body"].read()
    assert len(body) == result.checkpoint_bytes
    state = torch.load(io.BytesIO(body), weights_only=True)
    assert torch.equal(state["model"]["weight"], model.weight.detach())


def test_training_checkpoint_goes_to_the_run_dir_and_only_rank_0_writes(tmp_path: Path):
    import torch

    from bench.rank_context import RankContext
    from bench.train.resume import checkpoint_writer

    config = compose("storage.save_checkpoint=true", "storage.checkpoint_name=c.pt")
    assert checkpoint_writer(config, tmp_path, RankContext(rank=1, local_rank=1, world_size=2)) is None
    assert checkpoint_writer(compose(), tmp_path, RankContext()) is None  # not asked for
    result = checkpoint_writer(config, tmp_path, RankContext())(*_model_and_optimizer())
    assert Path(result.checkpoint_path) == tmp_path / "c.pt"
    assert result.checkpoint_bytes == (tmp_path / "c.pt").stat().st_size > 0
    assert "weight" in torch.load(tmp_path / "c.pt", weights_only=True)["model"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.pt"]  # written whole: no temporary left


def test_a_failed_local_write_leaves_nothing_behind(tmp_path):
    store = LocalStore(tmp_path)
    (tmp_path / "taken").mkdir()  # a directory where the object should go: the rename fails
    with pytest.raises(OSError):
        store.put("taken", b"data")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["taken"]


@pytest.mark.parametrize("client", ["obstore", "boto3"])
def test_credentials_from_a_profile_file(s3_server, monkeypatch, tmp_path, client):
    """No AWS_* keys in the environment: the shared credentials file's profile is used."""
    bucket = s3_server.new_bucket()  # before the environment changes under boto3's default session
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    credentials = tmp_path / "credentials"
    credentials.write_text(
        f"[bench]\naws_access_key_id = {s3_server.credentials['AWS_ACCESS_KEY_ID']}\n"
        f"aws_secret_access_key = {s3_server.secret}\n"
    )
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(credentials))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_PROFILE", "bench")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    store = open_store(f"s3://{bucket}/p", s3_config(s3_server.endpoint, client))
    store.put("k", b"from a profile")
    assert store.get("k") == b"from a profile"
