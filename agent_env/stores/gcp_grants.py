"""Grants on the Cloud Storage object store: V4 signed URLs, which Cloud Storage checks. The signature covers the
method, the bucket and object, the expiry (at most 7 days, ours minutes) and, for a PUT, the content type; it
carries no key. Signing needs credentials that can sign (a service account's key, or one that signs through IAM);
a store whose credentials cannot says so when a grant is asked for.

A namespace grant is a V4 POST policy, built here: the client library's helper adds a condition on one exact key,
which would confine it to one object. Its signed conditions hold every key below the namespace's root (ending in
'/') and each object's size; how many objects and their total, whoever reads the namespace checks.

A signed PUT cannot bound the size of what is uploaded (`bounds_writes` is False): whoever reads an object an
agent wrote checks its size against the grant's bound first.
"""

from __future__ import annotations

import base64
import datetime
import json
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

_ALGORITHM = "GOOG4-RSA-SHA256"

if TYPE_CHECKING:
    from agent_env.stores.gcp_objects import GcsObjectStore


class GcsGrants(ObjectGrants):
    bounds_writes = False

    def __init__(self, store: GcsObjectStore) -> None:
        self.store = store

    def read(self, key: str, *, ttl_s: float = DEFAULT_TTL_S) -> Grant:
        return Grant(method="GET", url=self._sign(key, "GET", ttl_s), expires_at=_expiry(ttl_s), key=key)

    def write(self, key: str, *, media_type: str, max_bytes: int, ttl_s: float = DEFAULT_TTL_S) -> Grant:
        return Grant(
            method="PUT",
            url=self._sign(key, "PUT", ttl_s, content_type=media_type),
            headers={"content-type": media_type},
            expires_at=_expiry(ttl_s),
            key=key,
            max_bytes=max_bytes,
        )

    def namespace(self, root: str, *, limits: NamespaceLimits, ttl_s: float = DEFAULT_TTL_S) -> NamespaceGrant:
        root = root.rstrip("/")
        below = self.store.blob(root).name + "/"
        credentials = self.store.client._credentials
        email, sign = getattr(credentials, "signer_email", None), getattr(credentials, "sign_bytes", None)
        if not email or not callable(sign):
            raise BadInput(
                "the Cloud Storage store's credentials cannot sign, so it issues no upload policies",
                "give the store a service account's credentials (GOOGLE_APPLICATION_CREDENTIALS), which can sign",
            )
        now = datetime.datetime.now(datetime.UTC).replace(microsecond=0)
        stamp = now.strftime("%Y%m%dT%H%M%SZ")
        credential = f"{email}/{now:%Y%m%d}/auto/storage/goog4_request"
        bucket = self.store.bucket.name
        document = {
            "conditions": [
                ["starts-with", "$key", below],
                ["content-length-range", 0, limits.max_object_bytes],
                ["starts-with", "$Content-Type", ""],
                {"bucket": bucket},
                {"x-goog-date": stamp},
                {"x-goog-credential": credential},
                {"x-goog-algorithm": _ALGORITHM},
            ],
            "expiration": (now + datetime.timedelta(seconds=max(1, int(check_ttl(ttl_s))))).strftime(
                "%Y-%m-%dT%H:%M:%SZ"
            ),
        }
        policy = base64.b64encode(json.dumps(document, separators=(",", ":")).encode())
        fields = {
            "policy": policy.decode(),
            "x-goog-algorithm": _ALGORITHM,
            "x-goog-credential": credential,
            "x-goog-date": stamp,
            "x-goog-signature": sign(policy).hex(),
        }
        return NamespaceGrant(
            url=f"{self.store.client.api_endpoint}/{bucket}/",
            fields=fields,
            expires_at=_expiry(ttl_s),
            root=root,
            root_path=below.rstrip("/"),
            limits=limits,
        )

    def size(self, key: str) -> int | None:
        blob = self.store.bucket.get_blob(self.store.blob(key).name)
        return None if blob is None else int(blob.size)

    def _sign(self, key: str, method: str, ttl_s: float, content_type: str | None = None) -> str:
        blob = self.store.blob(key)
        try:
            url: str = blob.generate_signed_url(
                version="v4",
                expiration=datetime.timedelta(seconds=max(1, int(check_ttl(ttl_s)))),
                method=method,
                content_type=content_type,
            )
        except AttributeError as e:  # google-auth: "you need a private key to sign credentials"
            raise BadInput(
                f"the Cloud Storage store's credentials cannot sign URLs, so it issues no transfer grants ({e})",
                "give the store a service account's credentials (GOOGLE_APPLICATION_CREDENTIALS), which can sign",
            ) from None
        return url


def _expiry(ttl_s: float) -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=max(1, int(ttl_s)))
