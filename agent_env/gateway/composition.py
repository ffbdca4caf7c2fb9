"""A composed instance's card names its apps as `children_environments`, and an app served by its own server (ours,
`run = "subprocess"`, or one at a URL written with any env SDK) appears there with the card it serves: its tools
and the protocol extensions it declares (data-objects/v1, get-interfaces/v1, intake/v1, set-errors/v1 ...).

The child's paths are relative to its own server; on the composed card they are rooted at `/svc/{app}` under the
instance's base (`/envs/{instance}`), where the gateway relays them to that app (`relay`), as the reference gateway
roots its children under `/svc/{key}`. An operation the gateway's own extension of the same URI serves under the
same name, verb and path (e.g. disable-tool/v1's `disable` at POST `/tools/disable`) keeps its path: the gateway
serves it and tells the app itself (foreign.py). A child's nested children and interfaces are dropped: agents
reach its tools through the instance's MCP endpoint.

Who may call a child's paths: the admin token only (they configure the app or move its data: the run's, not an
agent's). The gateway relays only what the child's card declares (its data plane's path, each extension's endpoint
and what lies under it), never its MCP endpoint (which would skip the roles), with the app's own server token
(never the caller's credential), and bodies both ways within the gateway's body limit.
"""

from __future__ import annotations

import posixpath
from collections.abc import Collection, Iterator
from urllib.parse import quote

import httpx2 as httpx
from agentenv_protocol.types import EnvironmentCapabilities, EnvironmentCard, EnvironmentExtension
from starlette.requests import Request
from starlette.responses import Response

from agent_env.gateway import extensions
from agent_env.gateway.callers import GatewayError
from agent_env.gateway.env_instance import EnvInstance
from agent_env.gateway.remote import RemoteApp
from agent_env.gateway.routes_common import bounded_body, gateway_of
from agent_env.gateway_client.wire import JsonObject

PREFIX = "/svc"
RELAYED_HEADERS = ("content-type", "accept")  # of the caller's: never its authorization, which is the gateway's

Operation = tuple[str | None, JsonObject | None, JsonObject, str, str]
"""(method name, method, the object naming its endpoint, HTTP verb, endpoint), as a client reads an extension."""


def child_prefix(app: str) -> str:
    return f"{PREFIX}/{quote(app, safe='')}"


def operations(params: JsonObject) -> list[Operation]:
    """Each operation an extension declares: a method without an endpoint of its own uses the extension's, its verb
    defaults to POST; an extension without methods is one POST to its endpoint. One with no text endpoint (a
    declaration such as intake/v1) has none."""
    methods = params.get("methods")
    found: list[tuple[str | None, JsonObject | None, JsonObject, str]] = (
        [
            (name, method, method if method.get("endpoint") else params, str(method.get("method") or "POST").upper())
            for name, method in methods.items()
            if isinstance(method, dict)
        ]
        if isinstance(methods, dict) and methods
        else [(None, None, params, "POST")]
    )
    return [
        (name, method, holder, verb, holder["endpoint"])
        for name, method, holder, verb in found
        if isinstance(holder.get("endpoint"), str) and holder["endpoint"]
    ]


def _gateway_operations() -> tuple[set[tuple[str, str | None, str, str]], set[tuple[str, str]]]:
    ops, paths = set(), set()
    for ext in extensions.CARD_EXTENSIONS:
        for name, _, _, verb, path in operations(ext.params or {}):
            ops.add((ext.uri, name, verb, path))
            paths.add((ext.uri, path))
    return ops, paths


_GATEWAY_OPS, _GATEWAY_PATHS = _gateway_operations()


def _rooted(extension: EnvironmentExtension, prefix: str) -> EnvironmentExtension:
    """The extension with each path the gateway relays rooted at `prefix` (see above)."""
    params: JsonObject = extension.model_copy(deep=True).params or {}

    def under(path: str) -> str:
        return prefix + path if path.startswith("/") else path

    ops = [
        (name, method, holder, (extension.uri, name, verb, path) in _GATEWAY_OPS)
        for name, method, holder, verb, path in operations(params)
    ]
    endpoint = params.get("endpoint")
    keep_endpoint = any(ours and holder is params for _, _, holder, ours in ops) or (
        all(holder is not params for _, _, holder, _ in ops) and (extension.uri, endpoint) in _GATEWAY_PATHS
    )
    for _, method, holder, ours in ops:
        if ours:
            continue
        if holder is not params:
            holder["endpoint"] = under(holder["endpoint"])
        elif keep_endpoint and method is not None:
            method["endpoint"] = under(params["endpoint"])  # its own path now: the shared one stays the gateway's
    if isinstance(endpoint, str) and not keep_endpoint:
        params["endpoint"] = under(endpoint)
    return extension.model_copy(update={"params": params or extension.params})


