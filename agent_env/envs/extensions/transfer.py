"""Moving one object with a grant a caller handed us: a multipart POST through a namespace's upload policy, or a
GET of one object, over HTTPS.

A grant's URL and headers are its credential. They go to the grant's own URL and nowhere else: redirects are not
followed, no proxy or `.netrc` from the environment is used, and neither the URL nor a header ever appears in an
error or a log line (httpx's request log is dropped while a transfer runs). What comes back is bounded: a GET
stops reading at its limit.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import hashlib
import logging
import ssl
from collections.abc import AsyncIterator, Mapping

import httpx
from agentenv_protocol.transfers import WriteNamespaceGrant

from agent_env import tls

TIMEOUT = httpx.Timeout(60.0, connect=10.0)  # idle limits, as object stores' own clients use
TOTAL_S = 600.0  # and the whole transfer's: a store that trickles bytes cannot hold a request longer
_moving = contextvars.ContextVar("agentenv_object_transfer", default=False)


class ObjectMoveFailed(Exception):
    """The object store refused the transfer or could not be reached. The message names no URL or header."""


class TooLarge(Exception):
    """The object is over the limit it was read with."""


class _QuietWhileMoving(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not _moving.get()


logging.getLogger("httpx").addFilter(_QuietWhileMoving())


@contextlib.asynccontextmanager
async def _moving_with_a_grant(what: str) -> AsyncIterator[None]:
    """One transfer: httpx's request log quiet, its whole time bounded, its transport errors named without the
    URL (httpx's messages may hold it)."""
    token = _moving.set(True)
    try:
        async with asyncio.timeout(TOTAL_S):
            yield
    except TimeoutError:
        raise ObjectMoveFailed(f"{what} took over {TOTAL_S:.0f} s") from None
    except httpx.HTTPError as e:
        raise ObjectMoveFailed(f"{what} could not reach the object store ({_why(e)})") from None
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
    return httpx.AsyncClient(verify=tls.context(), follow_redirects=False, trust_env=False, timeout=TIMEOUT)


def _check(answer: httpx.Response, what: str) -> None:
    if answer.is_redirect:
        raise ObjectMoveFailed(f"the object store answered {what} with a redirect ({answer.status_code}), not followed")
    if not answer.is_success:
        raise ObjectMoveFailed(f"the object store refused {what} ({answer.status_code})")


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
