"""The agents' side of the gateway (role token): an instance's tools over MCP and REST, its card, its OpenAPI.

A role token names one agent of one instance; `role_caller` (a dependency) turns it into the `Caller`
every route here acts for, so an agent sees and calls only its role's tools. The two hot paths are no
FastAPI routes: MCP is the SDK's streamable HTTP app, served as raw ASGI (it streams, and it authenticates
before the SDK sees the request); a REST tool call is a plain Starlette route. Both are mounted by
`create_app` in http.py, under the same exception handlers.
"""

from __future__ import annotations

import json
import weakref
from typing import TYPE_CHECKING, Annotated, Any
from urllib.parse import quote

from fastapi import APIRouter, Depends
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.types import Receive, Scope, Send

from agent_env.envs import card as cards
from agent_env.gateway import composition, extensions
from agent_env.gateway.env_instance import EnvInstance
from agent_env.gateway.routes_common import gateway_of, json_of
from agent_env.gateway.service import Caller, GatewayError

if TYPE_CHECKING:
    import mcp.types as types


async def role_caller(request: Request, instance: str) -> Caller:
    return await gateway_of(request).authenticate(instance, request.headers.get("authorization"))


RoleCaller = Annotated[Caller, Depends(role_caller)]
router = APIRouter(include_in_schema=False)


async def mcp_endpoint(scope: Scope, receive: Receive, send: Send) -> None:
    """`/envs/{instance}/mcp` (raw ASGI): the caller's tools over MCP, within its limits."""
    request = Request(scope)
    gateway = gateway_of(request)
    try:
        caller = await gateway.authenticate(scope["path_params"]["instance"], request.headers.get("authorization"))
        scope["agentenv.caller"] = caller
        await gateway.serve_mcp(caller, scope, receive, send)  # refuses (raises) before it answers
    except GatewayError as e:
        await JSONResponse({"error": str(e)}, status_code=e.status)(scope, receive, send)


def listed(tools: list[types.Tool]) -> list[dict[str, Any]]:
    return [{"name": t.name, "description": t.description, "inputSchema": t.input_schema} for t in tools]


@router.get("/envs/{instance}/tools")
async def list_tools(request: Request, caller: RoleCaller) -> Response:
    return JSONResponse({"role": caller.role, "tools": listed(gateway_of(request).listing(caller))})


async def call_tool(request: Request) -> Response:
    """`POST /envs/{instance}/tools/{name}`, the REST hot path: a plain Starlette route (see `create_app`), so
    it skips FastAPI's per-request dependency solving (~50 us); it calls `role_caller` itself."""
    gateway, name = gateway_of(request), request.path_params["name"]
    caller = await role_caller(request, request.path_params["instance"])
    with gateway.limits.calling(caller.key, "rest"):  # a slow upload counts too: it holds the agent's slot
        arguments = await json_of(request)
        if not isinstance(arguments, dict):
            raise GatewayError(400, "the body must be a JSON object of the tool's arguments")
        outcome = await gateway.call(caller, name, arguments, via="rest")
    if "error" not in outcome:
        return JSONResponse({"result": outcome["result"]})
    status = 404 if outcome.get("unknown") else 403 if outcome.get("refused") else 422
    return JSONResponse({"error": outcome["error"]}, status_code=status)


@router.get("/envs/{instance}" + cards.WELL_KNOWN_PATH)
async def card(request: Request, instance: str) -> Response:
    """The instance's card: with the admin token every tool, with a role token the role's."""
    gateway = gateway_of(request)
    allowed: frozenset[str] | None = None  # the caller's tools (as exposed); None: every tool
    if gateway.is_admin(request.headers.get("authorization")):
        inst = await gateway.get(instance)
        shown: list[dict[str, Any]] = [
            {"name": name, "description": r.spec.description, "inputSchema": r.spec.input_schema}
            for name, r in inst.tools.items()
        ]
    else:
        caller = await role_caller(request, instance)
        inst, shown = caller.instance, listed(gateway.listing(caller))
        allowed = frozenset(t["name"] for t in shown)
    body = cards.environment_card(
        inst.spec.env,
        tools=(cards.EnvironmentTool(**t) for t in shown),
        operations=inst.operations,
        children=composition.children(inst, allowed),
    )
    assert body.capabilities is not None  # (environment_card fills it)
    body.capabilities.extensions = [*(body.capabilities.extensions or []), *extensions.card_extensions(inst)]
    return JSONResponse(cards.wire(body))


