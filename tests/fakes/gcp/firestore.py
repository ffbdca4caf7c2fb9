"""A fake `google.cloud.firestore.Client` (google-cloud-firestore 2.x, the blocking API): collections of
documents with `create` (AlreadyExists if the document exists), `set`, `get` (a snapshot with `exists` and
`to_dict()`), `delete` (with `write_option(exists=True)`: NotFound if there is none), and queries with
`where(filter=FieldFilter(...))`, `order_by`, `start_after` and `limit`, streamed. Strings order as Firestore
orders them (by UTF-8 bytes); a query's inequality filters and its order must be on the same field, as
Firestore requires without a composite index.
"""

from __future__ import annotations

import copy
import threading
from dataclasses import dataclass
from typing import Any

from google.api_core import exceptions

ASCENDING, DESCENDING = "ASCENDING", "DESCENDING"
_OPERATORS = {
    "==": lambda a, b: a == b,
    "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b,
    ">": lambda a, b: a > b,
    ">=": lambda a, b: a >= b,
}


@dataclass
class _ExistsOption:
    exists: bool


class FakeFirestoreClient:
    def __init__(self, project: str = "fake-project") -> None:
        self.project = project
        self._lock = threading.Lock()
        self._collections: dict[str, dict[str, dict[str, Any]]] = {}

    def collection(self, name: str) -> _Collection:
        if "/" in name or not name:
            raise ValueError(f"a root collection ID, not {name!r}")
        return _Collection(self, name)

    def write_option(self, *, exists: bool) -> _ExistsOption:
        return _ExistsOption(exists)

    def collections(self) -> list[str]:
        """Not in the SDK's shape (it returns references): the names of collections holding documents."""
        with self._lock:
            return sorted(name for name, docs in self._collections.items() if docs)


class _Snapshot:
    def __init__(self, doc_id: str, data: dict[str, Any] | None) -> None:
        self.id = doc_id
        self.exists = data is not None
        self._data = data

    def to_dict(self) -> dict[str, Any] | None:
        return copy.deepcopy(self._data)


class _Document:
    def __init__(self, client: FakeFirestoreClient, collection: str, doc_id: str) -> None:
        if not doc_id or "/" in doc_id or doc_id in (".", "..") or (doc_id.startswith("__") and doc_id.endswith("__")):
            raise ValueError(f"invalid document ID {doc_id!r}")
        if len(doc_id.encode()) > 1500:
            raise exceptions.InvalidArgument("document ID longer than 1500 bytes")
        self._client, self._collection, self.id = client, collection, doc_id

    def _docs(self) -> dict[str, dict[str, Any]]:
        return self._client._collections.setdefault(self._collection, {})

    def create(self, data: dict[str, Any], retry: Any = None, timeout: float | None = None) -> None:
        with self._client._lock:
            if self.id in self._docs():
                raise exceptions.AlreadyExists(f"Document already exists: {self._collection}/{self.id}")
            self._docs()[self.id] = copy.deepcopy(data)

    def set(self, data: dict[str, Any], retry: Any = None, timeout: float | None = None) -> None:
        with self._client._lock:
            self._docs()[self.id] = copy.deepcopy(data)

    def get(self, retry: Any = None, timeout: float | None = None) -> _Snapshot:
        with self._client._lock:
            return _Snapshot(self.id, copy.deepcopy(self._docs().get(self.id)))

    def delete(self, option: _ExistsOption | None = None, retry: Any = None, timeout: float | None = None) -> None:
        with self._client._lock:
            if self.id not in self._docs():
                if option is not None and option.exists:
                    raise exceptions.NotFound(f"No document to update: {self._collection}/{self.id}")
                return
            del self._docs()[self.id]


class _Query:
    def __init__(self, client: FakeFirestoreClient, collection: str) -> None:
        self._client, self._collection = client, collection
        self._filters: list[tuple[str, str, Any]] = []
        self._order: tuple[str, str] | None = None
        self._start_after: dict[str, Any] | None = None
        self._limit: int | None = None

    def _copy(self) -> _Query:
        other = copy.copy(self)
        other._filters = list(self._filters)
        return other

    def where(self, *, filter: Any) -> _Query:  # noqa: A002 - the SDK's keyword
        if filter.op_string not in _OPERATORS:
            raise NotImplementedError(f"the fake does not implement the operator {filter.op_string!r}")
        query = self._copy()
        query._filters.append((filter.field_path, filter.op_string, filter.value))
        query._check()
        return query

    def order_by(self, field_path: str, direction: str = ASCENDING) -> _Query:
        if self._order is not None:
            raise NotImplementedError("the fake orders by one field")
        query = self._copy()
        query._order = (field_path, direction)
        query._check()
        return query

    def start_after(self, fields: dict[str, Any]) -> _Query:
        if self._order is None or set(fields) != {self._order[0]}:
            raise exceptions.InvalidArgument("start_after needs the value of the order_by field")
        query = self._copy()
        query._start_after = dict(fields)
        return query

    def limit(self, count: int) -> _Query:
        query = self._copy()
        query._limit = count
        return query

    def _check(self) -> None:
        ranged = {field for field, op, _ in self._filters if op != "=="}
        if len(ranged) > 1 or (ranged and self._order and ranged != {self._order[0]}):
            raise exceptions.FailedPrecondition("The query requires an index (inequalities on another field)")

    def stream(self, retry: Any = None, timeout: float | None = None) -> Any:
        with self._client._lock:
            docs = copy.deepcopy(self._client._collections.get(self._collection, {}))
        rows = [(doc_id, data) for doc_id, data in docs.items() if all(_holds(data, f) for f in self._filters)]
        field, direction = self._order or ("__name__", ASCENDING)
        descending = direction == DESCENDING

        def sort_key(row: tuple[str, dict[str, Any]]) -> Any:
            value = row[0] if field == "__name__" else row[1].get(field)
            return _comparable(value), _comparable(row[0])

        rows.sort(key=sort_key, reverse=descending)
        if self._start_after is not None:
            bound = _comparable(self._start_after[field])
            rows = [
                r
                for r in rows
                if (_comparable(r[1].get(field)) < bound if descending else _comparable(r[1].get(field)) > bound)
            ]
        for doc_id, data in rows[: self._limit]:
            yield _Snapshot(doc_id, data)


class _Collection(_Query):
    def document(self, doc_id: str) -> _Document:
        return _Document(self._client, self._collection, doc_id)


def _comparable(value: Any) -> Any:
    """Firestore orders strings by their UTF-8 bytes."""
    return value.encode() if isinstance(value, str) else value


def _holds(data: dict[str, Any], condition: tuple[str, str, Any]) -> bool:
    field, op, wanted = condition
    if field not in data or type(data[field]) is not type(wanted):
        return False  # Firestore compares values of the same type only
    return bool(_OPERATORS[op](_comparable(data[field]), _comparable(wanted)))
