"""Store interfaces. Local backends live in `local.py`; cloud backends (AWS, GCP) implement the same."""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from typing import Any

from agentenv.errors import BadInput

_FIELD = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
_COLLECTION = re.compile(r"^[a-z][a-z0-9_]{0,63}$")


class DocumentStore(ABC):
    """JSON documents by (collection, key), with equality filters and ordering on top-level fields."""

    @abstractmethod
    def put(self, collection: str, key: str, doc: dict[str, Any]) -> None: ...

    @abstractmethod
    def get(self, collection: str, key: str) -> dict[str, Any] | None: ...

    @abstractmethod
    def delete(self, collection: str, key: str) -> bool: ...

    @abstractmethod
    def query(
        self,
        collection: str,
        *,
        where: dict[str, Any] | None = None,
        key_prefix: str | None = None,
        order_by: str | None = None,
        descending: bool = False,
        limit: int | None = None,
    ) -> list[dict[str, Any]]: ...

    def close(self) -> None:  # noqa: B027 - optional for backends without resources
        pass


class ObjectStore(ABC):
    """Immutable-ish bytes by key ('runs/ID/snapshot.tar'). Keys are checked: they cannot escape the store."""

    @abstractmethod
    def put(self, key: str, data: bytes) -> None: ...

    @abstractmethod
    def get(self, key: str) -> bytes: ...

    @abstractmethod
    def exists(self, key: str) -> bool: ...

    @abstractmethod
    def delete(self, key: str) -> bool: ...

    @abstractmethod
    def list(self, prefix: str = "") -> list[str]: ...


def check_collection(name: str) -> str:
    if not _COLLECTION.match(name):
        raise ValueError(f"collection name {name!r} must be lowercase letters, digits and _ (max 64)")
    return name


def check_field(name: str) -> str:
    if not _FIELD.match(name):
        raise ValueError(f"field name {name!r} must be dotted identifiers")
    return name


def check_object_key(key: str) -> str:
    """Reject keys that could escape the store's root or mean different things on different backends."""
    problem = None
    if not key or len(key) > 1024:
        problem = "must be 1 to 1024 characters"
    elif key.startswith("/") or "\\" in key or "\x00" in key:
        problem = "must be a relative path with '/' separators and no NUL"
    elif any(part in ("", ".", "..") for part in key.split("/")):
        problem = "cannot contain empty, '.' or '..' segments"
    if problem:
        raise BadInput(f"object key {key!r} {problem}", "use keys like 'runs/RUN_ID/file.json'")
    return key
