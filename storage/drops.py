"""Where shipped files land outside genbot: a shared folder, an S3-compatible bucket.

A drop takes a file by its key (`batch_7/taobao/A1_taobao_1.jpg`) and says where it put
it. Putting the same key again replaces the file with the same bytes: a delivery that
runs twice (after a crash) leaves one copy. A folder's file is written beside its place
and renamed into it, so an uploader watching the folder never picks up half a file.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path, PurePosixPath
from typing import Protocol


class Drop(Protocol):
    def put(self, key: str, data: bytes) -> str:
        """Write `data` under `key`; where it is now (a path, an s3:// URL)."""


def _checked(key: str) -> PurePosixPath:
    path = PurePosixPath(key)
    if path.is_absolute() or ".." in path.parts or not path.parts:
        raise ValueError(f"not a key inside a drop: {key!r}")
    return path


class FolderDrop:
    def __init__(self, root: str | Path):
        self.root = Path(root)

    def put(self, key: str, data: bytes) -> str:
        target = self.root.joinpath(*_checked(key).parts)
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".part-")
        try:
            with os.fdopen(fd, "wb") as out:
                out.write(data)
            Path(tmp).replace(target)
        finally:
            Path(tmp).unlink(missing_ok=True)
        return str(target)


class BucketDrop:
    """An S3-compatible bucket (AWS, MinIO, OSS …), `prefix` before every key."""

    def __init__(self, bucket: str, *, prefix: str = "", endpoint: str = "",
                 region: str = "us-east-1", access_key: str = "", secret_key: str = "",
                 attempts: int = 10):
        from storage.files import s3_client
        self.bucket, self.prefix = bucket, prefix
        self.s3 = s3_client(endpoint, region, access_key, secret_key, attempts)

    def put(self, key: str, data: bytes) -> str:
        from botocore.exceptions import BotoCoreError, ClientError

        from storage.files import StoreUnavailable
        full = f"{self.prefix}{_checked(key)}"
        try:
            self.s3.put_object(Bucket=self.bucket, Key=full, Body=data)
        except (BotoCoreError, ClientError) as e:
            raise StoreUnavailable(f"delivery bucket: cannot put {full}: {e}") from e
        return f"s3://{self.bucket}/{full}"
