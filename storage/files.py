"""The file store: input images and outputs, behind one interface.

`FileStore`: a local folder (the default). `ObjectStore`: an S3-compatible bucket
(AWS S3, MinIO, Ceph …) that executors on many hosts write to and the service reads
from; each host keeps what it wrote or fetched in its own folder, so code that needs a
file on disk (pillow, an upload to chat) still gets a path.

Every local write is atomic (a temp file, then rename), so a crash never leaves half a
file under a name someone will read. Paths handed out are relative to the store's
root (object keys, less the prefix), so what the database records stays valid on any
host and if the folder moves. `open_store(config)` picks the one [storage] asks for.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from storage.config import Config, StorageConfig

T = TypeVar("T")

OUTPUTS = "outputs"


CONTACT, RESULTS = "contact.png", "results.xlsx"  # a batch's own files, beside its images


def batch_folder(batch_id: int) -> str:
    """Where a batch's files go in the store: its images (each under the name its
    template gives), contact.png and results.xlsx."""
    return f"{OUTPUTS}/batch_{batch_id}"


def name_in_batch(path: str) -> str:
    """The name a stored image has inside its batch's folder, the template's output
    pattern included ("A1/2.png" of "outputs/batch_3/A1/2.png"); any other path: its last
    part."""
    parts = path.split("/")
    if len(parts) > 2 and parts[0] == OUTPUTS and parts[1].startswith("batch_"):
        return "/".join(parts[2:])
    return parts[-1]


def picks_folder(batch_id: int) -> str:
    """Where a batch's picks go (its kept images' contact and results sheets): beside its
    outputs, never among them, and forgotten with them."""
    return f"picks/batch_{batch_id}"


def grids_folder(batch_id: int) -> str:
    """Where a sweep's grids go: beside its outputs, never among them."""
    return f"grids/batch_{batch_id}"


def reserved(name: str) -> str | None:
    """The batch file an image named `name` would overwrite (or be overwritten by), in
    any letter case (a case-insensitive disk or download folder holds one of them)."""
    return next((own for own in (CONTACT, RESULTS) if name.casefold() == own.casefold()),
                None)


