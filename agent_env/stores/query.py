"""QueryBuilder: a document-store query built a call at a time, then run on any backend.

Each method maps onto an argument of `DocumentStore.query` and `DocumentStore.page` (stores/base.py), which every
backend answers the same way (tests/store_conformance.py). The builder adds no capability of its own: what no
backend can do (an operator other than `==`, a field path that is not dotted identifiers, a filter on a list or
an object) is refused as it is asked for, with a `BadInput` naming it and what to do instead.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

from agent_env.errors import BadInput
from agent_env.stores.base import (
    Document,
    DocumentStore,
    Page,
    check_collection,
    check_field,
    check_limit,
)

Operator = Literal["=="]
"""The comparisons the stores can filter on: equality only (on every backend)."""

Scalar = str | int | float | bool
"""What a filter compares a field to: a JSON scalar (a list, an object or null cannot be filtered on)."""

OPERATORS: tuple[str, ...] = ("==",)

_FIELD_FIX = "name fields with dotted identifiers (letters, digits and _, joined by '.'), e.g. 'status' or 'meta.owner'"


@dataclass(frozen=True)
class QueryBuilder:
    """A query of one document collection, immutable: each method returns a new builder, so a base query can be
    shared and refined. Nothing is read until `execute`, `first`, `page` or `pages` runs it on a store.

        recent = QueryBuilder("runs").where("status", "==", "passed").order_by("started_at", descending=True)
        for doc in recent.limit(20).execute(stores.documents): ...

    The same query gives the same documents in the same order on the local, AWS and GCP stores. Filters are
    equality on (dotted) fields; order is by one field, documents without it first, ties in key order; a query
    without `order_by` is in key order. In async code run it on the stores' threads:
    `await in_thread(query.execute, stores.documents)`.
    """

    collection: str
    """The document collection, e.g. `runs` (run records), `registry`, `eval_runs`."""
    filters: tuple[tuple[str, Scalar], ...] = ()
    """(field, value) pairs a document must all equal; set with `where`."""
    prefix: str | None = None
    """Only documents whose key starts with this; set with `key_prefix`."""
    sort_field: str | None = None
    """The field the results are ordered by; set with `order_by`."""
    descending: bool = False
    """Whether the order is reversed: set with `order_by`, or give `descending=True` here for keys in reverse."""
    max_results: int | None = None
    """The most documents `execute` and `pages` return; set with `limit`."""

    def __post_init__(self) -> None:
        try:
            check_collection(self.collection)
        except ValueError as e:
            raise BadInput(str(e), "use a collection such as 'runs', 'registry' or 'eval_runs'") from None
        seen: set[str] = set()
        for field, value in self.filters:
            _check_field(field)
            _check_value(field, value)
            if field in seen:
                raise BadInput(f"the query filters on {field!r} twice", "filter each field once")
            seen.add(field)
        if self.sort_field is not None:
            _check_field(self.sort_field)
        if self.prefix is not None and not isinstance(self.prefix, str):
            raise BadInput(f"key prefix {self.prefix!r} is not a string", "pass the start of the keys, e.g. 'run-'")
        if self.max_results is not None and (
            isinstance(self.max_results, bool) or not isinstance(self.max_results, int) or self.max_results < 1
        ):
            raise BadInput(f"limit {self.max_results!r} must be a whole number of at least 1", "e.g. .limit(20)")

    def where(self, field: str, op: Operator, value: Scalar) -> QueryBuilder:
        """Keep the documents whose `field` (dotted for nested ones: `meta.owner`) equals `value`.

        Only `==` exists: the stores index no ranges. A range (`>=`, `<`...) or `!=` is refused with the fix:
        order by the field and stop reading where it passes, or filter the results in Python.
        """
        _check_field(field)
        if op not in OPERATORS:
            raise BadInput(
                f"the document stores cannot filter {field!r} with {op!r}: they filter on equality only ('==')",
                f"use .where({field!r}, '==', value), or .order_by({field!r}) and stop reading where the value "
                "passes, or filter the results in Python",
            )
        _check_value(field, value)
        current = dict(self.filters)
        if field in current:
            if _same(current[field], value):
                return self
            raise BadInput(
                f"the query already keeps {field!r} == {current[field]!r}, so it cannot also equal {value!r}",
                "filter a field once: build another query for the other value",
            )
        return dataclasses.replace(self, filters=(*self.filters, (field, value)))

    def key_prefix(self, prefix: str) -> QueryBuilder:
        """Keep the documents whose key starts with `prefix` (run ids, `registry` keys like `tasks/NAME@`)."""
        return dataclasses.replace(self, prefix=prefix or None)

    def order_by(self, field: str, *, descending: bool = False) -> QueryBuilder:
        """Order the results by `field` (dotted allowed); documents without it come first (last when
        `descending`), ties in key order. The stores order by one field: a second, other field is refused."""
        _check_field(field)
        if self.sort_field is not None and self.sort_field != field:
            raise BadInput(
                f"the query is ordered by {self.sort_field!r} already: the stores order by one field, not also "
                f"{field!r}",
                f"order by one field (ties are in key order), or sort the results in Python by {field!r}",
            )
        return dataclasses.replace(self, sort_field=field, descending=descending)

    def limit(self, n: int) -> QueryBuilder:
        """Return at most `n` documents (the first `n` in the query's order); a later call replaces it."""
        return dataclasses.replace(self, max_results=n)

    def execute(self, store: DocumentStore) -> list[Document]:
        """Run the query: the matching documents, in order, at most `limit` of them."""
        return store.query(
            self.collection,
            where=dict(self.filters),
            key_prefix=self.prefix,
            order_by=self.sort_field,
            descending=self.descending,
            limit=self.max_results,
        )

    def first(self, store: DocumentStore) -> Document | None:
        """The query's first document, or None when nothing matches."""
        found = self.limit(1).execute(store)
        return found[0] if found else None

    def page(self, store: DocumentStore, *, size: int = 100, after: str | None = None) -> Page:
        """One page of `size` documents; pass its `next` back as `after` for the following page (None: no more).

        A cursor belongs to its query: with another filter, order or collection it is refused. A page has its
        own size, so a builder with `limit` is refused here (`pages` honours a limit).
        """
        if self.max_results is not None:
            raise BadInput(
                f"a page has its own size, but the query has .limit({self.max_results})",
                f"drop .limit() and pass size={self.max_results}, or use .pages(store), which stops at the limit",
            )
        return self._page(store, _check_size(size), after)

    def pages(self, store: DocumentStore, *, size: int = 100) -> Iterator[Page]:
        """Every page of the query in turn, each of at most `size` documents, read as it is reached; with a
        `limit`, the pages stop once that many documents have been returned (the last page's `next` is None)."""
        size = _check_size(size)
        left, after = self.max_results, None
        while True:
            page = self._page(store, size if left is None else min(size, left), after)
            if left is not None:
                left -= len(page.items)
                if left <= 0:
                    page = Page(items=page.items, next=None)
            yield page
            if page.next is None:
                return
            after = page.next

    def _page(self, store: DocumentStore, size: int, after: str | None) -> Page:
        try:
            return store.page(
                self.collection,
                where=dict(self.filters),
                key_prefix=self.prefix,
                order_by=self.sort_field,
                descending=self.descending,
                limit=size,
                after=after,
            )
        except ValueError as e:
            raise BadInput(
                str(e), "pass back the `next` of a page of this same query, or start without `after`"
            ) from None


def _check_field(field: str) -> None:
    try:
        check_field(field if isinstance(field, str) else "")
    except ValueError:
        raise BadInput(f"field {field!r} is not a path the document stores can read", _FIELD_FIX) from None


def _check_value(field: str, value: object) -> None:
    if not isinstance(value, str | int | float | bool):
        raise BadInput(
            f"the query cannot compare {field!r} to {value!r}: filters compare to a string, number or bool",
            "to find documents without the field, order by it (they come first); to match a list or an object, "
            "filter on one of its fields ('meta.owner')",
        )


def _same(a: Scalar, b: Scalar) -> bool:
    return type(a) is type(b) and a == b


def _check_size(size: int) -> int:
    try:
        return check_limit(0 if isinstance(size, bool) else size)
    except ValueError:
        raise BadInput(f"page size {size!r} must be a whole number from 1 to 10000", "e.g. size=100") from None
