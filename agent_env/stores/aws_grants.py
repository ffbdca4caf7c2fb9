"""Grants on the S3 object store: presigned URLs (SigV4), which S3 itself checks. The signature covers the
method, the bucket and key and the expiry (and, for a PUT, the content type), so a URL cannot be turned to another
key or method and stops working when it expires. They carry a signature, never the access key's secret.

A namespace grant is a presigned POST (an upload policy): its signed conditions hold every key below the
namespace's root (which ends in '/', so `root` does not admit `root-evil/`) and each object's size; how many objects
and their total, which a policy cannot hold, whoever reads the namespace checks.

A presigned PUT cannot bound the size of what is uploaded (`bounds_writes` is False): whoever reads an object an
agent wrote checks its size against the grant's bound first (`check_written`).
"""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING

from agent_env.errors import BadInput
from agent_env.stores.grants import (
    DEFAULT_TTL_S,
    Grant,
    NamespaceGrant,
    NamespaceLimits,
    ObjectGrants,
    check_ttl,
)

if TYPE_CHECKING:
    from agent_env.stores.aws_objects import S3ObjectStore


class S3Grants(ObjectGrants):
    bounds_writes = False

    def __init__(self, store: S3ObjectStore) -> None:
        self.store = store

    def read(self, key: str, *, ttl_s: float = DEFAULT_TTL_S) -> Grant:
        url = self._presign("get_object", key, ttl_s)
        return Grant(method="GET", url=url, expires_at=_expiry(ttl_s), key=key)

    def write(self, key: str, *, media_type: str, max_bytes: int, ttl_s: float = DEFAULT_TTL_S) -> Grant:
        url = self._presign("put_object", key, ttl_s, ContentType=media_type)
        return Grant(
            method="PUT",
            url=url,
            headers={"content-type": media_type},
            expires_at=_expiry(ttl_s),
            key=key,
            max_bytes=max_bytes,
        )

    def namespace(self, root: str, *, limits: NamespaceLimits, ttl_s: float = DEFAULT_TTL_S) -> NamespaceGrant:
        root = root.rstrip("/")
        below = self.store.full_key(root) + "/"
        post = self.store.client.generate_presigned_post(
            Bucket=self.store.bucket,
            Key=below + "${filename}",  # the uploader names its own key (below the root: a signed condition)
            Conditions=[
                ["starts-with", "$key", below],
                ["content-length-range", 0, limits.max_object_bytes],
                ["starts-with", "$Content-Type", ""],  # a policy refuses fields it does not name
            ],
            ExpiresIn=max(1, int(check_ttl(ttl_s))),
        )
        fields = {k: v for k, v in post["fields"].items() if k != "key"}
        return NamespaceGrant(
            url=post["url"],
            fields=fields,
            expires_at=_expiry(ttl_s),
            root=root,
            root_path=below.rstrip("/"),
            limits=limits,
        )

    def size(self, key: str) -> int | None:
        from botocore.exceptions import ClientError

        try:
            head = self.store.client.head_object(Bucket=self.store.bucket, Key=self.store.full_key(key))
        except ClientError as e:
            if str(e.response.get("Error", {}).get("Code", "")) in {"404", "NoSuchKey", "NotFound"}:
                return None
            raise
        return int(head["ContentLength"])

    def _presign(self, operation: str, key: str, ttl_s: float, **params: str) -> str:
        store = self.store
        url: str = store.client.generate_presigned_url(
            operation,
            Params={"Bucket": store.bucket, "Key": store.full_key(key), **params},
            ExpiresIn=max(1, int(check_ttl(ttl_s))),
            HttpMethod="GET" if operation == "get_object" else "PUT",
        )
        return url


def check_written(size: int, grant: Grant) -> None:
    """Refuse an object an agent wrote through `grant` that is larger than the grant allowed."""
    if grant.max_bytes is not None and size > grant.max_bytes:
        raise BadInput(
            f"the object written at {grant.key!r} holds {size} bytes, more than its grant's {grant.max_bytes}",
            "the agent must write at most the size its grant names",
        )


def _expiry(ttl_s: float) -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=max(1, int(ttl_s)))
