"""What every HTTP server agent-env starts checks at its door (SECURITY.md, "the network").

- `Host` must name this server: a loopback name, an IP literal, or a name the operator configured.
  A web page the user visits can point its own domain at 127.0.0.1 (DNS rebinding); its requests then
  carry that domain in `Host`, and are refused here.
- `Origin`, when a browser sends one, must be this server's own origin (or one the operator allowed):
  another site's page may not drive a local server.
- A request with a body must not be of a form a browser sends cross-site without asking first
  (`text/plain`, form encodings): our APIs speak JSON, tar and the protocols' own types. The one exception is
  a multipart upload under `form_paths`: the protocol's upload policies (namespace grants) and staging take one,
  at capability URLs (a signed token, an unguessable id) that another site's page cannot name.
- Bearer tokens are compared in constant time and as bytes, so a malformed one is a 401, never a 500.
- Each piece of a body reaches the app only once measured: JSON nested deeper than 64 levels is refused
  here before anything parses it, and a RecursionError never becomes a 500 (`agent_env.json_depth`).
"""

from __future__ import annotations

import hmac
import ipaddress
import json
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from agent_env.json_depth import JsonBodies

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.types import ASGIApp, Receive, Scope, Send

LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain"})
# Content types a browser may send cross-site without a preflight; none of our endpoints takes them.
SIMPLE_CONTENT_TYPES = ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data")
BODY_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})


def tokens_equal(given: str | None, expected: str | None) -> bool:
    """Constant-time comparison that never raises: any byte string is a (possibly wrong) token."""
    if not given or not expected:
        return False
    # surrogatepass: even a lone surrogate (from a JSON string, say) encodes, so this cannot raise
    return hmac.compare_digest(given.encode("utf-8", "surrogatepass"), expected.encode("utf-8", "surrogatepass"))


def bearer(header: str | None) -> str | None:
    """The token of an `Authorization: Bearer ...` header, or None for anything else."""
    if header and header[:7].lower() == "bearer ":
        return header[7:].strip() or None
    return None


def host_name(host: str) -> str:
    """The name part of a `Host` value (`[::1]:80` -> `::1`, `a.b:8` -> `a.b`), lower-cased."""
    host = host.strip().lower()
    if host.startswith("["):
        return host[1:].split("]", 1)[0]
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


def is_ip_literal(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


class HostGuard:
    """ASGI middleware enforcing the rules above for HTTP (and WebSocket) requests.

    `names`: host names besides loopback names and IP literals (e.g. the host of a configured public
    URL). `origins`: origins besides the server's own that may send requests (e.g. an explorer page).
    `json_rpc`: the app's JSON-RPC paths, answered in their protocol's shape (see `JsonBodies`).
    `form_paths`: path prefixes below which a multipart form is taken (capability URLs only: module doc).
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        names: Iterable[str] = (),
        origins: Iterable[str] = (),
        json_rpc: Mapping[str, int] | None = None,
        form_paths: Iterable[str] = (),
    ) -> None:
        self.app = JsonBodies(app, json_rpc=json_rpc)
        self.form_paths = tuple(form_paths)
        self.names = LOOPBACK_NAMES | {n.lower() for n in names if n}
        self.origins = {o.rstrip("/").lower() for o in origins if o}
        self._hosts_seen: set[bytes] = set()  # Host values already allowed (bounded): one set lookup per request

    @classmethod
    def serving(
        cls, app: ASGIApp, urls: Iterable[str | None] = (), *, json_rpc: Mapping[str, int] | None = None
    ) -> HostGuard:
        """`app` guarded, also answering for the URLs it is reached at (e.g. a configured public URL,
        perhaps behind a TLS proxy): their host names and origins are its own."""
        parts = [urlsplit(u) for u in urls if u]
        return cls(
            app,
            names=[p.hostname for p in parts if p.hostname],
            origins=[f"{p.scheme}://{p.netloc.rpartition('@')[2]}" for p in parts if p.scheme and p.netloc],
            json_rpc=json_rpc,
        )

    def allowed_host(self, host: str) -> bool:
        name = host_name(host)
        return bool(name) and (name in self.names or is_ip_literal(name))

    def refusal(self, scope: Scope) -> tuple[int, str] | None:
        # Servers hand ASGI lower-cased header names; only three of them matter here.
        headers = {k: v for k, v in scope.get("headers") or () if k in (b"host", b"origin", b"content-type")}
        raw_host = headers.get(b"host", b"")
        host = raw_host.decode("latin-1")
        if raw_host not in self._hosts_seen:
            if not self.allowed_host(host):
                return 421, (
                    f"this server does not answer for host {host[:100]!r}; use its address "
                    "(127.0.0.1 or the configured URL)"
                )
            if len(self._hosts_seen) < 64:
                self._hosts_seen.add(raw_host)
        origin = headers[b"origin"].decode("latin-1") if b"origin" in headers else None
        if origin is not None and origin.lower() != "null":
            own = f"{'https' if scope.get('scheme') in ('https', 'wss') else 'http'}://{host}".lower()
            if origin.rstrip("/").lower() not in self.origins | {own}:
                return 403, f"cross-origin requests are refused (Origin {origin[:100]!r})"
        elif origin is not None:  # `Origin: null`: a sandboxed page or a file; never ours
            return 403, "cross-origin requests are refused (Origin 'null')"
        if scope.get("method") in BODY_METHODS:
            ctype = headers.get(b"content-type", b"").decode("latin-1").split(";", 1)[0].strip().lower()
            multipart = ctype == "multipart/form-data" and scope.get("method") in ("POST", "PUT")
            if multipart and self.form_paths and str(scope.get("path", "")).startswith(self.form_paths):
                return None
            if ctype in SIMPLE_CONTENT_TYPES:
                return 415, f"content type {ctype!r} is not accepted here; send application/json"
        return None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket"):
            refused = self.refusal(scope)
            if refused is not None:
                status, message = refused
                if scope["type"] == "websocket":
                    await send({"type": "websocket.close", "code": 1008})
                    return
                body = json.dumps({"error": message}).encode()
                await send(
                    {
                        "type": "http.response.start",
                        "status": status,
                        "headers": [
                            (b"content-type", b"application/json"),
                            (b"content-length", str(len(body)).encode()),
                        ],
                    }
                )
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)


class BodyTooLarge(Exception):
    """A request body over its server's limit (each server answers it 413 in its own shape)."""


async def read_body(request: Request, limit: int) -> bytes:
    """The request body, refused (BodyTooLarge) past `limit` bytes without reading the rest: the one reader of
    every server's bodies (a declared length over the limit is refused before a byte is read)."""
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise BodyTooLarge
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge
        chunks.append(chunk)
    return b"".join(chunks)
