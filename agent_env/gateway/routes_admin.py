"""The run's side of the gateway (admin token): instances, roles, the world, the data plane, hosted agents.

Every route here sits behind one guard, the router's `admin_only` dependency, so no handler can forget it.
`GET /admin/openapi.json` is this router's OpenAPI document, generated from these routes, their body
models and their answers (`response_model`: the shapes of `gateway_client.wire`, which the clients parse; the
handlers still return their `JSONResponse`, which FastAPI passes on unchecked), and served behind the same guard (the app serves no public /docs or /openapi.json).
"""

from __future__ import annotations

import functools
import json
from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query
from fastapi.openapi.utils import get_openapi
from pydantic import BaseModel, ConfigDict, Field
from pydantic.json_schema import models_json_schema
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.types import Receive, Scope, Send

from agent_env.agents.host import CARD_PATH as AGENT_CARD_PATH
from agent_env.agents.host import DeployRequest
from agent_env.agents.reviews import HumanAnswer, ReviewRequest
from agent_env.envs import card as cards
from agent_env.envs import dataplane
from agent_env.gateway import tokens
from agent_env.gateway import trajectory as trajectories
from agent_env.gateway.env_instance import EnvInstance
from agent_env.gateway.metrics import CONTENT_TYPE
from agent_env.gateway.routes_agents import listed
from agent_env.gateway.routes_common import GatewayDep, bounded_body, gateway_of, json_body, json_of, named_body, parse
from agent_env.gateway.service import Caller, Gateway, GatewayError
from agent_env.gateway.spec import AppRef, InstanceSpec, RoleSpec
from agent_env.gateway.storage import approx_bytes
from agent_env.gateway_client import wire
from agent_env.spec.world_state import WorldPush

ADMIN_ONLY = "this needs the gateway's admin token"
SNAPSHOT_LIMIT = 1024 * 1024 * 1024  # a snapshot is a tar of the instance's databases


class CallRequest(BaseModel):
    """A tool call the run makes itself, as an agent or as a role."""

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


class LoadRequest(BaseModel):
    """data/add with an idempotency key (and optionally a reset first): what the run's steps use."""

    parts: list[dict[str, Any]]
    idempotency_key: str | None = None
    reset: bool = False


class ForkRequest(BaseModel):
    """A new instance starting from another's current state: the source's env, roles and apps, with its own
    id, run, agents and time (what `deploy_env` would put)."""

    model_config = ConfigDict(extra="forbid")

    id: str
    run_id: str | None = None
    agents: dict[str, str] | None = Field(None, description="agent -> role; default: the source's")
    now: datetime | None = None
    apps: list[AppRef] | None = Field(
        None,
        description="default: the source's; give the new instance's own servers of apps at URLs (sandboxes), "
        "which serve the source only",
    )


BODIES: tuple[type[BaseModel], ...] = (
    InstanceSpec,
    ForkRequest,
    RoleSpec,
    RoleChange,
    WorldPush,
    AgentRole,
    CallRequest,
    LoadRequest,
    DeployRequest,
    HumanAnswer,
    ReviewRequest,
)


async def admin_only(request: Request) -> None:
    if not gateway_of(request).is_admin(request.headers.get("authorization")):
        raise GatewayError(401, ADMIN_ONLY)


router = APIRouter(dependencies=[Depends(admin_only)])
TAR = {"content": {"application/x-tar": {"schema": {"type": "string", "format": "binary"}}}}


@router.get("/admin/openapi.json", include_in_schema=False)
async def openapi_document() -> Response:
    return Response(_openapi(), media_type="application/json")


@router.get("/metrics", include_in_schema=False)
async def metrics(gateway: GatewayDep) -> Response:
    """Prometheus metrics (text format): Prometheus sends the admin token from its scrape config."""
    return Response(gateway.metrics.exposition(), media_type=CONTENT_TYPE)


