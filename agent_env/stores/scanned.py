"""Document stores over a backend that can only list a collection in key order (DynamoDB, Firestore): the
query language (filters, order, limits, pages) runs here, once for every such backend, on what the backend
streams. A query without `order_by` stops reading once it has `limit` matches; one with `order_by` reads the
collection's matching documents once (a registry's collections are small; the store keeps no index).
Values compare and order as the local SQLite store orders them, so every backend answers a query the same way.
"""

from __future__ import annotations

import json
from abc import abstractmethod
from collections.abc import Iterator
from typing import Any

from agent_env.stores.base import (
    Document,
    DocumentStore,
    Page,
    Where,
    check_field,
    check_limit,
    check_where,
    field_value,
    make_cursor,
    query_shape,
    read_cursor,
)


class ScannedDocumentStore(DocumentStore):
    """A document store whose backend provides `_scan`: a collection's (key, doc) in key order."""

    @abstractmethod
    def _scan(
        self, collection: str, key_prefix: str | None, descending: bool, after_key: str | None
    ) -> Iterator[tuple[str, Document]]: ...

    def query(
        self,
        collection: str,
        *,
        where: Where | None = None,
        key_prefix: str | None = None,
        order_by: str | None = None,
        descending: bool = False,
        limit: int | None = None,
    ) -> list[Document]:
        if limit is not None and limit < 0:
            raise ValueError(f"limit {limit!r} must not be negative")
        docs = [doc for _, doc in self._ordered(collection, where, key_prefix, order_by, descending, limit)]
        return docs if limit is None else docs[:limit]

    def page(
        self,
        collection: str,
        *,
        where: Where | None = None,
        key_prefix: str | None = None,
        order_by: str | None = None,
        descending: bool = False,
        limit: int = 100,
        after: str | None = None,
    ) -> Page:
        """The cursor is the last document's position (its key, and its `order_by` value): the next page starts
        right after it, so documents added or removed meanwhile neither repeat nor hide the ones that follow."""
        limit = check_limit(limit)
        shape = query_shape(collection, where, key_prefix, order_by, descending)
        start = cursor_position(read_cursor(after, shape)) if after else None
        found: list[tuple[tuple[Any, ...], Document]] = []
        for position, doc in self._ordered(collection, where, key_prefix, order_by, descending, None, start):
            found.append((position, doc))
            if len(found) > limit:
                break
        more = len(found) > limit
        items = found[:limit]
        return Page(items=[doc for _, doc in items], next=make_cursor(shape, list(items[-1][0])) if more else None)

    def _ordered(
        self,
        collection: str,
        where: Where | None,
        key_prefix: str | None,
        order_by: str | None,
        descending: bool,
        limit: int | None,
        after: tuple[Any, ...] | None = None,
    ) -> Iterator[tuple[tuple[Any, ...], Document]]:
        """(position, doc) in the query's order, strictly after `after`. A position is (key,) without
        `order_by`, else (rank, value, key): a total order, the same on every page and every backend."""
        where = check_where(where)
        if order_by is None:
            start = after[0] if after else None
            matches = 0
            for key, doc in self._scan(collection, key_prefix, descending, start):
                if matches_where(doc, where):
                    yield (key,), doc
                    matches += 1
                    if limit is not None and matches >= limit:
                        return
            return
        check_field(order_by)
        rows = [
            ((*sort_key(field_value(doc, order_by)), key), doc)
            for key, doc in self._scan(collection, key_prefix, False, None)
            if matches_where(doc, where)
        ]
        rows.sort(key=lambda row: row[0], reverse=descending)
        for position, doc in rows:
            if after is None or (position < after if descending else position > after):
                yield position, doc


def matches_where(doc: Document, where: Where) -> bool:
    for field, wanted in where.items():
        value = field_value(doc, field)
        # JSON booleans and numbers compare as SQLite's json_extract does: true == 1; a string never equals a number
        if isinstance(value, str) != isinstance(wanted, str) or value != wanted:
            return False
    return True


def sort_key(value: Any) -> tuple[int, Any]:
    """Mixed types order as in SQLite: missing/null, then numbers (booleans as 0/1), then text."""
    if value is None:
        return (0, 0)
    if isinstance(value, bool | int | float):
        return (1, float(value) if isinstance(value, float) else int(value))
    if isinstance(value, str):
        return (2, value)
    return (2, json.dumps(value, separators=(",", ":")))  # objects and arrays compare as their JSON text


def cursor_position(raw: Any) -> tuple[Any, ...]:
    """A cursor's position, checked to be one this store made: [key] or [rank, value, key]."""
    if isinstance(raw, list) and len(raw) == 1 and isinstance(raw[0], str):
        return (raw[0],)
    if isinstance(raw, list) and len(raw) == 3 and isinstance(raw[0], int) and isinstance(raw[2], str):
        rank, value = raw[0], raw[1]
        expected = {0: int, 1: int | float, 2: str}.get(rank)
        if expected is not None and isinstance(value, expected) and not isinstance(value, bool):
            return (rank, value, raw[2])
    raise ValueError("page cursor is malformed: pass back the `next` of the previous page")
