"""Short-lived grants on the object store: a URL (and the headers to send with it) that lets whoever holds it make
one kind of request — GET one key, or PUT one key (or any key under a prefix), or POST objects under a namespace
through an upload policy — for a few minutes, and nothing else. A grant carries no credential of ours: an agent handed one can move the bytes of one object, not read the
store, and not use it for another key, another method or after it expires.

They are how the open protocol's object transfers move bytes (snapshot/v1, trajectory/v1 `task_objects`,
skill-config/v1 bundles, data-objects/v1 exports): the run hands the agent or env grants, it moves the objects itself.

A namespace grant (`NamespaceGrant`, the protocol's `WriteNamespaceGrant`) is an upload policy: multipart POSTs of
any key below one root, each object within a size bound. Its holder picks the paths; the store checks the root and
the size of each object where it can, and whoever reads the namespace afterwards checks the rest (how many objects,
their total: `stores.transfer.check_namespace`).

Backends: the local store's grants are served over HTTPS by this process (`local_grants`); S3's are presigned
URLs (`aws_grants`). A store that issues none (GCS for now, plugins) fails clearly when one is asked for
(`grant_issuers.object_grants`).
"""

from __future__ import annotations

import datetime
from abc import ABC, abstractmethod
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from agent_env.errors import BadInput

DEFAULT_TTL_S = 300.0  # a few minutes: the length of one extension call, with room for retries
MAX_TTL_S = 3600.0


class Grant(BaseModel):
    """One request the holder may make: `method` on `url`, sending `headers`, until `expires_at`."""

    model_config = ConfigDict(frozen=True)

    method: Literal["GET", "PUT"]
    url: str = Field(repr=False)  # it is the credential: never logged
    headers: dict[str, str] = Field(default_factory=dict, repr=False)
    expires_at: datetime.datetime
    key: str  # the object (or, for a prefix grant, the prefix) it is for, in the store's own keys
    max_bytes: int | None = None  # the most a PUT may write (enforced by the store where it can: `bounds_writes`)


class ObjectGrants(ABC):
    """Issues grants on one object store."""

    bounds_writes: bool = True  # False: the store cannot refuse a PUT past its size (S3): check what arrived

    @abstractmethod
    def read(self, key: str, *, ttl_s: float = DEFAULT_TTL_S) -> Grant:
        """A GET of `key`."""

    @abstractmethod
    def write(self, key: str, *, media_type: str, max_bytes: int, ttl_s: float = DEFAULT_TTL_S) -> Grant:
        """A PUT of `key`, of `media_type`, at most `max_bytes`."""

    @abstractmethod
    def size(self, key: str) -> int | None:
        """The size of the object at `key` (None if there is none), read without reading the object: what an agent
        wrote through a grant is measured before anything reads it, and a read grant names its object's size."""

    def namespace(self, root: str, *, limits: NamespaceLimits, ttl_s: float = DEFAULT_TTL_S) -> NamespaceGrant:
        """Multipart POSTs (an upload policy) of any key below `root`, within `limits`."""
        raise BadInput(
            f"the object store's grants ({type(self).__name__}) include no upload policy (namespace grant)",
            "use the local, aws or gcp object store, or call data/get without a grant to have the export inline",
        )


class NamespaceLimits(BaseModel):
    """What a namespace grant lets its holder upload: how many objects, each at most, and all of them together."""

    model_config = ConfigDict(frozen=True)

    max_objects: int = Field(gt=0)
    max_object_bytes: int = Field(gt=0)
    max_total_bytes: int = Field(gt=0)


class NamespaceGrant(BaseModel):
    """Multipart POSTs to `url` with `fields`, the object's key in `path_field` (`root_path` + "/" + its path) and
    its bytes in `file_field`, until `expires_at`. `root` is the namespace in the store's own keys; `root_path`
    the same place as the holder names it (the store's full key: S3's and Cloud Storage's include its prefix)."""

    model_config = ConfigDict(frozen=True)

    url: str = Field(repr=False)  # with `fields` (a signed policy), the credential: never logged
    fields: dict[str, str] = Field(default_factory=dict, repr=False)
    path_field: str = "key"
    file_field: str = "file"
    headers: dict[str, str] = Field(default_factory=dict, repr=False)
    expires_at: datetime.datetime
    root: str
    root_path: str
    limits: NamespaceLimits

    def key(self, path: str) -> str:
        """The store's key of `path` (relative to the namespace), as the holder's answer names it."""
        return f"{self.root}/{path}"


def check_ttl(ttl_s: float) -> float:
    if not 0 < ttl_s <= MAX_TTL_S:
        raise ValueError(f"a grant lasts more than 0 and at most {MAX_TTL_S:g} seconds, not {ttl_s}")
    return ttl_s