@functools.cache
def _openapi() -> bytes:
    """This router's document, built once: it depends on the code only."""
    doc = get_openapi(
        title="agent-env gateway: admin API",
        version="1",
        routes=router.routes,
        description="The run's side of the gateway. Every path needs the admin token "
        "(`Authorization: Bearer aea_...`, kept in the gateway's folder).",
    )
    _, defs = models_json_schema([(m, "validation") for m in BODIES], ref_template="#/components/schemas/{model}")
    components = doc.setdefault("components", {})
    components.setdefault("schemas", {}).update(defs.get("$defs", {}))
    components["securitySchemes"] = {"admin": {"type": "http", "scheme": "bearer"}}
    doc["security"] = [{"admin": []}]
    return json.dumps(doc).encode()


# -- the data plane --


@router.post(
    "/envs/{instance}" + cards.RPC_PATH,
    tags=["data plane"],
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {
                "application/json": {
                    "schema": {"description": "a JSON-RPC request (data/add, data/export, reset, ...)"}
                }
            },
        }
    },
)
async def data_plane(request: Request, instance: str, gateway: GatewayDep) -> Response:
    """The JSON-RPC data plane, fanned out to every app of the instance."""
    inst = await gateway.get(instance)
    raw = await bounded_body(request, gateway.max_body_bytes)
    return JSONResponse(await dataplane.handle(raw, _Budgeted(gateway, inst, len(raw))))


class _Budgeted:
    """An instance's data plane with its storage budget checked before data is added (a refusal is the
    JSON-RPC error the protocol's clients expect, its message naming the limit)."""

    def __init__(self, gateway: Gateway, inst: EnvInstance, size: int) -> None:
        self.gateway, self.inst, self.size = gateway, inst, size
        self.operations = inst.operations

    async def reset(self) -> None:
        await self.inst.reset()

    async def add(self, parts: list[dataplane.Part]) -> None:
        self.gateway.admit_load(self.inst, self.size)
        await self.inst.add(parts)

    async def get(self) -> list[dataplane.Part]:
        return await self.inst.get()

    async def export_to(self, write_namespace: object) -> list[dataplane.Part]:
        return await self.inst.export_to(write_namespace)


# -- instances --


def describe(inst: EnvInstance) -> wire.InstanceView:
    return {
        "id": inst.spec.id,
        "env": inst.spec.env,
        "apps": list(inst.apps),
        "agents": inst.agents,
        "roles": {role: sorted(tools) for role, tools in inst.allowed.items()},
        "paths": {
            "mcp": f"/envs/{inst.spec.id}/mcp",
            "tools": f"/envs/{inst.spec.id}/tools",
            "card": f"/envs/{inst.spec.id}{cards.WELL_KNOWN_PATH}",
        },
    }


@router.get("/admin/instances", tags=["instances"], response_model=wire.model_of(wire.Instances))
async def list_instances(gateway: GatewayDep) -> Response:
    return JSONResponse({"instances": gateway.list_instances()})


@router.get("/admin/load", tags=["instances"], response_model=wire.model_of(wire.Load))
async def busy(gateway: GatewayDep, run: str | None = None) -> Response:
    """How busy this gateway is (a pool places new instances by it), and which instances of `run` it holds."""
    return JSONResponse(gateway.busy(run))


@router.get("/admin/instances/{instance}", tags=["instances"], response_model=wire.model_of(wire.InstanceView))
async def get_instance(instance: str, gateway: GatewayDep) -> Response:
    return JSONResponse(describe(await gateway.get(instance)))


@router.put(
    "/admin/instances/{instance}",
    tags=["instances"],
    openapi_extra=json_body(InstanceSpec),
    response_model=wire.model_of(wire.InstanceView),
)
async def put_instance(request: Request, instance: str, gateway: GatewayDep) -> Response:
    """Create or replace an instance (the body's `id` defaults to the path's)."""
    spec = await named_body(request, InstanceSpec, instance, "instance")
    try:
        spec.agent_roles()
    except ValueError as e:
        raise GatewayError(400, str(e)) from None
    return JSONResponse(describe(await gateway.put(spec)))


@router.post(
    "/admin/instances/{instance}/fork",
    tags=["instances"],
    openapi_extra=json_body(ForkRequest),
    response_model=wire.model_of(wire.InstanceView),
)
async def fork_instance(request: Request, instance: str, gateway: GatewayDep) -> Response:
    """A new instance (the body's `id`) starting from this one's current state: in-process apps copied with
    SQLite's online backup, the others through export -> load. Idempotent on the new id."""
    body = parse(ForkRequest, await json_of(request), "fork")
    if body.id == instance:
        raise GatewayError(400, f"a fork needs a new id; {instance!r} is the source's")
    forked = await gateway.fork(instance, body.model_dump(mode="json", exclude_none=True))
    return JSONResponse({**describe(forked), "forked_from": instance})


