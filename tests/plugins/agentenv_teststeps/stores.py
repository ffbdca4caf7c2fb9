"""A document store in memory, registered as the store backend "memory" through the `agent_env.stores`
entry-point group: proves a plugin backend opens from the config, and that the base class's offset paging
meets the conformance suite."""

from __future__ import annotations

import copy
import json
import threading
from typing import Any

from agent_env.errors import BadInput
from agent_env.stores.base import DocumentStore, check_collection, check_field, check_where, field_value


class MemoryDocumentStore(DocumentStore):
    def __init__(self, name: str = "") -> None:
        self.name = name
        self._docs: dict[tuple[str, str], dict[str, Any]] = {}
        self._lock = threading.Lock()

    def put(self, collection: str, key: str, doc: dict[str, Any]) -> None:
        with self._lock:
            self._docs[check_collection(collection), key] = copy.deepcopy(doc)

    def create(self, collection: str, key: str, doc: dict[str, Any]) -> bool:
        with self._lock:
            if (check_collection(collection), key) in self._docs:
                return False
            self._docs[collection, key] = copy.deepcopy(doc)
            return True

    def get(self, collection: str, key: str) -> dict[str, Any] | None:
        with self._lock:
            doc = self._docs.get((check_collection(collection), key))
        return copy.deepcopy(doc)

    def delete(self, collection: str, key: str) -> bool:
        with self._lock:
            return self._docs.pop((check_collection(collection), key), None) is not None

    def query(self, collection, *, where=None, key_prefix=None, order_by=None, descending=False, limit=None):
        check_collection(collection)
        where = check_where(where)
        with self._lock:
            rows = [
                (key, doc)
                for (c, key), doc in self._docs.items()
                if c == collection
                and key.startswith(key_prefix or "")
                and all(field_value(doc, f) == v for f, v in where.items())
            ]
        field = check_field(order_by) if order_by else None
        rows.sort(key=lambda row: (_rank(field_value(row[1], field)) if field else (0, 0), row[0]), reverse=descending)
        return [copy.deepcopy(doc) for _, doc in rows[:limit]]


def _rank(value: Any) -> tuple[int, Any]:
    """The order SQLite gives JSON values: missing or null, then numbers (bools as 0/1), then text."""
    if value is None:
        return (0, 0)
    if isinstance(value, bool | int | float):
        return (1, float(value))
    return (2, value if isinstance(value, str) else json.dumps(value))


def open_store(kind: str, options: dict[str, Any], settings: Any) -> MemoryDocumentStore:
    if kind != "documents":
        raise BadInput(f"the memory backend keeps only documents, not {kind}", "use it for [stores.documents]")
    unknown = set(options) - {"name"}
    if unknown:
        raise BadInput(f"the memory backend has no option {', '.join(sorted(unknown))}", "its only option is name")
    return MemoryDocumentStore(str(options.get("name", "")))
