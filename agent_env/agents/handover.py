"""How the objects of one extension call reach an agent: through grants on the run's own store when they reach it,
else through the agent's own `urn:agentenv:staging/v1`.

The local store's grants are served on this host's loopback, so they reach an agent on this host only; an agent
elsewhere (its URL's host is not a loopback one: `stores.transfer.reaches`) is handed grants on its staging instead.
Before the call the run pushes there what the agent will read; the grants it hands the agent name staged paths on
the agent's own URL, below an id the run makes per call (unguessable, told to no one else); after the call it pulls
what the agent wrote into its own store, and removes the whole id. The agent moves its objects as it always does.
An agent the grants cannot reach that declares no staging fails the call, naming both ways out.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Callable
from typing import TypeVar
from urllib.parse import urljoin

from agentenv_protocol.transfers import HttpGetGrant, HttpPutGrant, ReadObject, WriteObject
from pydantic import ValidationError

from agent_env.agents.extension_ops import StagingDeclaration, declaration
from agent_env.agents.extension_table import STAGING
from agent_env.agents.extensions import ExtensionClient
from agent_env.config import url_origin
from agent_env.errors import BadInput
from agent_env.stores import Stores, in_thread
from agent_env.stores import transfer as moving
from agent_env.stores.grants import Grant, ObjectGrants

_T = TypeVar("_T")


class HandoverFailed(Exception):
    """The objects of a call cannot reach the agent, or could not be staged or pulled back."""


class Handover:
    """The grants of one call: `write` and `read` hand out what the agent uses, `finish` (after the call) brings
    staged writes into the store and removes the staging."""

    def __init__(self, client: ExtensionClient, grants: ObjectGrants, stores: Stores) -> None:
        self.client, self.grants, self.stores = client, grants, stores
        self.staging_id = secrets.token_urlsafe(24)  # 32 characters: ~192 bits
        self.pulls: list[tuple[str, str, int]] = []  # (staged URL, store key, at most) of each staged write
        self.staged = False

    async def write(self, key: str, media_type: str, max_bytes: int) -> tuple[Grant, WriteObject]:
        grant = await in_thread(self.grants.write, key, media_type=media_type, max_bytes=max_bytes)
        url = self._staged_url(grant, key)
        if url is None:
            return grant, _wire(lambda: moving.write_object(grant, media_type))
        self.pulls.append((url, key, max_bytes))
        put = HttpPutGrant(kind="http-put", url=url, expires_at=grant.expires_at)
        return grant, _wire(lambda: WriteObject(media_type=media_type, max_bytes=max_bytes, write=put))

    async def read(self, key: str, media_type: str, data: bytes | None = None) -> ReadObject:
        grant = await in_thread(self.grants.read, key)
        url = self._staged_url(grant, key)
        if url is None:
            measured = await in_thread(self.grants.size, key) if data is None else len(data)
            size = measured or 0
            return _wire(lambda: moving.read_object(grant, size, media_type, data))
        body = data if data is not None else await self.stores.aio.objects.get(key)
        get = HttpGetGrant(kind="http-get", url=url, expires_at=grant.expires_at)
        staged = _wire(
            lambda: ReadObject(
                media_type=media_type,
                max_bytes=max(len(body), 1),
                size_bytes=len(body),
                sha256=hashlib.sha256(body).hexdigest(),
                read=get,
            )
        )
        try:
            await moving.put(WriteObject(media_type=media_type, max_bytes=max(len(body), 1), write=put_of(get)), body)
        except (moving.ObjectMoveFailed, moving.TooLarge) as e:
            raise HandoverFailed(f"the agent's staging refused {key} ({e or 'too large'})") from None
        return staged

    async def finish(self, *, pull: bool = True) -> None:
        """What the agent wrote to its staging, into the store (each within its grant's bound); the staging gone."""
        if not self.staged:
            return
        try:
            for url, key, most in self.pulls if pull else ():
                try:
                    body, _ = await moving.fetch(url, None, most)
                except moving.TooLarge:
                    raise HandoverFailed(f"the agent staged more than {most} bytes for {key}") from None
                except moving.ObjectMoveFailed:
                    continue  # nothing staged there: the caller finds nothing at the key, and says so
                await self.stores.aio.objects.put(key, body)
        finally:
            await moving.remove(self._url(""))

    def _staged_url(self, grant: Grant, key: str) -> str | None:
        """Where the agent finds `key` in its staging, or None when the store's grant reaches it itself."""
        if moving.reaches(grant.url, self.client.agent_url):
            return None
        staging = declaration(self.client, STAGING, StagingDeclaration)
        if staging is None:
            raise HandoverFailed(
                f"the object store's grants are served on this host's loopback and cannot reach the agent at "
                f"{self.client.agent_url}, which declares no {STAGING} — use an object store the agent can reach "
                "(S3 or Cloud Storage over https), or an agent that serves staging"
            )
        self.staged = True
        return self._url(key, staging)  # (a store key: a normalized relative path, unique in the call)

    def _url(self, name: str, staging: StagingDeclaration | None = None) -> str:
        staging = staging or declaration(self.client, STAGING, StagingDeclaration)
        path = staging.path(self.staging_id, name) if name else f"{staging.endpoint.rstrip('/')}/{self.staging_id}/"
        url = urljoin(self.client.agent_url, path)
        if url_origin(url) != url_origin(self.client.agent_url):
            raise HandoverFailed(f"the agent at {self.client.agent_url} names its staging on another origin: refused")
        return url


def put_of(get: HttpGetGrant) -> HttpPutGrant:
    return HttpPutGrant(kind="http-put", url=get.url, expires_at=get.expires_at)


def _wire(make: Callable[[], _T]) -> _T:
    try:
        return make()
    except (ValidationError, BadInput) as e:
        problem = e.problem if isinstance(e, BadInput) else e.errors()[0]["msg"]
        raise HandoverFailed(
            f"the grants cannot be handed to the agent: {problem} (protocol v1 takes only https:// grant URLs) — "
            "serve the agent over https, or use an object store over https"
        ) from None
