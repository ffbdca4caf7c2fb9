"""The gateway's HTTP surface: one FastAPI app, its error answers, and the guard at its door.

Agents (role token, `Authorization: Bearer aet_...`, valid until its run ends: 410 after; routes_agents.py):
    /envs/{id}/mcp                        MCP (streamable HTTP): the instance's tools for the caller's role
    GET  /envs/{id}/tools                 the same tools over REST
    POST /envs/{id}/tools/{name}          call one (body: the arguments object)
    GET  /envs/{id}/openapi.json          the REST tools of the caller's role as an OpenAPI document
    GET  /envs/{id}/.well-known/agent-env.json   the instance's card (tools of the caller's role)
    POST /envs/{id}/step, GET /envs/{id}/clock/time   step/v1 and clock/v1's get_time (routes_extensions.py)
The run (admin token, `Authorization: Bearer aea_...`, kept in the gateway's folder; routes_admin.py):
    POST /envs/{id}/agentenv              the JSON-RPC data plane, fanned out to every app
    /envs/{id}/{tools/disable, tools/enable, clock/*, triggers/*, trajectory, state}: the env-side extensions
    /envs/{id}/svc/{app}/...              an app's own data plane and extensions, as the card's children name them
    /admin/instances[/{id}[/tokens/{agent} | /servers/{app}/token | /roles/{role} | /agents/{agent} | /call | /snapshot | /trajectory]]
    POST /admin/runs/{run_id}/end         the run is over: end its tokens, close its instances, delete its hosted agents
    GET  /admin/runs/{run_id}/parked      trigger hits the run refused or could not take (with the error)
    /admin/agents[/{id}]                  hosted agents (PUT deploys one); /admin/human[/{turn}] people's turns
    GET  /admin/openapi.json              this admin API's OpenAPI document (nothing else serves docs)
Hosted agents (A2A; the card is public, messages need the admin token):
    /agents/{id}/                         JSON-RPC;  /agents/{id}/.well-known/agent-card.json  its card
Open: GET /ready (503 with what is wrong once the gateway lost data or its disk is below the free-space
floor); probes: GET /healthz (the process is up), GET /readyz (ready to serve; 503 with the reason). GET /metrics (admin token): Prometheus text format.

Every refusal is `{"error": "..."}` with its status: the exception handlers below are the one place
exceptions become answers. At the door (agent_env.guard.HostGuard): `Host` must be this server's
(loopback, an IP, or the configured public URL's name), a browser's `Origin` its own, and no body of a
type a page may send cross-site. Every agent is limited on its own (429 beyond): tool calls in flight,
MCP sessions and MCP requests open; every instance by its storage budgets (507 beyond, storage.py).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterable, Mapping

from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from agent_env import telemetry
from agent_env.envs.app import ToolError
from agent_env.errors import BadInput
from agent_env.gateway import composition, routes_admin, routes_agents, routes_extensions
from agent_env.gateway.env_instance import CompositionError
from agent_env.gateway.routes_common import gateway_of
from agent_env.gateway.service import Gateway, GatewayError
from agent_env.guard import HostGuard
from agent_env.json_depth import JSON_RPC, MCP
from agent_env.spec.roles import RoleError


def _error(status: int, message: str, headers: Mapping[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status, headers=headers)


async def _refused(request: Request, e: Exception) -> JSONResponse:
    assert isinstance(e, GatewayError)
    return _error(e.status, str(e))


async def _bad_input(request: Request, e: Exception) -> JSONResponse:  # bad specs, roles, compositions
    return _error(400, str(e))


async def _tool_error(request: Request, e: Exception) -> JSONResponse:  # an app refused the run's data
    return _error(422, str(e))


async def _http_error(request: Request, e: Exception) -> JSONResponse:  # no such path, method not allowed
    assert isinstance(e, HTTPException)
    return _error(e.status_code, str(e.detail), e.headers)


async def _invalid_params(request: Request, e: Exception) -> JSONResponse:  # only typed path/query params
    assert isinstance(e, RequestValidationError)
    return _error(400, "; ".join(str(err.get("msg")) for err in e.errors()))


async def ready(request: Request) -> JSONResponse:
    """503 with what is wrong once the gateway lost data (a failing trajectory writer) or its disk is low (below
    `[gateway] min_free_disk_mib`, where writes are refused): runs see it."""
    if problem := gateway_of(request).health():
        return JSONResponse({"ready": False, **problem}, status_code=503)
    return JSONResponse({"ready": True})


async def healthz(request: Request) -> Response:
    """Liveness: the process answers (probes carry no token, and this tells nothing)."""
    return Response(b"ok", media_type="text/plain")


async def readyz(request: Request) -> JSONResponse:
    """Readiness: started up (MCP sessions served, pending trigger hits resent), its store answers, no data lost,
    its disk above the free-space floor."""
    if not getattr(request.app.state, "serving", False):
        return JSONResponse({"ready": False, "reason": "starting up or shutting down"}, status_code=503)
    if reason := gateway_of(request).readiness():
        return JSONResponse({"ready": False, "reason": reason}, status_code=503)
    return JSONResponse({"ready": True})


class RawAsgi:
    """Starlette treats a function endpoint as request -> response; an object is served as raw ASGI."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.app(scope, receive, send)


