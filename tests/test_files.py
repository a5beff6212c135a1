"""The file store: a local folder, or an S3-compatible bucket (moto's server on loopback)
that several hosts share, each with its own cache of it."""

from __future__ import annotations

import threading
import time

import pytest

from storage.files import FileStore, ObjectStore, StoreUnavailable
from tests.fakes.s3 import S3Server

KEYS = {"access_key": "test", "secret_key": "test"}


@pytest.fixture
def s3():
    import boto3
    server = S3Server()
    server.start()
    boto3.client("s3", endpoint_url=server.endpoint, region_name="us-east-1",
                 aws_access_key_id="test", aws_secret_access_key="test").create_bucket(
        Bucket="genbot")
    yield server
    server.stop()


def host(tmp_path, name: str, s3: S3Server, **kw) -> ObjectStore:
    return ObjectStore(tmp_path / name, bucket="genbot", prefix="studio/", endpoint=s3.endpoint,
                       **KEYS, **kw)


def test_one_host_writes_and_another_reads_through_its_own_cache(tmp_path, s3):
    worker, service = host(tmp_path, "gpu-host", s3), host(tmp_path, "bot-host", s3)
    worker.write("outputs/batch_1/SKU-1/2.png", b"png-bytes")
    assert not (tmp_path / "bot-host" / "outputs").exists()
    path = service.path("outputs/batch_1/SKU-1/2.png")
    assert path.read_bytes() == b"png-bytes" and path.is_relative_to(tmp_path / "bot-host")
    keys = [o["Key"] for o in service.s3.list_objects_v2(Bucket="genbot")["Contents"]]
    assert keys == ["studio/outputs/batch_1/SKU-1/2.png"]
    assert not service.path("outputs/batch_1/none.png").exists()  # not there: no file
    with pytest.raises(ValueError):
        service.path("../../etc/passwd")
    # An input stored once by content, wherever it came from.
    first = service.put_input(b"picture", ".png")
    assert worker.put_input(b"picture", ".png") == first
    assert worker.path(first).read_bytes() == b"picture"
    # Forgetting a batch removes it from the bucket and from the host that asks.
    assert service.delete_folder("outputs/batch_1")
    assert "Contents" not in service.s3.list_objects_v2(Bucket="genbot", Prefix="studio/outputs/")
    assert not (tmp_path / "bot-host" / "outputs" / "batch_1").exists()


def test_writes_wait_out_an_outage_of_the_store(tmp_path, s3):
    store = host(tmp_path, "gpu-host", s3)
    s3.stop()
    restarted = threading.Timer(2.0, s3.start)
    restarted.start()
    began = time.monotonic()
    store.write("outputs/batch_1/2.png", b"made during the outage")
    restarted.join()
    assert time.monotonic() - began >= 1.5  # it waited for the store, then wrote
    other = host(tmp_path, "bot-host", s3)
    assert other.path("outputs/batch_1/2.png").read_bytes() == b"made during the outage"


def test_a_store_that_stays_away_is_an_error_not_a_loss(tmp_path, s3):
    store = host(tmp_path, "gpu-host", s3, attempts=2)
    s3.stop()
    try:
        with pytest.raises(StoreUnavailable, match="cannot upload outputs/x.png"):
            store.write("outputs/x.png", b"x")
    finally:
        s3.start()


def test_the_local_folder_store(tmp_path):
    store = FileStore(tmp_path)
    assert store.write("a/b.png", b"1") == "a/b.png" and store.path("a/b.png").read_bytes() == b"1"
    assert store.delete("a/b.png") and not store.delete("a/b.png")
    with pytest.raises(ValueError):
        store.path("../x")


@pytest.mark.parametrize(("mask", "mode"), [(0o022, 0o644), (0o002, 0o664), (0o077, 0o600)])
def test_stored_files_follow_the_umask_so_a_team_can_open_them(tmp_path, mask, mode):
    import os

    from storage.files import umask
    before = os.umask(mask)
    try:
        assert umask() == mask
        store = FileStore(tmp_path / "store")
        store.write("batch_1/2.png", b"png")
        store.write("batch_1/results.xlsx", b"xlsx")
        for name in ("batch_1/2.png", "batch_1/results.xlsx"):
            assert (tmp_path / "store" / name).stat().st_mode & 0o777 == mode
    finally:
        os.umask(before)
