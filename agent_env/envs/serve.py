"""Serve one app alone: `agent-env env serve MODULE:Class`.

    GET  /.well-known/agent-env.json   the environment card
    POST /agentenv                     the JSON-RPC data plane (data/reset, data/add, data/get)
    POST /mcp                          MCP over streamable HTTP
    GET  /ready                        200 once serving
    GET  /agentenv/interface-manifest  the interface manifests (get-interfaces/v1)
    POST /agentenv/ext/set_errors      make a tool fail on purpose (set-errors/v1)

The card declares these extensions (`envs/extensions/`): data-objects/v1 (data/get uploads the export under a
`write_namespace` grant; data/add reads parts naming objects), get-interfaces/v1, intake/v1 and set-errors/v1.

Every request passes `guard.HostGuard` first: a forged `Host`, another site's `Origin` or a body a
browser may send cross-site (text/plain, forms) is refused, so a web page cannot drive the server.

Two ways to run (SECURITY.md, "Roles"):
- Standalone, for protocol-v1 clients (whose reference client sends no auth): no token, bound to
  127.0.0.1. There are no roles to enforce here: every tool (hidden ones too) and the data plane are
  open to whoever reaches the port. A `_meta` role or agent a caller sends is its own claim, used by apps
  only to attribute what it writes; it opens nothing more.
- Managed, started by the gateway for one run (`run = "subprocess"`): with a token (`--token`, or
  $AGENT_ENV_SERVER_TOKEN, which the gateway sets). Every request but /ready must then carry
  `Authorization: Bearer <token>`, else 401 — the card too, as it lists hidden tools. Only the gateway
  holds the token, so `_meta` stamps (role, agent, virtual time) are the gateway's and are trusted.

Without a stamped time the server's own UTC clock stands in.
"""

from __future__ import annotations

import contextlib
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from agent_env import guard, json_depth
from agent_env.envs import card as cards
from agent_env.envs import dataplane
from agent_env.envs.app import App, ToolError
from agent_env.envs.app_instance import AppInstance, UnknownTool
from agent_env.envs.context import META_IDEMPOTENCY_KEY, Ctx
from agent_env.envs.extensions import data_objects, intake, interfaces, set_errors
from agent_env.envs.mcp import ChangeChannel, McpEndpoint, mcp_tool, tool_error, tool_result
from agent_env.guard import BodyTooLarge, read_body

DEFAULT_MAX_BODY = 16 * 1024 * 1024
OPEN_PATHS = frozenset({"/ready"})  # what a managed server answers without its token
FROM_GATEWAY = "agentenv.from_gateway"  # scope key: this request carried the server's token


def too_large(limit: int) -> JSONResponse:
    return JSONResponse({"error": f"request body over the {limit // 1024} KiB limit"}, status_code=413)


class ServerToken:
    """ASGI middleware of a managed server: every request but /ready must carry its token."""

    def __init__(self, app, token: str) -> None:
        self.app, self.token = app, token

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] in ("http", "websocket") and scope.get("path") not in OPEN_PATHS:
            header = next(
                (v.decode("latin-1") for k, v in scope.get("headers") or [] if k.lower() == b"authorization"), None
            )
            if not guard.tokens_equal(guard.bearer(header), self.token):
                await _refuse(scope, receive, send)
                return
            scope = {**scope, FROM_GATEWAY: True}
        await self.app(scope, receive, send)


async def _refuse(scope, receive, send) -> None:
    if scope["type"] == "websocket":
        await send({"type": "websocket.close", "code": 1008})
        return
    response = JSONResponse(
        {
            "error": "this env server was started by the agent-env gateway and answers only it: reach the app "
            "through the gateway (its role tokens), or send 'Authorization: Bearer <the server token>'"
        },
        status_code=401,
        headers={"www-authenticate": "Bearer"},
    )
    await response(scope, receive, send)