@router.delete("/admin/instances/{instance}", tags=["instances"], response_model=wire.model_of(wire.Deleted))
async def delete_instance(instance: str, gateway: GatewayDep, keep_data: str | None = None) -> Response:
    keep = keep_data in ("1", "true")
    return JSONResponse({"deleted": await gateway.delete(instance, keep_data=keep)})


@router.get("/admin/instances/{instance}/tokens/{agent}", tags=["instances"], response_model=wire.model_of(wire.Token))
async def agent_token(instance: str, agent: str, gateway: GatewayDep, tools: str | None = None) -> Response:
    """An agent's role token; with `tools=1`, also its role and the tools that role lists (as
    `GET /envs/{instance}/tools` answers the token): a trainer's first turn in one request, not two."""
    token = await gateway.token(instance, agent)
    if tools not in ("1", "true"):
        return JSONResponse({"token": token})
    caller = Caller(await gateway.get(instance), agent)
    return JSONResponse({"token": token, "role": caller.role, "tools": listed(gateway.listing(caller))})


@router.get(
    "/admin/instances/{instance}/servers/{app}/token", tags=["instances"], response_model=wire.model_of(wire.Token)
)
async def server_token(instance: str, app: str, gateway: GatewayDep) -> Response:
    """The token of an app server a sandbox runs for this instance (deploy_env passes it on)."""
    return JSONResponse({"token": tokens.server_token(gateway.key, instance, app)})


@router.put(
    "/admin/instances/{instance}/roles/{role}",
    tags=["instances"],
    openapi_extra=json_body(RoleSpec),
    response_model=wire.model_of(wire.RoleTools),
)
async def set_role(request: Request, instance: str, role: str, gateway: GatewayDep) -> Response:
    allowed = await gateway.set_role(instance, role, parse(RoleSpec, await json_of(request), "role"))
    return JSONResponse({"role": role, "tools": sorted(allowed)})


@router.patch(
    "/admin/instances/{instance}/roles/{role}",
    tags=["instances"],
    openapi_extra=json_body(RoleChange),
    response_model=wire.model_of(wire.RoleTools),
)
async def change_role(request: Request, instance: str, role: str, gateway: GatewayDep) -> Response:
    change = parse(RoleChange, await json_of(request), "role change")
    allowed = await gateway.change_role(instance, role, change.enable, change.disable)
    return JSONResponse({"role": role, "tools": sorted(allowed)})


@router.put(
    "/admin/instances/{instance}/world",
    tags=["instances"],
    openapi_extra=json_body(WorldPush),
    response_model=wire.model_of(wire.Hits),
)
async def push_world(request: Request, instance: str, gateway: GatewayDep) -> Response:
    """The run's world (clock, triggers) as the gateway should stamp and match it."""
    push = parse(WorldPush, await json_of(request), "world")
    return JSONResponse({"hits": await gateway.push_world(instance, push)})


@router.put(
    "/admin/instances/{instance}/agents/{agent}",
    tags=["instances"],
    openapi_extra=json_body(AgentRole),
    response_model=wire.model_of(wire.AgentRoleSet),
)
async def set_agent_role(request: Request, instance: str, agent: str, gateway: GatewayDep) -> Response:
    body = parse(AgentRole, await json_of(request), "agent")
    await gateway.set_agent_role(instance, agent, body.role)
    return JSONResponse({"agent": agent, "role": body.role})