def child_card(name: str, app: object, visible: Collection[str] | None) -> EnvironmentCard:
    """App `name`'s card as a child of the composed card; `visible`: the tools (by the app's own names) the caller
    sees, None for all. An app in the gateway's process, or a plain MCP server, has a card of its name only."""
    card = app.card if isinstance(app, RemoteApp) else None
    if card is None:
        return EnvironmentCard(name=name, capabilities=EnvironmentCapabilities(operations=[]))
    prefix = child_prefix(name)
    capabilities = card.capabilities.model_copy(
        update={
            "tools": [t for t in card.capabilities.tools or [] if visible is None or t.name in visible],
            "extensions": [_rooted(e, prefix) for e in card.capabilities.extensions or []],
        }
    )
    return card.model_copy(
        update={
            "name": name,  # the app's name in the instance (two apps may serve one card name), as in `/svc/{app}`
            "url": prefix + card.url if card.url.startswith("/") else card.url,
            "additionalInterfaces": [],
            "capabilities": capabilities,
            "children_environments": None,
        }
    )


def children(inst: EnvInstance, allowed: frozenset[str] | None) -> Iterator[EnvironmentCard]:
    """The instance's apps as its card's children; `allowed`: the caller's role's tools (as exposed), None: all."""
    for name, app in inst.apps.items():
        visible = (
            None
            if allowed is None
            else {route.spec.name for exposed, route in inst.tools.items() if route.app is app and exposed in allowed}
        )
        yield child_card(name, app, visible)


def declared_paths(name: str, app: RemoteApp) -> list[str]:
    """The paths of `app`'s own server the gateway relays: those its child card on the composed card roots under
    `/svc/{name}` (its data plane's, each of its extensions' endpoints), not those the gateway serves itself."""
    if app.card is None:
        return []
    card, prefix = child_card(name, app, None), child_prefix(name)
    paths = [card.url] if app.data_plane else []
    for extension in card.capabilities.extensions or []:
        params = extension.params or {}
        if isinstance(params.get("endpoint"), str):
            paths.append(params["endpoint"])
        paths += [path for *_, path in operations(params)]
    return [p.removeprefix(prefix) for p in paths if p.startswith(prefix + "/")]


def _relayed(name: str, app: RemoteApp, path: str) -> bool:
    if path.startswith("//") or posixpath.normpath(path) != path.rstrip("/"):
        return False  # another host's path, or dot segments
    if path.rstrip("/") in ("", app.mcp_path) or path.startswith(app.mcp_path + "/"):
        return False  # the server's root, or its MCP endpoint (agents reach its tools through the gateway's)
    return any(path == p or path.startswith(p.rstrip("/") + "/") for p in declared_paths(name, app))


async def relay(request: Request) -> Response:
    """`/envs/{instance}/svc/{app}/{path}` (admin token): the request relayed to that app's own server."""
    gateway, instance = gateway_of(request), request.path_params["instance"]
    name, path = request.path_params["app"], "/" + request.path_params["path"]
    if not gateway.is_admin(request.headers.get("authorization")):
        raise GatewayError(401, f"{request.method} {child_prefix(name)}{path} needs the gateway's admin token")
    inst = await gateway.get(instance)
    app = inst.apps.get(name)
    if not isinstance(app, RemoteApp) or app.card is None:
        served = [n for n, a in inst.apps.items() if isinstance(a, RemoteApp) and a.card is not None]
        raise GatewayError(
            404,
            f"instance {instance!r} has no app {name!r} with a card of its own (apps served by their own server: "
            f"{', '.join(served) or 'none'})",
        )
    if not _relayed(name, app, path):
        raise GatewayError(
            404,
            f"app {name!r} declares no {path!r} on its card; the gateway relays only the paths it declares: "
            f"{', '.join(sorted(set(declared_paths(name, app)))) or 'none'}",
        )
    body = await bounded_body(request, gateway.max_body_bytes)
    headers = {h: request.headers[h] for h in RELAYED_HEADERS if h in request.headers}
    try:
        status, media, content = await app.relay(
            request.method, path, request.url.query, body, headers, gateway.max_body_bytes
        )
    except httpx.HTTPError as e:
        raise GatewayError(
            502, f"app {name!r} at {app.base_url} did not answer {path} ({type(e).__name__}); is its server running?"
        ) from None
    if content is None:
        raise GatewayError(
            502, f"app {name!r} answered {path} with over the gateway's {gateway.max_body_bytes // 1024} KiB body limit"
        )
    return Response(content, status_code=status, media_type=media)