class SingleApp:
    """Tool host and data plane of one app instance."""

    operations = cards.OPERATIONS

    def __init__(
        self,
        instance: AppInstance,
        data_root: Path | None,
        token: str | None = None,
        *,
        max_object_bytes: int = DEFAULT_MAX_BODY,
    ) -> None:
        self.instance = instance
        self.data_root = data_root
        self.token = token
        self.max_object_bytes = max_object_bytes  # what one object a data/add part names may hold, as a body
        self.errors = set_errors.InjectedErrors(instance.app_cls.name, instance.tools)
        self._channel = ChangeChannel()
        self._tools = [mcp_tool(spec) for spec in instance.tools.values()]

    # -- tools --
    def channel(self, request: Request) -> ChangeChannel:
        return self._channel

    async def list_tools(self, request: Request):
        return self._tools

    def input_schema(self, name: str) -> dict[str, Any] | None:
        spec = self.instance.tools.get(name)
        return spec.input_schema if spec else None

    def stamps(self, request: Request, meta: dict[str, Any]) -> dict[str, Any]:
        """The `_meta` a call is run with. A managed server trusts only the gateway's stamps (the door
        already refuses others; this holds even if a route were left open). Standalone: the caller's claims."""
        if self.token is not None and not request.scope.get(FROM_GATEWAY):
            return {}
        return meta

    async def call_tool(self, request: Request, name: str, arguments: dict[str, Any], meta: dict[str, Any]):
        ctx = Ctx.from_meta(self.stamps(request, meta), default_now=datetime.now(UTC))
        injected = self.errors.next_call(name)
        if injected is not None:
            return tool_error(f"{injected.code}: {injected.message}", injected.fields())
        try:
            return tool_result(await self.instance.call_async(name, arguments, ctx))
        except UnknownTool:
            return tool_error(f"unknown tool {name!r}; tools: {', '.join(self.instance.tools)}")
        except ToolError as e:
            return tool_error(str(e))

    # -- data plane --
    async def reset(self) -> None:
        self.instance.reset()

    async def add(self, parts: list[dataplane.Part]) -> None:
        name = self.instance.app_cls.name
        for index, part in enumerate(parts):
            if data_objects.names_object(part):
                raw = await data_objects.read_object(part, index, self.max_object_bytes)
                payload, app = dataplane.json_payload(raw, part.kind), (part.metadata or {}).get(dataplane.META_APP)
            else:
                payload, app = dataplane.part_payload(part, self.data_root)
            if app not in (None, name):
                raise dataplane.InvalidParams(f"this server holds app {name!r}, not {app!r}")
            inner = payload.get(name)
            if set(payload) == {name} and isinstance(inner, dict):
                payload = inner  # {app: {table: rows}} as a composed env would take it
            # A gateway loading data for a run marks the part with a key, so a retried load applies once.
            key = (part.metadata or {}).get(META_IDEMPOTENCY_KEY)
            self.instance.load(payload, key=key if isinstance(key, str) else None)

    async def get(self) -> list[dataplane.Part]:
        return [dataplane.app_part(self.instance.app_cls.name, self.instance.export())]

    async def export_to(self, write_namespace: object) -> list[dataplane.Part]:
        """data/get with a grant (data-objects/v1): the export uploaded under it, the part naming the object."""
        grant = data_objects.parse_grant(write_namespace)  # refused before the export is read
        body = json.dumps(self.instance.export(), ensure_ascii=False).encode()
        return [await data_objects.upload_export(grant, self.instance.app_cls.name, body)]

    def card(self) -> cards.EnvironmentCard:
        app_cls = self.instance.app_cls
        return cards.environment_card(
            app_cls.name,
            tools=(
                cards.EnvironmentTool(name=t.name, description=t.description, inputSchema=t.input_schema)
                for t in app_cls.tools.values()
            ),
            operations=self.operations,
            extensions=[
                data_objects.CARD,
                interfaces.CARD,
                intake.card(self.instance, objects=True),
                set_errors.CARD,
            ],
        )


def create_app(
    app_cls: type[App],
    folder: Path,
    *,
    data_root: Path | None = None,
    max_body_bytes: int = DEFAULT_MAX_BODY,
    token: str | None = None,
    names: tuple[str, ...] = (),
):
    """The server as an ASGI app. `token`: a managed server's (see above); `names`: host names it answers
    for besides loopback names and IP literals."""
    instance = AppInstance(app_cls, folder)
    host = SingleApp(instance, data_root, token, max_object_bytes=max_body_bytes)
    endpoint = McpEndpoint(host, app_cls.name, app_cls.version, max_body_bytes=max_body_bytes)
    card = cards.wire(host.card())

    async def get_card(request: Request) -> JSONResponse:
        return JSONResponse(card)

    async def rpc(request: Request) -> JSONResponse:
        try:
            body = await read_body(request, max_body_bytes)
        except BodyTooLarge:
            return too_large(max_body_bytes)
        return JSONResponse(await dataplane.handle(body, host))

    async def ready(request: Request) -> JSONResponse:
        return JSONResponse({"ready": True})

    @contextlib.asynccontextmanager
    async def lifespan(app):
        async with endpoint.lifespan():
            yield
        instance.close()

    app = Starlette(
        routes=[
            Route(cards.WELL_KNOWN_PATH, get_card, methods=["GET"]),
            Route(cards.RPC_PATH, rpc, methods=["POST"]),
            Route("/ready", ready, methods=["GET"]),
            Route("/mcp", endpoint, methods=["GET", "POST", "DELETE"]),
            Route(set_errors.PATH, set_errors.endpoint(host.errors), methods=["POST"]),
            *interfaces.routes(app_cls.name, app_cls.tools.values()),
        ],
        lifespan=lifespan,
    )
    json_rpc = {cards.RPC_PATH: json_depth.JSON_RPC, "/mcp": json_depth.MCP}  # their protocols' error shapes
    return guard.HostGuard(ServerToken(app, token) if token else app, names=names, json_rpc=json_rpc)