@router.post(
    "/admin/instances/{instance}/call",
    tags=["instances"],
    openapi_extra=json_body(CallRequest),
    response_model=wire.model_of(wire.CallOutcome),
)
async def run_call(request: Request, instance: str, gateway: GatewayDep) -> Response:
    """A tool call of the run's own (default: as the first role)."""
    body = parse(CallRequest, await json_of(request), "call")
    inst = await gateway.get(instance)
    if body.role and body.role not in inst.spec.roles:
        raise GatewayError(400, f"no role {body.role!r} (roles: {', '.join(inst.spec.roles)})")
    if body.agent and body.agent not in inst.agents:
        raise GatewayError(400, f"no agent {body.agent!r} (agents: {', '.join(inst.agents)})")
    role = body.role or (None if body.agent else next(iter(inst.spec.roles)))
    caller = Caller(inst, body.agent or f"@{role}", as_role=None if body.agent else role)
    return JSONResponse(
        await gateway.call(
            caller,
            body.tool,
            body.arguments,
            via="run",
            idempotency_key=body.idempotency_key,
            cause=body.cause,
            at=body.at,
        )
    )


@router.post(
    "/admin/instances/{instance}/load",
    tags=["instances"],
    openapi_extra=json_body(LoadRequest),
    response_model=wire.model_of(wire.Loaded),
)
async def load(request: Request, instance: str, gateway: GatewayDep) -> Response:
    """data/add with an idempotency key (and optionally a reset first). A ToolError is a 422."""
    body = parse(LoadRequest, await json_of(request), "load")
    inst = await gateway.get(instance)
    gateway.admit_load(inst, approx_bytes(body.parts))
    try:
        parts = dataplane.parse_parts({"parts": body.parts})
        if body.reset:
            await inst.reset()
        await inst.add(parts, key=body.idempotency_key)
    except dataplane.InvalidParams as e:
        raise GatewayError(400, str(e)) from None
    return JSONResponse({"loaded": len(parts)})


@router.get("/admin/instances/{instance}/snapshot", tags=["instances"], responses={200: TAR})
async def snapshot(instance: str, gateway: GatewayDep) -> Response:
    inst = await gateway.get(instance)
    return Response(await inst.snapshot(), media_type="application/x-tar")


@router.put(
    "/admin/instances/{instance}/snapshot",
    tags=["instances"],
    openapi_extra={"requestBody": {"required": True, **TAR}},
    response_model=wire.model_of(wire.SnapshotRestored),
)
async def restore(request: Request, instance: str, gateway: GatewayDep) -> Response:
    inst = await gateway.get(instance)
    blob = await bounded_body(request, SNAPSHOT_LIMIT)
    gateway.admit_load(inst, len(blob), replaces=True)
    try:
        await inst.restore(blob)
    except ValueError as e:
        raise GatewayError(400, str(e)) from None
    return JSONResponse({"restored": inst.spec.id})


@router.get(
    "/admin/instances/{instance}/trajectory", tags=["instances"], response_model=wire.model_of(wire.TrajectoryPage)
)
async def trajectory(instance: str, gateway: GatewayDep, after: str = "0", last: str | None = None) -> Response:
    """Trajectory entries after seq `after`, a page at a time (`more`: a full page, ask again after its last
    seq), or only the last one."""
    try:
        after_seq = int(after or 0)
    except ValueError:
        raise GatewayError(400, "`after` must be an entry's seq number") from None
    entries = await gateway.read_trajectory(instance, after_seq, last=last in ("1", "true"))
    return JSONResponse({"entries": entries, "more": len(entries) >= trajectories.PAGE})


# -- runs --


@router.post("/admin/runs/{run_id}/end", tags=["runs"], response_model=wire.model_of(wire.RunEnded))
async def end_run(
    run_id: str, gateway: GatewayDep, with_trajectories: Annotated[str | None, Query(alias="trajectories")] = None
) -> Response:
    """The run is over: its agents' tokens stop working, its instances close, its hosted agents are deleted. With
    `trajectories=1`, the answer carries the closed instances' trajectories, whole, as long as all it carries fit
    in one trajectory page (what the run's record keeps: one request, not one more per instance)."""
    ended = await gateway.end_run(run_id)
    if with_trajectories in ("1", "true"):
        whole: dict[str, list[wire.JsonObject]] = {}
        room = trajectories.PAGE  # the answer is never larger than a page of the trajectory route
        for instance in ended["instances"]:
            entries = await gateway.read_trajectory(instance)
            if len(entries) < room:
                whole[instance] = entries
                room -= len(entries)
        ended["trajectories"] = whole
    return JSONResponse(ended)


