"""The gateway's HTTP surface.

Agents (role token, `Authorization: Bearer aet_...`):
    /envs/{id}/mcp                        MCP (streamable HTTP): the instance's tools for the caller's role
    GET  /envs/{id}/tools                 the same tools over REST
    POST /envs/{id}/tools/{name}          call one (body: the arguments object)
    GET  /envs/{id}/.well-known/agent-env.json   the instance's card (tools of the caller's role)
The run (admin token, `Authorization: Bearer aea_...`, kept in the gateway's folder):
    POST /envs/{id}/agentenv              the JSON-RPC data plane, fanned out to every app
    /admin/instances[/{id}[/tokens/{agent} | /servers/{app}/token | /roles/{role} | /agents/{agent} | /call | /snapshot | /trajectory]]
    POST /admin/runs/{run_id}/end         the run is over: close its instances, delete its hosted agents
    GET  /admin/runs/{run_id}/parked      trigger hits the run refused or could not take (with the error)
    /admin/agents[/{id}]                  hosted agents (PUT deploys one); /admin/human[/{turn}] people's turns
Hosted agents (A2A; the card is public, messages need the admin token):
    /agents/{id}/                         JSON-RPC;  /agents/{id}/.well-known/agent-card.json  its card

At the door (agentenv.guard.HostGuard): `Host` must be this server's (loopback, an IP, or the configured
public URL's name), a browser's `Origin` its own, and no body of a type a page may send cross-site.
Every agent is limited on its own (429 beyond): tool calls in flight, MCP sessions and MCP requests open.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ValidationError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Mount, Route

from agentenv.agents.host import CARD_PATH as AGENT_CARD_PATH
from agentenv.agents.host import DeployRequest
from agentenv.envs import card as cards
from agentenv.envs import dataplane
from agentenv.envs.app import ToolError
from agentenv.envs.serve import BodyTooLarge, read_body
from agentenv.errors import BadInput, from_validation_error
from agentenv.gateway import tokens
from agentenv.gateway.instance import CompositionError
from agentenv.gateway.roles import RoleError
from agentenv.gateway.service import Caller, Gateway, GatewayError
from agentenv.gateway.spec import InstanceSpec, RoleSpec
from agentenv.guard import HostGuard
from agentenv.spec.world_run import WorldPush


class CallRequest(BaseModel):
    tool: str
    arguments: dict[str, Any] = {}
    agent: str | None = None
    role: str | None = None
    idempotency_key: str | None = None
    cause: str | None = None  # e.g. "trigger dana_replies", shown in the trajectory
    at: datetime | None = None  # the world's time of a run's own call (the run knows it exactly)


class RoleChange(BaseModel):
    enable: list[str] = []
    disable: list[str] = []


class AgentRole(BaseModel):
    role: str


class HumanAnswer(BaseModel):
    answer: str


class LoadRequest(BaseModel):
    parts: list[dict[str, Any]]
    idempotency_key: str | None = None
    reset: bool = False


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


class RawAsgi:
    """Starlette treats a function endpoint as request -> response; an object is served as raw ASGI."""

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        await self.app(scope, receive, send)


def create_app(gateway: Gateway, *, urls: Iterable[str | None] = ()) -> HostGuard:
    """The gateway's ASGI app. `urls`: where it is reached besides 127.0.0.1 (the configured public URL)."""
    limit = gateway.max_body_bytes

    async def body_json(request: Request) -> Any:
        try:
            raw = await read_body(request, limit)
        except BodyTooLarge:
            raise GatewayError(413, f"request body over the {limit // 1024} KiB limit") from None
        try:
            return json.loads(raw) if raw else {}
        except ValueError:
            raise GatewayError(400, "the body is not valid JSON") from None

    def parse(model: type[BaseModel], data: Any, what: str) -> Any:
        try:
            return model.model_validate(data)
        except ValidationError as e:
            raise GatewayError(400, str(from_validation_error(e, what))) from None

    def admin_only(request: Request) -> None:
        if not gateway.is_admin(request.headers.get("authorization")):
            raise GatewayError(401, "this needs the gateway's admin token")

    def guarded(handler):
        async def endpoint(request: Request) -> Response:
            try:
                return await handler(request)
            except GatewayError as e:
                return _error(e.status, str(e))
            except (RoleError, CompositionError, BadInput) as e:
                return _error(400, str(e))
        return endpoint

    # -- agents --

    async def mcp_endpoint(scope, receive, send) -> None:
        request = Request(scope)
        try:
            caller = await gateway.authenticate(scope["path_params"]["instance"], request.headers.get("authorization"))
            scope["agentenv.caller"] = caller
            await gateway.serve_mcp(caller, scope, receive, send)  # refuses (raises) before it answers
        except GatewayError as e:
            await _error(e.status, str(e))(scope, receive, send)

    async def caller_of(request: Request) -> Caller:
        return await gateway.authenticate(request.path_params["instance"], request.headers.get("authorization"))

    async def list_tools(request: Request) -> Response:
        caller = await caller_of(request)
        return JSONResponse({"role": caller.role, "tools": [
            {"name": t.name, "description": t.description, "inputSchema": t.input_schema}
            for t in gateway.listing(caller)]})

    async def call_tool(request: Request) -> Response:
        caller = await caller_of(request)
        with gateway.limits.calling(caller.key):  # a slow upload counts too: it holds the agent's slot
            arguments = await body_json(request)
            if not isinstance(arguments, dict):
                raise GatewayError(400, "the body must be a JSON object of the tool's arguments")
            outcome = await gateway.call(caller, request.path_params["name"], arguments, via="rest")
        if "error" not in outcome:
            return JSONResponse({"result": outcome["result"]})
        status = 404 if outcome.get("unknown") else 403 if outcome.get("refused") else 422
        return _error(status, outcome["error"])

    async def card(request: Request) -> Response:
        instance_id = request.path_params["instance"]
        if gateway.is_admin(request.headers.get("authorization")):
            inst = await gateway.get(instance_id)
            listed: list[dict[str, Any]] = [{"name": name, "description": r.spec.description, "inputSchema": r.spec.input_schema}
                      for name, r in inst.tools.items()]
        else:
            caller = await caller_of(request)
            inst = caller.instance
            listed = [{"name": t.name, "description": t.description, "inputSchema": t.input_schema}
                      for t in gateway.listing(caller)]
        body = cards.EnvironmentCard(
            name=inst.spec.env,
            capabilities=cards.Capabilities(tools=[cards.CardTool(**t) for t in listed], extensions=[],
                                            operations=list(inst.operations)),
            children_environments=[
                cards.EnvironmentCard(name=name, additionalInterfaces=[],
                                      capabilities=cards.Capabilities(operations=[]))
                for name in inst.apps],
        )
        return JSONResponse(body.wire())

    # -- the run --

    async def data_plane(request: Request) -> Response:
        admin_only(request)
        inst = await gateway.get(request.path_params["instance"])
        try:
            raw = await read_body(request, limit)
        except BodyTooLarge:
            return _error(413, f"request body over the {limit // 1024} KiB limit")
        return JSONResponse(await dataplane.handle(raw, inst))

    async def instances(request: Request) -> Response:
        admin_only(request)
        return JSONResponse({"instances": gateway.list_instances()})

    async def instance(request: Request) -> Response:
        admin_only(request)
        instance_id = request.path_params["instance"]
        if request.method == "DELETE":
            keep = request.query_params.get("keep_data") in ("1", "true")
            return JSONResponse({"deleted": await gateway.delete(instance_id, keep_data=keep)})
        if request.method == "GET":
            inst = await gateway.get(instance_id)
            return JSONResponse(describe(inst))
        data = await body_json(request)
        if isinstance(data, dict):
            data.setdefault("id", instance_id)
        spec = parse(InstanceSpec, data, f"instance {instance_id}")
        if spec.id != instance_id:
            raise GatewayError(400, f"the body's id {spec.id!r} differs from the path's {instance_id!r}")
        try:
            spec.agent_roles()
        except ValueError as e:
            raise GatewayError(400, str(e)) from None
        return JSONResponse(describe(await gateway.put(spec)))

    def describe(inst) -> dict[str, Any]:
        return {"id": inst.spec.id, "env": inst.spec.env, "apps": list(inst.apps), "agents": inst.agents,
                "roles": {role: sorted(tools) for role, tools in inst.allowed.items()},
                "paths": {"mcp": f"/envs/{inst.spec.id}/mcp", "tools": f"/envs/{inst.spec.id}/tools",
                          "card": f"/envs/{inst.spec.id}{cards.CARD_PATH}"}}

    async def token(request: Request) -> Response:
        admin_only(request)
        return JSONResponse({"token": await gateway.token(request.path_params["instance"], request.path_params["agent"])})

    async def server_token(request: Request) -> Response:  # for a sandbox deploy_env starts (envs.py)
        admin_only(request)
        p = request.path_params
        return JSONResponse({"token": tokens.server_token(gateway.key, p["instance"], p["app"])})

    async def role(request: Request) -> Response:
        admin_only(request)
        instance_id, name = request.path_params["instance"], request.path_params["role"]
        if request.method == "PATCH":
            change = parse(RoleChange, await body_json(request), "role change")
            allowed = await gateway.change_role(instance_id, name, change.enable, change.disable)
        else:
            allowed = await gateway.set_role(instance_id, name, parse(RoleSpec, await body_json(request), "role"))
        return JSONResponse({"role": name, "tools": sorted(allowed)})

    async def world(request: Request) -> Response:
        admin_only(request)
        push = parse(WorldPush, await body_json(request), "world")
        return JSONResponse({"hits": await gateway.push_world(request.path_params["instance"], push)})

    async def agent(request: Request) -> Response:
        admin_only(request)
        body = parse(AgentRole, await body_json(request), "agent")
        await gateway.set_agent_role(request.path_params["instance"], request.path_params["agent"], body.role)
        return JSONResponse({"agent": request.path_params["agent"], "role": body.role})

    async def admin_call(request: Request) -> Response:
        admin_only(request)
        body = parse(CallRequest, await body_json(request), "call")
        inst = await gateway.get(request.path_params["instance"])
        if body.role and body.role not in inst.spec.roles:
            raise GatewayError(400, f"no role {body.role!r} (roles: {', '.join(inst.spec.roles)})")
        if body.agent and body.agent not in inst.agents:
            raise GatewayError(400, f"no agent {body.agent!r} (agents: {', '.join(inst.agents)})")
        role = body.role or (None if body.agent else next(iter(inst.spec.roles)))  # default: the first role
        caller = Caller(inst, body.agent or f"@{role}", as_role=None if body.agent else role)
        return JSONResponse(await gateway.call(caller, body.tool, body.arguments, via="run",
                                               idempotency_key=body.idempotency_key, cause=body.cause, at=body.at))

    async def load(request: Request) -> Response:
        """data/add with an idempotency key (and optionally a reset first): what the run's steps use."""
        admin_only(request)
        body = parse(LoadRequest, await body_json(request), "load")
        inst = await gateway.get(request.path_params["instance"])
        try:
            parts = dataplane.check_parts({"parts": body.parts})
            if body.reset:
                await inst.reset()
            await inst.add(parts, key=body.idempotency_key)
        except dataplane.InvalidParams as e:
            raise GatewayError(400, str(e)) from None
        except ToolError as e:
            raise GatewayError(422, str(e)) from None
        return JSONResponse({"loaded": len(parts)})

    async def snapshot(request: Request) -> Response:
        admin_only(request)
        inst = await gateway.get(request.path_params["instance"])
        if request.method == "GET":
            return Response(await inst.snapshot(), media_type="application/x-tar")
        try:
            await inst.restore(await read_body(request, 1024 * 1024 * 1024))
        except ValueError as e:
            raise GatewayError(400, str(e)) from None
        return JSONResponse({"restored": inst.spec.id})

    async def trajectory(request: Request) -> Response:
        admin_only(request)
        try:
            after = int(request.query_params.get("after", "0") or 0)
        except ValueError:
            raise GatewayError(400, "`after` must be an entry's seq number") from None
        last = request.query_params.get("last") in ("1", "true")
        return JSONResponse({"entries": await gateway.read_trajectory(request.path_params["instance"], after,
                                                                      last=last)})

    # -- hosted agents --

    async def agent_endpoint(scope, receive, send) -> None:
        request = Request(scope)
        if not request.url.path.endswith(AGENT_CARD_PATH) and not gateway.is_admin(request.headers.get("authorization")):
            await _error(401, "talking to a hosted agent needs the gateway's admin token")(scope, receive, send)
            return
        await gateway.agents(scope, receive, send)

    async def agents(request: Request) -> Response:
        admin_only(request)
        return JSONResponse({"agents": gateway.agents.list()})

    async def hosted_agent(request: Request) -> Response:
        admin_only(request)
        agent_id = request.path_params["agent_id"]
        if request.method == "DELETE":
            return JSONResponse({"deleted": await gateway.agents.delete(agent_id)})
        if request.method == "GET":
            spec = gateway.agents.get(agent_id)
            if spec is None:
                raise GatewayError(404, f"no agent {agent_id!r} is hosted here")
            return JSONResponse(spec.model_dump(mode="json"))
        data = await body_json(request)
        if isinstance(data, dict):
            data.setdefault("id", agent_id)
        deploy = parse(DeployRequest, data, f"agent {agent_id}")
        if deploy.id != agent_id:
            raise GatewayError(400, f"the body's id {deploy.id!r} differs from the path's {agent_id!r}")
        try:
            spec = gateway.agents.put(deploy)
        except ValueError as e:
            raise GatewayError(400, str(e)) from None
        return JSONResponse({**spec.model_dump(mode="json"), "path": f"/agents/{spec.id}/"})

    async def human_turns(request: Request) -> Response:
        admin_only(request)
        return JSONResponse({"turns": gateway.agents.pending()})

    async def human_answer(request: Request) -> Response:
        admin_only(request)
        body = parse(HumanAnswer, await body_json(request), "answer")
        turn = gateway.agents.reply(request.path_params["turn"], body.answer)
        if turn is None:
            raise GatewayError(404, f"no turn {request.path_params['turn']!r} (see `agent-env agents pending`)")
        if turn["answer"] != body.answer:
            raise GatewayError(409, f"turn {turn['id']!r} is {turn['state']}; it cannot be answered now")
        return JSONResponse(turn)

    async def ready(request: Request) -> Response:
        """503 with what is wrong once the gateway lost data (a failing trajectory writer): runs see it."""
        if problem := gateway.health():
            return JSONResponse({"ready": False, **problem}, status_code=503)
        return JSONResponse({"ready": True})

    async def end_run(request: Request) -> Response:
        admin_only(request)
        return JSONResponse(await gateway.end_run(request.path_params["run_id"]))

    async def parked_hits(request: Request) -> Response:
        admin_only(request)
        return JSONResponse({"parked": gateway.delivery.parked(request.path_params["run_id"])})

    @contextlib.asynccontextmanager
    async def lifespan(app):
        async with gateway.mcp.lifespan():
            gateway.delivery.resend_pending()
            closer = asyncio.create_task(gateway.run_idle_closer())
            try:
                yield
            finally:
                closer.cancel()
        await gateway.shutdown()

    base = "/envs/{instance}"
    return HostGuard.serving(Starlette(routes=[
        Route("/ready", ready, methods=["GET"]),
        Route(base + "/mcp", RawAsgi(mcp_endpoint), methods=["GET", "POST", "DELETE"]),
        Route(base + "/tools", guarded(list_tools), methods=["GET"]),
        Route(base + "/tools/{name}", guarded(call_tool), methods=["POST"]),
        Route(base + cards.CARD_PATH, guarded(card), methods=["GET"]),
        Route(base + cards.RPC_PATH, guarded(data_plane), methods=["POST"]),
        Route("/admin/instances", guarded(instances), methods=["GET"]),
        Route("/admin/instances/{instance}", guarded(instance), methods=["GET", "PUT", "DELETE"]),
        Route("/admin/instances/{instance}/tokens/{agent}", guarded(token), methods=["GET"]),
        Route("/admin/instances/{instance}/servers/{app}/token", guarded(server_token), methods=["GET"]),
        Route("/admin/instances/{instance}/roles/{role}", guarded(role), methods=["PUT", "PATCH"]),
        Route("/admin/instances/{instance}/world", guarded(world), methods=["PUT"]),
        Route("/admin/instances/{instance}/agents/{agent}", guarded(agent), methods=["PUT"]),
        Route("/admin/instances/{instance}/call", guarded(admin_call), methods=["POST"]),
        Route("/admin/instances/{instance}/load", guarded(load), methods=["POST"]),
        Route("/admin/instances/{instance}/snapshot", guarded(snapshot), methods=["GET", "PUT"]),
        Route("/admin/instances/{instance}/trajectory", guarded(trajectory), methods=["GET"]),
        Route("/admin/runs/{run_id}/end", guarded(end_run), methods=["POST"]),
        Route("/admin/runs/{run_id}/parked", guarded(parked_hits), methods=["GET"]),
        Route("/admin/agents", guarded(agents), methods=["GET"]),
        Route("/admin/agents/{agent_id}", guarded(hosted_agent), methods=["GET", "PUT", "DELETE"]),
        Route("/admin/human", guarded(human_turns), methods=["GET"]),
        Route("/admin/human/{turn:path}", guarded(human_answer), methods=["POST"]),
        Mount("/agents/{agent_id}", app=agent_endpoint),
    ], lifespan=lifespan), urls)
