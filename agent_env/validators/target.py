"""The environment a validator checks, and how it is reached: its base URL (card at
`<base>/.well-known/agent-env.json`, data plane at `<base>/agentenv`, MCP where the card says) and the
credentials each part needs (none for a standalone server; for a gateway instance a role token for the card and
MCP, the admin token for the data plane).

A credential goes only to the target's own origin: an MCP interface the card places elsewhere is reached
without it (and the MCP check says so). Redirects are not followed, and what a server answers is read within
`MAX_ANSWER` bytes, so a hostile server can neither move a token nor flood the validator. That reading
(`read_within`, `json_within_depth`) is every validator's, the A2A ones' too (`a2a_wire`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import httpx

from agent_env import json_depth, tls
from agent_env.envs.card import RPC_PATH, WELL_KNOWN_PATH
from agent_env.gateway_client.wire import JsonObject

MAX_ANSWER = 4 * 1024 * 1024  # a card, a tool list or a data export larger than this is refused
TIMEOUT = httpx.Timeout(15.0, connect=5.0)
CONNECT_ATTEMPTS = 3  # a busy machine may drop a connection attempt; a request that never connected sent nothing
MCP_TRANSPORT = "mcp"
DEFAULT_MCP_PATH = "/mcp"


@dataclass(frozen=True)
class EnvTarget:
    """Where an environment is and what each of its parts is sent."""

    base: str  # no trailing slash
    card_headers: dict[str, str] = field(default_factory=dict)
    rpc_headers: dict[str, str] = field(default_factory=dict)
    mcp_headers: dict[str, str] = field(default_factory=dict)

    @classmethod
    def of_url(cls, url: str) -> EnvTarget:
        return cls(base=url.rstrip("/"))

    @property
    def card_url(self) -> str:
        return self.base + WELL_KNOWN_PATH

    @property
    def rpc_url(self) -> str:
        """The data plane: `<base>/agentenv` (the protocol's clients ignore the card's `url`)."""
        return self.base + RPC_PATH

    def mcp_url(self, card: Any) -> str:
        """The MCP endpoint: the card's `additionalInterfaces` entry whose transport is exactly "mcp", else
        `<base>/mcp`."""
        for entry in interfaces(card):
            if entry.get("transport") == MCP_TRANSPORT and isinstance(entry.get("url"), str) and entry["url"]:
                url: str = entry["url"]
                return url if urlsplit(url).scheme else f"{self.base}/{url.lstrip('/')}"
        return self.base + DEFAULT_MCP_PATH

    def headers_for(self, url: str, headers: dict[str, str]) -> dict[str, str]:
        """`headers` if `url` is on the target's own origin, else none (a credential stays with its origin)."""
        return headers if same_origin(url, self.base) else {}


def interfaces(card: Any) -> list[JsonObject]:
    entries = card.get("additionalInterfaces") if isinstance(card, dict) else None
    return [e for e in entries if isinstance(e, dict)] if isinstance(entries, list) else []


def same_origin(a: str, b: str) -> bool:
    sa, sb = urlsplit(a), urlsplit(b)
    return (sa.scheme, sa.hostname, sa.port) == (sb.scheme, sb.hostname, sb.port)


def client() -> httpx.AsyncClient:
    """The validators' HTTP client: no redirects followed, bounded waits, the install's CA bundle."""
    return httpx.AsyncClient(timeout=TIMEOUT, follow_redirects=False, verify=tls.context())


@dataclass
class EnvAnswer:
    """An HTTP answer read within MAX_ANSWER: its status, its body parsed as JSON (None if it is not JSON)."""

    status: int
    body: Any
    text: str
    content_type: str = ""

    @property
    def is_json(self) -> bool:
        return self.body is not None or self.text.strip() == "null"


class Unreachable(Exception):
    """The request got no answer (connection refused, timeout, an answer over the size limit)."""


class AnswerTooLarge(Unreachable):
    """The answer went past the size limit: read no further."""


class NotConnected(Unreachable):
    """The request never connected: nothing was sent, so it is safe to try again."""


async def read_within(http: httpx.AsyncClient, request: httpx.Request, limit: int = MAX_ANSWER) -> httpx.Response:
    """Send `request` and read its answer to at most `limit` bytes: every validator's reading of what a server
    under test answers (env or agent), so none reads an adversary's answer whole. Unreachable past the limit or on
    a transport error (NotConnected if nothing was sent)."""
    try:
        response = await http.send(request, stream=True)
    except (httpx.ConnectError, httpx.ConnectTimeout) as e:
        raise NotConnected(f"{request.method} {request.url} got no answer ({type(e).__name__}: {e})") from None
    except httpx.HTTPError as e:
        raise Unreachable(f"{request.method} {request.url} got no answer ({type(e).__name__}: {e})") from None
    try:
        raw = bytearray()
        async for chunk in response.aiter_bytes():
            raw += chunk
            if len(raw) > limit:
                raise AnswerTooLarge(f"{request.method} {request.url} answered more than {limit} bytes")
    except httpx.HTTPError as e:
        raise Unreachable(f"{request.method} {request.url} broke off ({type(e).__name__}: {e})") from None
    finally:
        await response.aclose()
    return httpx.Response(response.status_code, headers=response.headers, content=bytes(raw), request=request)


def json_within_depth(content: bytes) -> Any:
    """`content` parsed as JSON, or None if it is not JSON or is nested past json_depth.MAX_DEPTH."""
    try:
        return json_depth.loads(content)
    except ValueError:  # (TooDeep too)
        return None


async def request(
    http: httpx.AsyncClient, method: str, url: str, *, headers: dict[str, str], content: bytes | None = None
) -> EnvAnswer:
    send = {**headers, **({"content-type": "application/json"} if content is not None else {})}
    for attempt in range(1, CONNECT_ATTEMPTS + 1):
        try:
            response = await read_within(http, http.build_request(method, url, headers=send, content=content))
            break
        except NotConnected:
            if attempt == CONNECT_ATTEMPTS:
                raise
    text = response.content.decode("utf-8", "replace")
    return EnvAnswer(
        response.status_code, json_within_depth(response.content), text, response.headers.get("content-type", "")
    )


async def rpc(
    http: httpx.AsyncClient, target: EnvTarget, method: str, params: Any = None, *, id_: Any = "validate"
) -> EnvAnswer:
    """One JSON-RPC request to the target's data plane."""
    body = {"jsonrpc": "2.0", "id": id_, "method": method, "params": {} if params is None else params}
    return await request(http, "POST", target.rpc_url, headers=target.rpc_headers, content=json.dumps(body).encode())


def clip(text: str, limit: int = 200) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit] + "…"
