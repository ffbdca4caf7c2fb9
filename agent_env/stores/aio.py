"""The stores from async code: the one seam between the event loop and the synchronous store backends.

Every backend is synchronous (SQLite, files, boto3, the Google clients), and a call to S3, DynamoDB or Firestore
waits on the network. `stores.aio.objects.get(key)` is `stores.objects.get(key)` run on a bounded pool of threads
kept for the stores, so a slow backend holds a thread, never the loop: the gateway's `/ready`, other runs and
other requests are answered meanwhile. The pool is the stores' own, so slow store calls queue behind each other
rather than behind (or in front of) the loop's other `asyncio.to_thread` work. tests/test_stores_aio.py holds
async code to it: no synchronous store call in an `async def` outside this package.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, ParamSpec, TypeVar

from agent_env.stores.base import Document, DocumentStore, ImageStore, ObjectStore, Page, SecretStore, Where

if TYPE_CHECKING:
    from agent_env.stores import Stores

P = ParamSpec("P")
T = TypeVar("T")

THREADS = 16  # store calls in flight at once per process; more wait their turn (the loop never does)
_POOL = ThreadPoolExecutor(max_workers=THREADS, thread_name_prefix="agent-env-store")


async def in_thread(fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
    """`fn(*args, **kwargs)` on the stores' threads, awaited; for code that makes several store calls in a row
    (a helper that opens the stores, reads and writes). The caller's context (its trace span) goes along."""
    context = contextvars.copy_context()
    call = functools.partial(context.run, fn, *args, **kwargs)
    return await asyncio.get_running_loop().run_in_executor(_POOL, call)


class AsyncDocuments:
    """A `DocumentStore`'s methods, awaited (see the module docstring)."""

    def __init__(self, store: DocumentStore) -> None:
        self.sync = store

    async def put(self, collection: str, key: str, doc: Document) -> None:
        await in_thread(self.sync.put, collection, key, doc)

    async def create(self, collection: str, key: str, doc: Document) -> bool:
        return await in_thread(self.sync.create, collection, key, doc)

    async def get(self, collection: str, key: str) -> Document | None:
        return await in_thread(self.sync.get, collection, key)

    async def delete(self, collection: str, key: str) -> bool:
        return await in_thread(self.sync.delete, collection, key)

    async def query(
        self,
        collection: str,
        *,
        where: Where | None = None,
        key_prefix: str | None = None,
        order_by: str | None = None,
        descending: bool = False,
        limit: int | None = None,
    ) -> list[Document]:
        return await in_thread(
            self.sync.query,
            collection,
            where=where,
            key_prefix=key_prefix,
            order_by=order_by,
            descending=descending,
            limit=limit,
        )

    async def page(
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
        return await in_thread(
            self.sync.page,
            collection,
            where=where,
            key_prefix=key_prefix,
            order_by=order_by,
            descending=descending,
            limit=limit,
            after=after,
        )


class AsyncObjects:
    """An `ObjectStore`'s methods, awaited."""

    def __init__(self, store: ObjectStore) -> None:
        self.sync = store

    async def put(self, key: str, data: bytes) -> None:
        await in_thread(self.sync.put, key, data)

    async def create(self, key: str, data: bytes) -> bool:
        return await in_thread(self.sync.create, key, data)

    async def get(self, key: str) -> bytes:
        return await in_thread(self.sync.get, key)

    async def exists(self, key: str) -> bool:
        return await in_thread(self.sync.exists, key)

    async def delete(self, key: str) -> bool:
        return await in_thread(self.sync.delete, key)

    async def list(self, prefix: str = "") -> list[str]:
        return await in_thread(self.sync.list, prefix)

    async def put_file(self, key: str, path: Path) -> None:
        await in_thread(self.sync.put_file, key, path)

    async def get_file(self, key: str, path: Path) -> None:
        await in_thread(self.sync.get_file, key, path)


class AsyncImages:
    """An `ImageStore`'s methods, awaited."""

    def __init__(self, store: ImageStore) -> None:
        self.sync = store

    async def push(self, local_ref: str, name: str, version: str) -> str:
        return await in_thread(self.sync.push, local_ref, name, version)

    async def pull(self, name: str, version: str) -> str:
        return await in_thread(self.sync.pull, name, version)

    async def exists(self, name: str, version: str) -> bool:
        return await in_thread(self.sync.exists, name, version)

    async def versions(self, name: str) -> list[str]:
        return await in_thread(self.sync.versions, name)


class AsyncSecrets:
    """A `SecretStore`'s methods, awaited."""

    def __init__(self, store: SecretStore) -> None:
        self.sync = store

    async def get(self, name: str) -> str:
        return await in_thread(self.sync.get, name)

    async def set(self, name: str, value: str) -> None:
        await in_thread(self.sync.set, name, value)

    async def delete(self, name: str) -> bool:
        return await in_thread(self.sync.delete, name)

    async def names(self) -> list[str]:
        return await in_thread(self.sync.names)

    async def has(self, name: str) -> bool:
        return await in_thread(self.sync.has, name)

    async def resolve(self, value: str) -> str:
        return await in_thread(self.sync.resolve, value)


class AsyncStores:
    """The four stores of a `Stores`, awaited: `stores.aio.documents`, `.objects`, `.images`, `.secrets`."""

    def __init__(self, stores: Stores) -> None:
        self.documents = AsyncDocuments(stores.documents)
        self.objects = AsyncObjects(stores.objects)
        self.images = AsyncImages(stores.images)
        self.secrets = AsyncSecrets(stores.secrets)
