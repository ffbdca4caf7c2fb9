"""The environment a validator checks, and how it is reached: its base URL (card at
`<base>/.well-known/agent-env.json`, data plane at `<base>/agentenv`, MCP where the card says) and the
credentials each part needs (none for a standalone server; for a gateway instance a role token for the card and
MCP, the admin token for the data plane).

A credential goes only to the target's own origin: an MCP interface the card places elsewhere is reached
without it (and the MCP check says so). Redirects are not followed, and what a server answers is read within
`MAX_ANSWER` bytes, so a hostile server can neither move a token nor flood the validator.
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


async def request(
    http: httpx.AsyncClient, method: str, url: str, *, headers: dict[str, str], content: bytes | None = None
) -> EnvAnswer:
    send = {**headers, **({"content-type": "application/json"} if content is not None else {})}
    for attempt in range(1, CONNECT_ATTEMPTS + 1):
        try:
            async with http.stream(method, url, headers=send, content=content) as response:
                raw = bytearray()
                async for chunk in response.aiter_bytes():
                    raw += chunk
                    if len(raw) > MAX_ANSWER:
                        raise Unreachable(f"{method} {url} answered more than {MAX_ANSWER // 1024 // 1024} MiB")
            break
        except (httpx.ConnectError, httpx.ConnectTimeout) as e:  # (nothing was sent: safe to try again)
            if attempt == CONNECT_ATTEMPTS:
                raise Unreachable(f"{method} {url}: {type(e).__name__}: {e}") from None
        except httpx.HTTPError as e:
            raise Unreachable(f"{method} {url}: {type(e).__name__}: {e}") from None
    text = raw.decode("utf-8", "replace")
    try:
        body = json_depth.loads(bytes(raw))
    except ValueError:  # (TooDeep too)
        body = None
    return EnvAnswer(response.status_code, body, text, response.headers.get("content-type", ""))


async def rpc(
    http: httpx.AsyncClient, target: EnvTarget, method: str, params: Any = None, *, id_: Any = "validate"
) -> EnvAnswer:
    """One JSON-RPC request to the target's data plane."""
    body = {"jsonrpc": "2.0", "id": id_, "method": method, "params": {} if params is None else params}
    return await request(http, "POST", target.rpc_url, headers=target.rpc_headers, content=json.dumps(body).encode())


def clip(text: str, limit: int = 200) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit] + "…"
