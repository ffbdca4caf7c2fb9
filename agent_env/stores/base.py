"""The four store interfaces every backend implements (local here, AWS and GCP beside it, plugins anywhere),
and the checks they share, so a key or a cursor means the same thing on every backend.

Backends are held to these contracts by one suite, tests/store_conformance.py.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
from abc import ABC, abstractmethod
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from agent_env.errors import BadInput, NotFound
from agent_env.spec.secret_refs import NAME, PREFIX, is_reference

_FIELD = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
_COLLECTION = re.compile(r"^[a-z][a-z0-9_]{0,63}$")
_IMAGE_NAME = re.compile(r"^[a-z0-9]+([._-][a-z0-9]+)*(/[a-z0-9]+([._-][a-z0-9]+)*)*$")
_IMAGE_VERSION = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")


Document = dict[str, Any]  # a stored JSON object: any JSON the caller keeps (its shape is the caller's model)
Where = Mapping[str, str | int | float | bool]  # equality filters: a (dotted) field -> the scalar it must equal
Options = dict[str, Any]  # a backend's own keys under `[stores.<kind>]` (bucket, table, region...), it checks them


class MissingObject(NotFound, KeyError):
    """No object with this key. A KeyError (for code that maps keys) and a NotFound (for the CLI)."""


class MissingSecret(BadInput):
    """A `secret:NAME` reference with no value behind it."""


class Page(BaseModel):
    """One page of a query."""

    items: list[Document] = Field(description="the page's documents, in the query's order")
    next: str | None = Field(None, description="an opaque cursor: pass it as `after` for the next page; None: no more")


class DocumentStore(ABC):
    """JSON documents by (collection, key). `where` is equality on (dotted) fields to scalars (str, number,
    bool); `order_by` a (dotted) field, documents without it first. Ties, and queries without `order_by`, are
    in key order; `descending` reverses the whole order. So a query's order is stable, and pages can follow it."""

    @abstractmethod
    def put(self, collection: str, key: str, doc: Document) -> None:
        """Upsert."""

    @abstractmethod
    def create(self, collection: str, key: str, doc: Document) -> bool:
        """Store `doc` only if the key is absent; False if it exists. Atomic: of racing creators, one wins."""

    @abstractmethod
    def get(self, collection: str, key: str) -> Document | None:
        """The document at (collection, key), or None."""

    @abstractmethod
    def delete(self, collection: str, key: str) -> bool:
        """Delete it; False if there was none."""

    @abstractmethod
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
        """The documents of `collection` that match, in order, at most `limit` (see the class for the rules;
        `agent_env.stores.QueryBuilder` builds these arguments a call at a time)."""

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
        """One page of `query(...)`; pass `next` back as `after` for the following one. The pages of an
        unchanged collection, concatenated, are `query(...)`. This default pages by offset over `query`;
        backends override it with something that does not re-read the skipped documents."""
        shape = query_shape(collection, where, key_prefix, order_by, descending)
        offset = read_cursor(after, shape) if after else 0
        if not isinstance(offset, int) or offset < 0:
            raise ValueError("page cursor is not valid for this query: start again without `after`")
        limit = check_limit(limit)
        docs = self.query(
            collection,
            where=where,
            key_prefix=key_prefix,
            order_by=order_by,
            descending=descending,
            limit=offset + limit + 1,
        )[offset:]
        more = len(docs) > limit
        return Page(items=docs[:limit], next=make_cursor(shape, offset + limit) if more else None)

    def close(self) -> None:  # noqa: B027 - optional for backends without resources
        pass


class ObjectStore(ABC):
    """Bytes by key ('runs/ID/snapshot.tar'). Keys are checked (`check_object_key`): they cannot escape."""

    @abstractmethod
    def put(self, key: str, data: bytes) -> None:
        """Store `data` under `key`, replacing what was there."""

    @abstractmethod
    def create(self, key: str, data: bytes) -> bool:
        """Store `data` only if the key is absent (an atomic conditional create); False if it exists."""

    @abstractmethod
    def get(self, key: str) -> bytes:
        """The object's bytes; `MissingObject` (a KeyError) naming the key when there is none."""

    @abstractmethod
    def exists(self, key: str) -> bool:
        """Whether an object has this exact key (a prefix of keys is not an object)."""

    @abstractmethod
    def delete(self, key: str) -> bool:
        """Delete it; False if there was none."""

    @abstractmethod
    def list(self, prefix: str = "") -> list[str]:
        """Keys starting with `prefix`, sorted."""

    @abstractmethod
    def put_file(self, key: str, path: Path) -> None:
        """Upload a (large) file, streamed: never all of it in memory."""

    @abstractmethod
    def get_file(self, key: str, path: Path) -> None:
        """Download to `path`, streamed and atomic (a temp file renamed): `path` is whole or untouched."""

    def close(self) -> None:  # noqa: B027 - optional for backends without resources
        pass


