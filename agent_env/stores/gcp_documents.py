"""Documents in Firestore: each store collection is a root collection `<prefix><collection>` (default prefix
`agentenv_`), each document a Firestore document holding its key in `k` and the document as JSON text in `d`.

Why root collections under a prefix, not one root document with subcollections: a store collection is then a
plain Firestore collection, listed, exported and secured by its own name, and installs share a database the way
they share a DynamoDB table, by prefix. Why JSON text, not Firestore fields: Firestore's types are not JSON's
(no arrays of arrays, 64-bit integers only), and a document must come back exactly as it was stored.

Key order and `key_prefix` are Firestore's own (an order on `k`, a range on `k`; strings compare as UTF-8 bytes,
as in SQLite and DynamoDB), on the single-field index Firestore keeps for every field: no composite index to
create. Filters, ordering and pages run in stores/scanned.py, on the documents Firestore streams: a query without
`order_by` stops reading once it has `limit` matches; one with `order_by` reads the collection's matching
documents once (a registry's collections are small; the store keeps no index). The document ID is the key with
`%` and `/` escaped, so any key of 1 to 1024 bytes is a valid ID.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from google.api_core import exceptions
from google.api_core.retry import Retry
from google.cloud.firestore import FieldFilter, Query

from agent_env.errors import BadInput
from agent_env.stores.base import Document, check_collection
from agent_env.stores.gcp import explained
from agent_env.stores.scanned import ScannedDocumentStore

# Transient failures are retried for 30 s at most (the SDK's default for reads is minutes: too long to learn that
# an endpoint is wrong); each call, a stream included, has 60 s.
_RETRY = Retry(initial=0.25, maximum=4.0, multiplier=2.0, timeout=30.0)
_CALL = {"retry": _RETRY, "timeout": 60.0}


class FirestoreDocumentStore(ScannedDocumentStore):
    def __init__(self, client: Any, prefix: str = "agentenv_", *, address: str = "firestore.googleapis.com") -> None:
        if prefix and not prefix.replace("_", "a").replace("-", "a").isalnum():
            raise BadInput(
                f"[stores.documents] prefix {prefix!r} is not a collection prefix",
                "use letters, digits, '_' and '-', like 'agentenv_'",
            )
        self.client = client
        self.prefix = prefix
        self.address = address

    def _explained(self, what: str) -> Any:
        return explained("Firestore", self.address, what)

    def _collection(self, collection: str) -> Any:
        return self.client.collection(self.prefix + check_collection(collection))

    def _ref(self, collection: str, key: str) -> Any:
        return self._collection(collection).document(_document_id(key))

    def put(self, collection: str, key: str, doc: Document) -> None:
        ref = self._ref(collection, key)
        with self._explained(f"storing {collection}/{key}"):
            ref.set({"k": key, "d": json.dumps(doc, default=str)}, **_CALL)

    def create(self, collection: str, key: str, doc: Document) -> bool:
        ref = self._ref(collection, key)
        with self._explained(f"creating {collection}/{key}"):
            try:
                ref.create({"k": key, "d": json.dumps(doc, default=str)}, **_CALL)
                return True
            except exceptions.AlreadyExists:
                return False

    def get(self, collection: str, key: str) -> Document | None:
        ref = self._ref(collection, key)
        with self._explained(f"reading {collection}/{key}"):
            snapshot = ref.get(**_CALL)
        return json.loads(snapshot.to_dict()["d"]) if snapshot.exists else None

    def delete(self, collection: str, key: str) -> bool:
        ref = self._ref(collection, key)
        with self._explained(f"deleting {collection}/{key}"):
            try:  # the precondition makes Firestore say whether there was one (a plain delete never does)
                ref.delete(option=self.client.write_option(exists=True), **_CALL)
                return True
            except exceptions.NotFound:
                return False

    def _scan(
        self, collection: str, key_prefix: str | None, descending: bool, after_key: str | None
    ) -> Iterator[tuple[str, Document]]:
        """(key, doc) of a collection in key order, as Firestore streams them."""
        query = self._collection(collection).order_by(
            "k", direction=Query.DESCENDING if descending else Query.ASCENDING
        )
        if key_prefix:
            query = query.where(filter=FieldFilter("k", ">=", key_prefix))
            if (end := _successor(key_prefix)) is not None:
                query = query.where(filter=FieldFilter("k", "<", end))
        if after_key is not None:
            query = query.start_after({"k": after_key})
        with self._explained(f"reading the collection {collection!r}"):
            for snapshot in query.stream(**_CALL):
                item = snapshot.to_dict()
                yield item["k"], json.loads(item["d"])


def _document_id(key: str) -> str:
    """Firestore's document IDs cannot contain '/', be '.' or '..', or look like `__x__`: escape '%' and '/',
    and '.' and '_' where they would make such an ID. Distinct keys get distinct IDs."""
    if not isinstance(key, str) or not key or len(key.encode()) > 1024:
        raise BadInput(f"document key {key!r} must be 1 to 1024 bytes", "use keys like a run id or 'name@version'")
    escaped = key.replace("%", "%25").replace("/", "%2F")
    if escaped in (".", "..") or (escaped.startswith("__") and escaped.endswith("__")):
        escaped = "%" + escaped.encode().hex()  # '%' followed by hex never comes out of the escaping above
    if len(escaped.encode()) > 1500:
        raise BadInput(f"document key {key[:40]!r}... has too many '/' and '%' for a Firestore ID", "use a shorter key")
    return escaped


def _successor(prefix: str) -> str | None:
    """The least string above every string that starts with `prefix` (None: there is none)."""
    while prefix and ord(prefix[-1]) == 0x10FFFF:
        prefix = prefix[:-1]
    return prefix[:-1] + chr(ord(prefix[-1]) + 1) if prefix else None
