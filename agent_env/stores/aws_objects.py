"""Objects in one S3 bucket, under an optional prefix (several installs or teams can share a bucket).

`create` is S3's conditional write (`If-None-Match: *`): of racing creators exactly one succeeds. Large files go
through boto3's transfer manager, which streams them in multipart chunks; downloads land in a temp file that is
renamed into place, so a reader never sees half a file.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path
from typing import Any

from boto3.s3.transfer import TransferConfig
from botocore.exceptions import ClientError

from agent_env.errors import BadInput
from agent_env.stores.aws import error_code, refused
from agent_env.stores.aws_grants import S3Grants
from agent_env.stores.base import MissingObject, ObjectStore, check_object_key

_MISSING = {"NoSuchKey", "404", "NotFound"}
# 8 MiB parts, 3 in flight, a short write-behind queue on downloads: measured here at ~6 MiB of memory at peak
# whatever the file's size (boto3's defaults, 10 in flight and a 25 MiB queue, grow past 8 MiB).
_TRANSFER = TransferConfig(multipart_chunksize=8 << 20, max_concurrency=3, max_io_queue=16)


class S3ObjectStore(ObjectStore):
    def __init__(self, client: Any, bucket: str, prefix: str = "") -> None:
        self.client = client
        self.bucket = bucket
        self.prefix = prefix.strip("/") + "/" if prefix.strip("/") else ""
        if self.prefix:
            check_object_key(self.prefix.rstrip("/"))
        try:
            client.head_bucket(Bucket=bucket)
        except ClientError as e:
            if error_code(e) in {"404", "NoSuchBucket", "NotFound"}:
                raise BadInput(
                    f"the S3 bucket {bucket!r} does not exist (at {client.meta.endpoint_url})",
                    "create it, or fix [stores.objects] bucket in .agentenv/config.toml",
                ) from None
            raise refused(e, f"access to the S3 bucket {bucket!r}") from None

    def _key(self, key: str) -> str:
        return self.prefix + check_object_key(key)

    def full_key(self, key: str) -> str:
        """The S3 key of one of this store's keys (under its prefix)."""
        return self._key(key)

    def grants(self) -> S3Grants:
        """Presigned URLs for one object each (see `aws_grants`)."""
        return S3Grants(self)

    def _missing(self, key: str) -> MissingObject:
        return MissingObject(f"no object with key {key!r} in s3://{self.bucket}/{self.prefix}")

    def put(self, key: str, data: bytes) -> None:
        self.client.put_object(Bucket=self.bucket, Key=self._key(key), Body=data)

    def create(self, key: str, data: bytes) -> bool:
        try:
            self.client.put_object(Bucket=self.bucket, Key=self._key(key), Body=data, IfNoneMatch="*")
            return True
        except ClientError as e:
            # 412: the key exists. 409: another conditional write to it is in flight, and that one wins.
            if error_code(e) in {"PreconditionFailed", "ConditionalRequestConflict"}:
                return False
            raise refused(e, f"creating the object {key!r}") from None

    def get(self, key: str) -> bytes:
        try:
            body = self.client.get_object(Bucket=self.bucket, Key=self._key(key))["Body"]
        except ClientError as e:
            if error_code(e) in _MISSING:
                raise self._missing(key) from None
            raise refused(e, f"reading the object {key!r}") from None
        with contextlib.closing(body):
            return body.read()

    def exists(self, key: str) -> bool:
        try:
            self.client.head_object(Bucket=self.bucket, Key=self._key(key))
            return True
        except ClientError as e:
            if error_code(e) in _MISSING:
                return False
            raise

    def delete(self, key: str) -> bool:
        # S3 answers a delete the same whether or not the key existed: ask first (a racing delete may win).
        if not self.exists(key):
            return False
        self.client.delete_object(Bucket=self.bucket, Key=self._key(key))
        return True

    def list(self, prefix: str = "") -> list[str]:
        keys = []
        for page in self.client.get_paginator("list_objects_v2").paginate(
            Bucket=self.bucket, Prefix=self.prefix + prefix
        ):
            keys += [item["Key"][len(self.prefix) :] for item in page.get("Contents", [])]
        return sorted(keys)

    def put_file(self, key: str, path: Path) -> None:
        self.client.upload_file(str(path), self.bucket, self._key(key), Config=_TRANSFER)

    def get_file(self, key: str, path: Path) -> None:
        path, full_key = Path(path), self._key(key)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
        os.close(fd)
        try:
            self.client.download_file(self.bucket, full_key, tmp, Config=_TRANSFER)
            os.replace(tmp, path)
        except ClientError as e:
            if error_code(e) in _MISSING:
                raise self._missing(key) from None
            raise
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
