"""Short-lived grants on the object store: a URL (and the headers to send with it) that lets whoever holds it make
one kind of request — GET one key, or PUT one key (or any key under a prefix) — for a few minutes, and nothing
else. A grant carries no credential of ours: an agent handed one can move the bytes of one object, not read the
store, and not use it for another key, another method or after it expires.

They are how the open protocol's object transfers move bytes (snapshot/v1, trajectory/v1 `task_objects`,
skill-config/v1 bundles): the run hands the agent grants, the agent moves the objects itself.

Backends: the local store's grants are served over HTTPS by this process (`local_grants`); S3's are presigned
URLs (`aws_grants`). A store that issues none (GCS for now, plugins) fails clearly when one is asked for
(`grant_issuers.object_grants`).
"""

from __future__ import annotations

import datetime
from abc import ABC, abstractmethod
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

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


def check_ttl(ttl_s: float) -> float:
    if not 0 < ttl_s <= MAX_TTL_S:
        raise ValueError(f"a grant lasts more than 0 and at most {MAX_TTL_S:g} seconds, not {ttl_s}")
    return ttl_s