class ImageStore(ABC):
    """Env and agent container images, pushed and tagged by version."""

    @abstractmethod
    def push(self, local_ref: str, name: str, version: str) -> str:
        """Store the local image `local_ref` as `name` at `version`; returns the stored reference."""

    @abstractmethod
    def pull(self, name: str, version: str) -> str:
        """A reference the local Docker daemon can run."""

    @abstractmethod
    def exists(self, name: str, version: str) -> bool:
        """Whether `name` is stored at `version`."""

    @abstractmethod
    def versions(self, name: str) -> list[str]:
        """The stored versions of `name`, numbers sorted as numbers (1.9 before 1.10)."""

    def close(self) -> None:  # noqa: B027 - optional for backends without resources
        pass


class SecretStore(ABC):
    """The values behind `secret:NAME` references."""

    @abstractmethod
    def get(self, name: str) -> str:
        """The value; `MissingSecret` naming the secret and how to set it when there is none."""

    @abstractmethod
    def set(self, name: str, value: str) -> None:
        """Store the value behind `secret:NAME`, replacing any."""

    @abstractmethod
    def delete(self, name: str) -> bool:
        """Delete it; False if there was none."""

    @abstractmethod
    def names(self) -> list[str]:
        """The names of the stored secrets (never their values)."""

    def where(self) -> str:
        """Where the values are kept, for messages (a file, a service and its address)."""
        return type(self).__name__

    def has(self, name: str) -> bool:
        """Whether `name` has a value (without raising `MissingSecret`)."""
        try:
            self.get(name)
            return True
        except MissingSecret:
            return False

    def resolve(self, value: str) -> str:
        """The value of a `secret:NAME` reference; any other string is returned as it is."""
        return self.get(value[len(PREFIX) :]) if is_reference(value) else value

    def close(self) -> None:  # noqa: B027 - optional for backends without resources
        pass


def check_collection(name: str) -> str:
    if not _COLLECTION.match(name):
        raise ValueError(f"collection name {name!r} must be lowercase letters, digits and _ (max 64)")
    return name


def check_field(name: str) -> str:
    if not _FIELD.match(name):
        raise ValueError(f"field name {name!r} must be dotted identifiers")
    return name


def check_where(where: Where | None) -> Where:
    """Equality filters: dotted field names to scalars (str, int, float, bool)."""
    for field, value in (where or {}).items():
        check_field(field)
        if not isinstance(value, str | int | float | bool):
            raise ValueError(f"filter on {field!r} must compare to a string, number or bool, not {value!r}")
    return where or {}


def check_limit(limit: int) -> int:
    if not isinstance(limit, int) or not 1 <= limit <= 10_000:
        raise ValueError(f"page limit {limit!r} must be an integer from 1 to 10000")
    return limit


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


def check_image(name: str, version: str) -> tuple[str, str]:
    """An image name and version every registry accepts as a repository and a tag."""
    if len(name) > 128 or not _IMAGE_NAME.match(name):
        raise BadInput(f"image name {name!r} is not valid", "use lowercase letters, digits, '.', '_', '-' and '/'")
    if not _IMAGE_VERSION.match(version):
        raise BadInput(f"image version {version!r} is not valid", "use letters, digits, '.', '_' and '-' (max 128)")
    return name, version


def check_secret_name(name: str) -> str:
    if not NAME.match(name):
        raise BadInput(f"secret name {name!r} is not valid", "use letters, digits, '.', '_' and '-' (max 64)")
    return name


def version_order(version: str) -> list[tuple[int, int | str]]:
    """Sort key of image versions: numbers as numbers, so 1.10 comes after 1.9 (and numbers before words)."""
    return [(0, int(part)) if part.isdigit() else (1, part) for part in re.split(r"(\d+)", version) if part]


def field_value(doc: Document, field: str) -> Any:
    """The value at a dotted field ('a.b' is doc['a']['b']); None where the path does not exist."""
    value: Any = doc
    for part in field.split("."):
        if not isinstance(value, dict):
            return None
        value = value.get(part)
    return value


# Page cursors: base64url(JSON {"q": the query's shape, "at": a backend's position}). The shape binds a
# cursor to its query: one made for another collection or filter is refused, so a cursor can only move
# within the query it came from. The position is the backend's own (an offset, a last key, a token).


def query_shape(
    collection: str, where: Where | None, key_prefix: str | None, order_by: str | None, descending: bool
) -> str:
    """A digest of everything that selects and orders a query's documents (not the page size)."""
    text = json.dumps([collection, where or {}, key_prefix or "", order_by or "", descending], sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def make_cursor(shape: str, position: Any) -> str:
    text = json.dumps({"q": shape, "at": position}, separators=(",", ":"))
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


def read_cursor(cursor: str, shape: str) -> Any:
    """The position in `cursor`; ValueError if it is malformed or was made for another query."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        data = json.loads(raw)
    except (binascii.Error, ValueError, TypeError):
        raise ValueError("page cursor is malformed: pass back the `next` of the previous page") from None
    if not isinstance(data, dict) or set(data) != {"q", "at"}:
        raise ValueError("page cursor is malformed: pass back the `next` of the previous page")
    if data["q"] != shape:
        raise ValueError("page cursor belongs to another query: use it with the query that returned it")
    return data["at"]
