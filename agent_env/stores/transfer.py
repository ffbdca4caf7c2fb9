"""Moving objects with grants, both ways, in one place: for envs and agents that hold a grant someone handed them
(our env servers' data-objects/v1, our agent SDK's snapshot/v1 and trajectory objects) and for runs that issue
grants on their own store (`stores.grants`) and read back what the holder wrote.

Holding a grant: `put` (an exact-object PUT), `post_to_namespace` (a multipart POST through a namespace's upload
policy) and `fetch` / `download` (a GET). A grant's URL and headers are its credential. They go to the grant's own
URL and nowhere else: redirects are not followed, no proxy or `.netrc` from the environment is used, and neither the
URL nor a header ever appears in an error or a log line (httpx's request log is dropped while a transfer runs).
What comes back is bounded: a GET stops reading at its limit.

Issuing grants: our `Grant` / `NamespaceGrant` as the protocol carries them (`write_object`, `read_object`,
`namespace_wire`: the protocol takes only https URLs), and `written` / `check_namespace`, which measure what a holder
wrote before anything reads it (a store that cannot bound an upload, S3 or Cloud Storage, lets too much through).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import hashlib
import ipaddress
import logging
import ssl
from collections.abc import AsyncIterator, Callable, Mapping
from typing import TypeVar
from urllib.parse import urlsplit

import httpx
from agentenv_protocol.transfers import (
    HttpGetGrant,
    HttpPostPolicyGrant,
    HttpPutGrant,
    ReadObject,
    Uploaded,
    WriteNamespaceGrant,
    WriteObject,
)
from pydantic import ValidationError

from agent_env.errors import BadInput
from agent_env.stores.aio import in_thread
from agent_env.stores.base import ObjectStore
from agent_env.stores.grants import Grant, NamespaceGrant, ObjectGrants

TIMEOUT = httpx.Timeout(60.0, connect=10.0)  # idle limits, as object stores' own clients use
TOTAL_S = 600.0  # and the whole transfer's: a store that trickles bytes cannot hold a request longer
OPAQUE = "application/octet-stream"
_moving = contextvars.ContextVar("agentenv_object_transfer", default=False)
_T = TypeVar("_T")


class ObjectMoveFailed(Exception):
    """The object store refused the transfer or could not be reached. The message names no URL or header."""


class StoreUnreachable(ObjectMoveFailed):
    """The object store could not be reached, or did not answer in time: worth trying again."""


class TooLarge(Exception):
    """The object is over the limit it was read with."""


class Mismatch(Exception):
    """The object read is not the one its grant describes (its size or its sha256)."""


class GrantNotWritten(BadInput):
    """A holder wrote more than its grant allowed: the object was deleted unread."""


class _QuietWhileMoving(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not _moving.get()


logging.getLogger("httpx").addFilter(_QuietWhileMoving())


# -- holding a grant --


@contextlib.asynccontextmanager
async def _moving_with_a_grant(what: str) -> AsyncIterator[None]:
    """One transfer: httpx's request log quiet, its whole time bounded, its transport errors named without the
    URL (httpx's messages may hold it)."""
    token = _moving.set(True)
    try:
        async with asyncio.timeout(TOTAL_S):
            yield
    except TimeoutError:
        raise StoreUnreachable(f"{what} took over {TOTAL_S:.0f} s") from None
    except httpx.HTTPError as e:
        raise StoreUnreachable(f"{what} could not reach the object store ({_why(e)})") from None
    finally:
        _moving.reset(token)


def _why(error: BaseException) -> str:
    """A transport error in words, with the fix when the store's certificate is not trusted."""
    cause: BaseException | None = error
    while cause is not None and not isinstance(cause, ssl.SSLCertVerificationError):
        cause = cause.__cause__ or cause.__context__
    if cause is None:
        return type(error).__name__
    return f"its TLS certificate is not trusted here: {cause.verify_message}; set SSL_CERT_FILE to a bundle with its CA"


def _client() -> httpx.AsyncClient:
    """Its own TLS context (not `tls.context()`'s, made once): a transfer trusts SSL_CERT_FILE as it is now, where
    an operator names the CA of the store's grants (the local store's is the install's own)."""
    return httpx.AsyncClient(
        verify=ssl.create_default_context(), follow_redirects=False, trust_env=False, timeout=TIMEOUT
    )


def _check(answer: httpx.Response, what: str) -> None:
    if answer.is_redirect:
        raise ObjectMoveFailed(f"the object store answered {what} with a redirect ({answer.status_code}), not followed")
    if not answer.is_success:
        raise ObjectMoveFailed(f"the object store refused {what} ({answer.status_code})")


async def put(target: WriteObject, body: bytes) -> Uploaded:
    """Write `body` through an exact-object PUT grant, within its `max_bytes` (TooLarge past it)."""
    if len(body) > target.max_bytes:
        raise TooLarge
    headers = {"content-type": target.media_type, **(target.write.headers or {})}
    async with _moving_with_a_grant("the upload"), _client() as http:
        answer = await http.put(target.write.url, content=body, headers=headers)
    _check(answer, "the upload")
    return Uploaded(size_bytes=len(body), sha256=hashlib.sha256(body).hexdigest())


async def post_to_namespace(grant: WriteNamespaceGrant, key: str, body: bytes, media_type: str) -> None:
    """Upload `body` at `key` (the grant's root_path and a path under it) through the grant's upload policy."""
    policy = grant.write
    fields = {**policy.fields, policy.path_field: key}
    fields.setdefault("Content-Type", media_type)
    name = key.rsplit("/", 1)[-1]
    async with _moving_with_a_grant("the upload"), _client() as http:
        answer = await http.post(
            policy.url, data=fields, files={policy.file_field: (name, body, media_type)}, headers=policy.headers
        )
    _check(answer, "the upload")


async def fetch(url: str, headers: Mapping[str, str] | None, limit: int) -> tuple[bytes, str]:
    """(the object at `url`, its sha256 in hex), read up to `limit` bytes (TooLarge past it)."""
    sent = {**(headers or {}), "accept-encoding": "identity"}  # the stored bytes, as their checksum was taken
    digest, chunks, size = hashlib.sha256(), [], 0
    async with (
        _moving_with_a_grant("the download"),
        _client() as http,
        http.stream("GET", url, headers=sent) as answer,
    ):
        _check(answer, "the download")
        declared = answer.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > limit:
            raise TooLarge
        async for chunk in answer.aiter_raw():
            size += len(chunk)
            if size > limit:
                raise TooLarge
            digest.update(chunk)
            chunks.append(chunk)
    return b"".join(chunks), digest.hexdigest()


async def remove(url: str) -> None:
    """DELETE at `url` (a staging prefix the run made), on the same terms as every transfer; a refusal is ignored
    (what is left goes with the agent's process)."""
    with contextlib.suppress(ObjectMoveFailed):
        async with _moving_with_a_grant("the removal"), _client() as http:
            await http.delete(url)


async def download(source: ReadObject, limit: int | None = None) -> bytes:
    """The object a read grant names, within its max_bytes (and `limit`), its size and sha256 checked if given."""
    body, sha256 = await fetch(source.read.url, source.read.headers, min(source.max_bytes, limit or source.max_bytes))
    if source.size_bytes is not None and len(body) != source.size_bytes:
        raise Mismatch(f"the object has {len(body)} bytes, its grant says {source.size_bytes}")
    if source.sha256 is not None and sha256 != source.sha256:
        raise Mismatch("the object's sha256 is not its grant's")
    return body


# -- issuing grants: who they reach, as the protocol carries them, and what the holder wrote --


def reaches(grant_url: str, holder_url: str) -> bool:
    """Whether a holder served at `holder_url` can use a grant whose URL is `grant_url`: a grant served on this
    host's loopback (the local store's) reaches only holders on this host's loopback too; any other, everyone.
    (A container that publishes its port on 127.0.0.1 looks local and is not: its transfer fails, and callers
    fall back to what works without a grant.)"""
    return not _loopback(grant_url) or _loopback(holder_url)


def _loopback(url: str) -> bool:
    host = (urlsplit(url).hostname or "").lower()
    if host in ("localhost", "localhost.localdomain"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _wire(make: Callable[[], _T]) -> _T:
    try:
        return make()
    except ValidationError as e:
        raise BadInput(
            f"the object store's grants cannot be handed over: {e.errors()[0]['msg']} (protocol v1 takes only "
            "https:// grant URLs)",
            "use the local object store, or an S3 or Cloud Storage endpoint over https",
        ) from None


def write_object(grant: Grant, media_type: str) -> WriteObject:
    """A write grant as the protocol carries it."""
    put_grant = HttpPutGrant(kind="http-put", url=grant.url, expires_at=grant.expires_at, headers=grant.headers or None)
    return _wire(lambda: WriteObject(media_type=media_type, max_bytes=grant.max_bytes or 1, write=put_grant))


def read_object(grant: Grant, size: int, media_type: str, data: bytes | None = None) -> ReadObject:
    """A read grant for the object of `size` bytes at the grant's key, as the protocol carries it (with its digest
    when its bytes are at hand)."""
    return _wire(
        lambda: ReadObject(
            media_type=media_type,
            max_bytes=max(size, 1),
            size_bytes=size,
            sha256=hashlib.sha256(data).hexdigest() if data is not None else None,
            read=HttpGetGrant(
                kind="http-get", url=grant.url, expires_at=grant.expires_at, headers=grant.headers or None
            ),
        )
    )


def namespace_wire(grant: NamespaceGrant) -> WriteNamespaceGrant:
    """A namespace grant as the protocol carries it (data-objects/v1's `write_namespace`)."""
    return _wire(
        lambda: WriteNamespaceGrant(
            root_path=grant.root_path,
            expires_at=grant.expires_at,
            max_objects=grant.limits.max_objects,
            max_object_bytes=grant.limits.max_object_bytes,
            max_total_bytes=grant.limits.max_total_bytes,
            write=HttpPostPolicyGrant(
                kind="http-post-policy",
                url=grant.url,
                fields=grant.fields,
                path_field=grant.path_field,
                file_field=grant.file_field,
                headers=grant.headers or None,
            ),
        )
    )


async def written(grants: ObjectGrants, objects: ObjectStore, grant: Grant) -> int | None:
    """The size of what a holder wrote through `grant`, measured without reading it; None if nothing. Past the
    grant's bound it is deleted unread (GrantNotWritten)."""
    size = await in_thread(grants.size, grant.key)
    if size is not None and grant.max_bytes is not None and size > grant.max_bytes:
        await in_thread(objects.delete, grant.key)
        raise GrantNotWritten(
            f"the holder of a grant wrote {size} bytes at {grant.key}, more than its grant's {grant.max_bytes}",
            "write at most the size the grant names",
        )
    return size


async def check_namespace(grants: ObjectGrants, objects: ObjectStore, grant: NamespaceGrant) -> dict[str, int]:
    """What a holder wrote under a namespace grant (path below the root -> bytes), held to its limits; past any of
    them the whole namespace is deleted unread (GrantNotWritten)."""
    below = grant.root + "/"
    sizes: dict[str, int] = {}
    for key in await in_thread(objects.list, below):
        size = await in_thread(grants.size, key)
        sizes[key.removeprefix(below)] = size or 0
    limits, over = grant.limits, ""
    if len(sizes) > limits.max_objects:
        over = f"{len(sizes)} objects, more than its grant's {limits.max_objects}"
    elif sizes and max(sizes.values()) > limits.max_object_bytes:
        over = f"an object of {max(sizes.values())} bytes, more than its grant's {limits.max_object_bytes}"
    elif sum(sizes.values()) > limits.max_total_bytes:
        over = f"{sum(sizes.values())} bytes, more than its grant's {limits.max_total_bytes}"
    if over:
        for path in sizes:
            await in_thread(objects.delete, below + path)
        raise GrantNotWritten(f"the holder wrote {over} under {below}", "write within the namespace grant's limits")
    return sizes