# The REST tools' OpenAPI document of each (open instance, role), kept while the tool listing it was built
# from is the gateway's current one (a role change makes a new listing). Keyed weakly by the instance: a
# closed instance (a finished run's) takes its documents with it.
_documents: weakref.WeakKeyDictionary[EnvInstance, dict[str, tuple[list[types.Tool], bytes]]] = (
    weakref.WeakKeyDictionary()
)


@router.get("/envs/{instance}/openapi.json")
async def tools_openapi(request: Request, caller: RoleCaller) -> Response:
    """The REST tools the caller's role may call, as an OpenAPI document (one path per tool)."""
    tools, role = gateway_of(request).listing(caller), caller.role
    per_role = _documents.setdefault(caller.instance, {})
    cached = per_role.get(role)
    if cached is None or cached[0] is not tools:
        cached = per_role[role] = (tools, json.dumps(tools_document(caller.instance, role, tools)).encode())
    return Response(cached[1], media_type="application/json")


ERROR = {
    "description": "refused or failed; `error` says why",
    "content": {
        "application/json": {
            "schema": {"type": "object", "required": ["error"], "properties": {"error": {"type": "string"}}}
        }
    },
}


def tools_document(inst: EnvInstance, role: str, tools: list[types.Tool]) -> dict[str, Any]:
    schemas: dict[str, Any] = {}
    paths = {
        f"/envs/{inst.spec.id}/tools/{quote(t.name, safe='')}": {
            "post": {
                "operationId": t.name,
                "summary": (t.description or t.name).split("\n", 1)[0],
                "description": t.description or "",
                "requestBody": {
                    "required": True,
                    "content": {"application/json": {"schema": _hoisted(t.input_schema, t.name, schemas)}},
                },
                "responses": {
                    "200": {
                        "description": "the tool's result",
                        "content": {
                            "application/json": {
                                "schema": {"type": "object", "required": ["result"], "properties": {"result": {}}}
                            }
                        },
                    },
                    "401": {"$ref": "#/components/responses/Error"},
                    "403": {"$ref": "#/components/responses/Error"},
                    "404": {"$ref": "#/components/responses/Error"},
                    "410": {"$ref": "#/components/responses/Error"},  # the token's run ended
                    "422": {"$ref": "#/components/responses/Error"},
                    "429": {"$ref": "#/components/responses/Error"},
                    "507": {"$ref": "#/components/responses/Error"},  # the instance past a storage budget
                },
            }
        }
        for t in tools
    }
    return {
        "openapi": "3.1.0",
        "info": {
            "title": f"{inst.spec.env or inst.spec.id}: the tools of role {role}",
            "version": "1",
            "description": f"Tools of instance {inst.spec.id!r} over REST; the same tools over MCP at "
            f"/envs/{inst.spec.id}/mcp.",
        },
        "paths": paths,
        "components": {
            "schemas": schemas,
            "responses": {"Error": ERROR},
            "securitySchemes": {"role": {"type": "http", "scheme": "bearer"}},
        },
        "security": [{"role": []}],
    }


def _hoisted(schema: dict[str, Any], prefix: str, components: dict[str, Any]) -> dict[str, Any]:
    """`schema` with its `$defs` moved into the document's components: OpenAPI resolves `#/...` refs against
    the whole document, not against the schema they sit in."""
    if "$defs" not in schema:
        return schema
    moved: dict[str, Any] = json.loads(json.dumps(schema).replace('"#/$defs/', f'"#/components/schemas/{prefix}.'))
    for name, sub in moved.pop("$defs").items():
        components[f"{prefix}.{name}"] = sub
    return moved