def umask() -> int:
    """The process's umask, read without setting it (Linux: /proc/self/status); where that
    cannot be read, set and put straight back."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


class FileStore:
    def __init__(self, root: Path):
        self.root = Path(root)

    def path(self, relative: str) -> Path:
        """The file on this host, to read."""
        return self.local(relative)

    def local(self, relative: str) -> Path:
        """Where the file is (or would be) in this host's folder."""
        full = (self.root / relative).resolve()
        if not full.is_relative_to(self.root.resolve()):
            raise ValueError(f"{relative!r} is outside the file store")
        return full

    def write(self, relative: str, data: bytes) -> str:
        target = self.local(relative)
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".tmp-")
        try:
            # mkstemp makes the file -rw------- whatever the umask; an image, a contact
            # sheet or a results sheet is for the team to open (on a share, say), so it
            # gets the mode any other new file would: 0666 less the umask.
            os.fchmod(fd, 0o666 & ~umask())
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            Path(tmp).replace(target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return relative

    def delete(self, relative: str) -> bool:
        """Remove a file (e.g. an image once delivered, when auto_save is off)."""
        try:
            self.local(relative).unlink()
        except FileNotFoundError:
            return False
        return True

    def delete_folder(self, relative: str) -> bool:
        """Remove a folder and all in it (a forgotten batch's outputs)."""
        import shutil
        target = self.local(relative)
        if not target.is_dir():
            return False
        shutil.rmtree(target)
        return True

    def put_input(self, data: bytes, suffix: str = ".png") -> str:
        """Store an input file under its content hash: the same image is stored once."""
        relative = self.input_name(data, suffix)
        if not self.path(relative).exists():
            self.write(relative, data)
        return relative

    @staticmethod
    def mask_of(relative: str) -> str:
        """Where an input picture's transparency is kept beside it (white where opaque):
        the picture itself is stored opaque, so every reader sees what it always saw."""
        return relative.removesuffix(".png") + ".mask.png"

    @staticmethod
    def input_name(data: bytes, suffix: str = ".png") -> str:
        """Where put_input keeps `data`."""
        return f"inputs/{hashlib.sha256(data).hexdigest()}{suffix}"

    def has_input(self, data: bytes, suffix: str = ".png") -> bool:
        """These very bytes are stored already (put_input)."""
        return self.path(self.input_name(data, suffix)).exists()


class StoreUnavailable(OSError):
    """The object store did not answer through all its tries; the caller's work stays
    unrecorded (a job is retried, a delivery too)."""


def s3_client(endpoint: str, region: str, access_key: str, secret_key: str,
              attempts: int) -> Any:
    """A client of an S3-compatible service (AWS, MinIO, OSS …): path-style addresses,
    botocore retrying `attempts` times, backing off, while the service is away."""
    import boto3
    from botocore.config import Config as BotoConfig
    return boto3.client(
        "s3", endpoint_url=endpoint or None, region_name=region,
        aws_access_key_id=access_key or None, aws_secret_access_key=secret_key or None,
        config=BotoConfig(retries={"mode": "standard", "total_max_attempts": attempts},
                          connect_timeout=5, read_timeout=60, s3={"addressing_style": "path"}))


class ObjectStore(FileStore):
    """An S3-compatible bucket, with `root` as this host's cache of it.

    A write lands in the cache, then in the bucket before it returns (botocore retries
    while the store is away, backing off: `attempts`), so a job recorded as done has
    its image where every host can fetch it. `path` fetches what this host lacks.
    """

    def __init__(self, root: Path, *, bucket: str, prefix: str = "", endpoint: str = "",
                 region: str = "us-east-1", access_key: str = "", secret_key: str = "",
                 attempts: int = 10):
        super().__init__(root)
        self.bucket, self.prefix = bucket, prefix
        self.s3 = s3_client(endpoint, region, access_key, secret_key, attempts)

    def _key(self, relative: str) -> str:
        self.local(relative)  # refuses paths outside the store
        return f"{self.prefix}{relative}"

    def path(self, relative: str) -> Path:
        """The file on this host, fetched from the bucket if another host wrote it.
        (A key the bucket lacks gives a path that does not exist, as a folder would.)"""
        local = self.local(relative)
        if not local.exists():
            data = self._call("download", relative, lambda: self._get(relative))
            if data is not None:
                super().write(relative, data)
        return local

    def _get(self, relative: str) -> bytes | None:
        try:
            return self.s3.get_object(Bucket=self.bucket, Key=self._key(relative))["Body"].read()
        except self.s3.exceptions.NoSuchKey:
            return None

    def write(self, relative: str, data: bytes) -> str:
        super().write(relative, data)
        self._call("upload", relative, lambda: self.s3.put_object(
            Bucket=self.bucket, Key=self._key(relative), Body=data))
        return relative

    def delete(self, relative: str) -> bool:
        here = super().delete(relative)
        self._call("delete", relative, lambda: self.s3.delete_object(
            Bucket=self.bucket, Key=self._key(relative)))
        return here

    def delete_folder(self, relative: str) -> bool:
        here = super().delete_folder(relative)
        prefix = self._key(relative.rstrip("/") + "/")

        def remove() -> int:
            gone = 0
            for page in self.s3.get_paginator("list_objects_v2").paginate(
                    Bucket=self.bucket, Prefix=prefix):
                keys = [{"Key": o["Key"]} for o in page.get("Contents", [])]
                if keys:
                    self.s3.delete_objects(Bucket=self.bucket, Delete={"Objects": keys})
                    gone += len(keys)
            return gone
        return bool(self._call("delete", relative, remove)) or here

    def _call(self, what: str, relative: str, call: Callable[[], T]) -> T:
        from botocore.exceptions import BotoCoreError, ClientError
        try:
            return call()
        except (BotoCoreError, ClientError) as e:
            raise StoreUnavailable(f"object store: cannot {what} {relative}: {e}") from e


def open_store(config: Config) -> FileStore:
    """The store [storage] asks for, rooted (or cached) in data_dir."""
    s = config[StorageConfig]
    if s.backend == "s3":
        return ObjectStore(config.data_dir, bucket=s.bucket, prefix=s.prefix,
                           endpoint=s.endpoint, region=s.region, access_key=s.access_key,
                           secret_key=s.secret_key, attempts=s.attempts)
    return FileStore(config.data_dir)
