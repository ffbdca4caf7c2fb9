"""The four stores (documents, objects, images, secrets). `open_stores` opens the backends the config names
(`[stores.<kind>] backend`, see `backends.py`); the interfaces are in `base.py`; `QueryBuilder` builds a
document query that runs the same on every backend."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

from agent_env.stores.aio import AsyncStores, in_thread
from agent_env.stores.backends import KINDS, open_store
from agent_env.stores.base import DocumentStore, ImageStore, ObjectStore, Page, SecretStore
from agent_env.stores.query import QueryBuilder

if TYPE_CHECKING:
    from agent_env.config import Settings

__all__ = [
    "AsyncStores",
    "DocumentStore",
    "ImageStore",
    "ObjectStore",
    "Page",
    "QueryBuilder",
    "SecretStore",
    "Stores",
    "in_thread",
    "open_secrets",
    "open_stores",
]


@dataclass
class Stores:
    """The four stores an install's settings name, opened (`open_stores`): one object to pass around, so code
    never opens a backend itself. Close it when done (backends hold connections and file handles)."""

    documents: DocumentStore
    objects: ObjectStore
    images: ImageStore
    secrets: SecretStore

    @cached_property
    def aio(self) -> AsyncStores:
        """The same stores for async code: each call runs on the stores' threads (`stores/aio.py`)."""
        return AsyncStores(self)

    def close(self) -> None:
        """Close the four backends."""
        for store in (self.documents, self.objects, self.images, self.secrets):
            store.close()


def open_stores(settings: Settings) -> Stores:
    """The stores `settings` configure (`[stores.<kind>] backend`, local by default). If one fails to open, those
    already opened are closed and the error (a BadInput naming the setting and the fix) is raised."""
    opened: list = []
    try:
        for kind in KINDS:
            opened.append(open_store(kind, settings))
    except BaseException:
        for store in opened:
            with contextlib.suppress(Exception):
                store.close()
        raise
    return Stores(**dict(zip(KINDS, opened, strict=True)))


def open_secrets(settings: Settings) -> SecretStore:
    """Only the secret store (for code that resolves a `secret:NAME` and needs nothing else)."""
    store: SecretStore = open_store("secrets", settings)
    return store


def hex_secret(settings: Settings, name: str) -> bytes:
    """The secret `name` as the bytes its hex digits spell (a key an install's machines share through the secret
    store); b"" when it is not hex. MissingSecret when it is not set."""
    store = open_secrets(settings)
    try:
        value = store.get(name).strip()
    finally:
        store.close()
    try:
        return bytes.fromhex(value)
    except ValueError:
        return b""
