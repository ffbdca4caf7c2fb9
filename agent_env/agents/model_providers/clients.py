"""SDK clients shared per endpoint and key, so their connection pools are reused across turns and calls.

A client's HTTP pool belongs to the event loop it was first used on, so clients are kept per loop. Each client
gets an HTTP client of ours: TLS from `agent_env.tls`, no redirects followed (a key goes only to its base_url's
origin), and no credential or account header we did not configure (the SDKs read OPENAI_*/ANTHROPIC_* from the
environment; a key for one origin must not travel to another because the process happened to have it).
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Callable
from typing import Any, TypeVar

import httpx2

from agent_env import tls
from agent_env.config import ModelSettings

T = TypeVar("T")
NO_KEY = "no-key"  # the SDKs insist on a key; this one is stripped from every request before it leaves

_clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[tuple, Any]] = weakref.WeakKeyDictionary()
_AMBIENT = ("openai-organization", "openai-project")
_CREDENTIALS = ("authorization", "x-api-key")


def shared(kind: str, config: ModelSettings, api_key: str | None, build: Callable[[httpx2.AsyncClient], T]) -> T:
    """The SDK client of `kind` for this endpoint and key, built on first use in this event loop."""
    per_loop = _clients.setdefault(asyncio.get_running_loop(), {})
    key = (kind, config.base_url, api_key, config.timeout, config.max_retries)
    if (client := per_loop.get(key)) is None:
        client = per_loop[key] = build(_http_client(with_key=api_key is not None, timeout=config.timeout))
    return client


def _http_client(*, with_key: bool, timeout: float) -> httpx2.AsyncClient:
    strip = _AMBIENT if with_key else _AMBIENT + _CREDENTIALS

    async def only_what_we_configured(request: httpx2.Request) -> None:
        for header in strip:
            request.headers.pop(header, None)

    return httpx2.AsyncClient(
        verify=tls.context(),
        follow_redirects=False,
        timeout=timeout,
        event_hooks={"request": [only_what_we_configured]},
    )