@router.get("/admin/runs/{run_id}/parked", tags=["runs"], response_model=wire.model_of(wire.Parked))
async def parked_hits(run_id: str, gateway: GatewayDep) -> Response:
    """Trigger hits the run refused or could not take (with the error)."""
    return JSONResponse({"parked": gateway.delivery.parked(run_id)})


# -- hosted agents and people's turns --


@router.get("/admin/agents", tags=["agents"], response_model=wire.model_of(wire.Agents))
async def list_agents(gateway: GatewayDep) -> Response:
    return JSONResponse({"agents": gateway.agents.list()})


@router.get("/admin/agents/{agent_id}", tags=["agents"])
async def get_agent(agent_id: str, gateway: GatewayDep) -> Response:
    spec = gateway.agents.get(agent_id)
    if spec is None:
        raise GatewayError(404, f"no agent {agent_id!r} is hosted here")
    return JSONResponse(spec.model_dump(mode="json"))


@router.put("/admin/agents/{agent_id}", tags=["agents"], openapi_extra=json_body(DeployRequest))
async def deploy_agent(request: Request, agent_id: str, gateway: GatewayDep) -> Response:
    """Deploy a hosted agent; it answers A2A at `/agents/{agent_id}/`."""
    deploy = await named_body(request, DeployRequest, agent_id, "agent")
    try:
        spec = gateway.agents.put(deploy)
    except ValueError as e:
        raise GatewayError(400, str(e)) from None
    return JSONResponse({**spec.model_dump(mode="json"), "path": f"/agents/{spec.id}/"})


@router.delete("/admin/agents/{agent_id}", tags=["agents"], response_model=wire.model_of(wire.Deleted))
async def delete_agent(agent_id: str, gateway: GatewayDep) -> Response:
    return JSONResponse({"deleted": await gateway.agents.delete(agent_id)})


@router.get("/admin/human", tags=["agents"], response_model=wire.model_of(wire.Turns))
async def human_turns(gateway: GatewayDep) -> Response:
    """People's turns waiting for an answer."""
    return JSONResponse({"turns": gateway.agents.pending()})


@router.get("/admin/human/{turn:path}", tags=["agents"])
async def human_turn(turn: str, gateway: GatewayDep, wait: float = 0) -> Response:
    """One turn or review, whatever its state; `wait`: up to that many seconds (at most 60) for its decision."""
    found = await gateway.agents.decision(turn, wait)
    if found is None:
        raise GatewayError(404, f"no turn {turn!r} (see `agent-env agents pending`)")
    return JSONResponse(found)


@router.put("/admin/human/{turn:path}", tags=["agents"], openapi_extra=json_body(ReviewRequest))
async def open_review(request: Request, turn: str, gateway: GatewayDep) -> Response:
    """Open a review for a person (the `review` step); opened again, the same review as it stands."""
    return JSONResponse(gateway.agents.open_review(await named_body(request, ReviewRequest, turn, "review")))


@router.post("/admin/human/{turn:path}", tags=["agents"], openapi_extra=json_body(HumanAnswer))
async def human_answer(request: Request, turn: str, gateway: GatewayDep) -> Response:
    body = parse(HumanAnswer, await json_of(request), "answer")
    try:
        answered = gateway.agents.reply(turn, body)
    except ValueError as e:
        raise GatewayError(400, str(e)) from None
    if answered is None:
        raise GatewayError(404, f"no turn {turn!r} (see `agent-env agents pending`)")
    if answered["answer"] != body.answer:
        raise GatewayError(409, f"turn {answered['id']!r} is {answered['state']}; it cannot be answered now")
    return JSONResponse(answered)


async def hosted_agents(scope: Scope, receive: Receive, send: Send) -> None:
    """The hosted agents' A2A apps (raw ASGI): the card is public, messages need the admin token."""
    request = Request(scope)
    gateway = gateway_of(request)
    if not request.url.path.endswith(AGENT_CARD_PATH) and not gateway.is_admin(request.headers.get("authorization")):
        await JSONResponse({"error": "talking to a hosted agent needs the gateway's admin token"}, status_code=401)(
            scope, receive, send
        )
        return
    await gateway.agents(scope, receive, send)