def create_app(gateway: Gateway, *, urls: Iterable[str | None] = ()) -> HostGuard:
    """The gateway's ASGI app. `urls`: where it is reached besides 127.0.0.1 (the configured public URL)."""

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with gateway.mcp.lifespan():
            gateway.delivery.resend_pending()
            closer = asyncio.create_task(gateway.run_idle_closer())
            app.state.serving = True
            try:
                yield
            finally:
                app.state.serving = False
                closer.cancel()
        await gateway.shutdown()

    app = FastAPI(
        title="agent-env gateway",
        lifespan=lifespan,
        telemetry=telemetry.gateway_telemetry(),  # server spans only when [telemetry] traces is on
        openapi_url=None,
        docs_url=None,
        redoc_url=None,  # documents are served behind tokens only
        exception_handlers={
            GatewayError: _refused,
            RoleError: _bad_input,
            CompositionError: _bad_input,
            BadInput: _bad_input,
            ToolError: _tool_error,
            HTTPException: _http_error,
            RequestValidationError: _invalid_params,
        },
        routes=[  # plain Starlette routes: open, streaming, or hot (no FastAPI request machinery)
            Route("/ready", ready, methods=["GET"]),
            Route("/healthz", healthz, methods=["GET"]),
            Route("/readyz", readyz, methods=["GET"]),
            Route("/envs/{instance}/mcp", RawAsgi(routes_agents.mcp_endpoint), methods=["GET", "POST", "DELETE"]),
            # (before the REST call of a tool by name: see routes_extensions)
            Route("/envs/{instance}/tools/disable", routes_extensions.tool_access, methods=["POST"]),
            Route("/envs/{instance}/tools/enable", routes_extensions.tool_access, methods=["POST"]),
            Route("/envs/{instance}/tools/{name}", routes_agents.call_tool, methods=["POST"]),
            Route(  # an app's own extensions, as the composed card roots them (composition.py)
                "/envs/{instance}/svc/{app}/{path:path}",
                composition.relay,
                methods=["GET", "POST", "PUT", "PATCH", "DELETE"],
            ),
        ],
    )
    app.state.gateway = gateway
    app.include_router(routes_agents.router)
    app.include_router(routes_admin.router)
    app.include_router(routes_extensions.router)
    app.mount("/agents/{agent_id}", routes_admin.hosted_agents)
    # JSON-RPC paths answer a body nested too deeply in their own protocol's shape (the door refuses it)
    json_rpc = {r"/envs/[^/]+/agentenv": JSON_RPC, r"/envs/[^/]+/mcp": MCP, r"/agents/[^/]+/?": JSON_RPC}
    return HostGuard.serving(app, urls, json_rpc=json_rpc)
