"""Objects in one Cloud Storage bucket, under an optional prefix (several installs or teams can share a bucket).

`create` is a write with the precondition `ifGenerationMatch=0` ("no live object at this name"): of racing
creators exactly one succeeds. Files are uploaded in 2 MiB resumable chunks and downloaded as one stream, so
neither holds a whole file in memory; downloads land in a temp file that is renamed into place, so a reader
never sees half a file.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path
from typing import Any

from google.api_core import exceptions

from agent_env.errors import BadInput
from agent_env.stores.base import MissingObject, ObjectStore, check_object_key
from agent_env.stores.gcp_grants import GcsGrants

# Resumable upload chunks (a multiple of 256 KiB). Measured here: ~2x the chunk at peak, so 4 MiB per upload.
_UPLOAD_CHUNK = 2 << 20


class GcsObjectStore(ObjectStore):
    def __init__(self, client: Any, bucket: str, prefix: str = "") -> None:
        self.client = client
        self.bucket = client.bucket(bucket)
        self.prefix = prefix.strip("/") + "/" if prefix.strip("/") else ""
        if self.prefix:
            check_object_key(self.prefix.rstrip("/"))
        address = client.api_endpoint
        try:
            self.bucket.reload(timeout=10, retry=None)  # once, unretried: a wrong address fails fast
        except exceptions.NotFound:
            raise BadInput(
                f"the Cloud Storage bucket {bucket!r} does not exist (at {address})",
                "create it, or fix [stores.objects] bucket in .agentenv/config.toml",
            ) from None
        except exceptions.GoogleAPICallError as e:
            raise BadInput(
                f"Google Cloud Storage refused access to the bucket {bucket!r}: {e.message}",
                "check the bucket's name and the IAM permissions (roles/storage.objectUser)",
            ) from None
        except OSError as e:  # requests' connection errors are OSErrors
            raise BadInput(
                f"cannot reach Google Cloud Storage at {address}: {e}",
                "check the network, and [stores.objects] endpoint_url in .agentenv/config.toml",
            ) from None

    def _blob(self, key: str, chunk_size: int | None = None) -> Any:
        return self.bucket.blob(self.prefix + check_object_key(key), chunk_size=chunk_size)

    def blob(self, key: str) -> Any:
        """The Cloud Storage object of one of this store's keys (under its prefix)."""
        return self._blob(key)

    def grants(self) -> GcsGrants:
        """V4 signed URLs for one object each (see `gcp_grants`)."""
        return GcsGrants(self)

    def _missing(self, key: str) -> MissingObject:
        return MissingObject(f"no object with key {key!r} in gs://{self.bucket.name}/{self.prefix}")

    def put(self, key: str, data: bytes) -> None:
        self._blob(key).upload_from_string(data, content_type="application/octet-stream")

    def create(self, key: str, data: bytes) -> bool:
        try:
            self._blob(key).upload_from_string(data, content_type="application/octet-stream", if_generation_match=0)
            return True
        except exceptions.PreconditionFailed:
            return False

    def get(self, key: str) -> bytes:
        try:
            return bytes(self._blob(key).download_as_bytes())
        except exceptions.NotFound:
            raise self._missing(key) from None

    def exists(self, key: str) -> bool:
        return bool(self._blob(key).exists())

    def delete(self, key: str) -> bool:
        try:
            self._blob(key).delete()
            return True
        except exceptions.NotFound:
            return False

    def list(self, prefix: str = "") -> list[str]:
        blobs = self.client.list_blobs(self.bucket, prefix=self.prefix + prefix)
        return sorted(blob.name[len(self.prefix) :] for blob in blobs)

    def put_file(self, key: str, path: Path) -> None:
        self._blob(key, _UPLOAD_CHUNK).upload_from_filename(str(path), content_type="application/octet-stream")

    def get_file(self, key: str, path: Path) -> None:
        path, blob = Path(path), self._blob(key)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
        os.close(fd)
        try:
            blob.download_to_filename(tmp)
            os.replace(tmp, path)
        except exceptions.NotFound:
            raise self._missing(key) from None
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
