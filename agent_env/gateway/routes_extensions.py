"""The env-side extensions' routes (extensions.py says what each does and who may call it), under `/envs/{instance}`.

Credentials are checked before any body is read, and every body is read within a limit (`bounded_body`): control
requests within `CONTROL_BODY_LIMIT`, a step's tool arguments within the gateway's own body limit, as a REST call.

`POST /envs/{instance}/tools/disable` and `.../tools/enable` share their path with the REST call of a tool named
`disable` or `enable`, so they are plain routes placed before that one (http.py): with the admin token (which calls
no tool there) they are the extension; with a role token they stay the tool's call when the instance has such a
tool, and are refused as admin-only when it does not.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Annotated, TypeVar

from fastapi import APIRouter, Depends
from pydantic import BaseModel
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from agent_env.gateway import changes, extensions
from agent_env.gateway import trajectory as trajectories
from agent_env.gateway.env_instance import EnvInstance
from agent_env.gateway.routes_agents import RoleCaller, call_tool, role_caller
from agent_env.gateway.routes_common import bounded_body, gateway_of, json_of, parse
from agent_env.gateway.service import GatewayError
from agent_env.spec.times import iso

M = TypeVar("M", bound=BaseModel)
router = APIRouter(include_in_schema=False)


def _admin_only(request: Request, instance: str) -> GatewayError:
    what = request.url.path.removeprefix(f"/envs/{instance}")
    return GatewayError(
        401, f"{request.method} {what} needs the gateway's admin token (it is the run's, not an agent's)"
    )


async def admin_instance(request: Request, instance: str) -> EnvInstance:
    gateway = gateway_of(request)
    if not gateway.is_admin(request.headers.get("authorization")):
        raise _admin_only(request, instance)
    return await gateway.get(instance)


AdminInstance = Annotated[EnvInstance, Depends(admin_instance)]


async def control_body(request: Request, model: type[M], what: str) -> M:
    raw = await bounded_body(request, extensions.CONTROL_BODY_LIMIT)
    try:
        data = json.loads(raw) if raw else {}
    except ValueError:
        raise GatewayError(400, f"the {what} body is not valid JSON") from None
    return parse(model, data, what)


# -- tool access (plain routes: see above) --


async def tool_access(request: Request) -> Response:
    gateway, instance = gateway_of(request), request.path_params["instance"]
    action = request.url.path.rsplit("/", 1)[-1]
    if not gateway.is_admin(request.headers.get("authorization")):
        caller = await role_caller(request, instance)  # 401 without a token, 403 with another instance's
        if action not in caller.instance.tools:
            raise _admin_only(request, instance)
        request.scope["path_params"]["name"] = action  # the REST call of the instance's tool of that name
        return await call_tool(request)
    inst = await gateway.get(instance)
    change = await control_body(request, extensions.ToolsChange, f"{action}-tool")
    return JSONResponse(await extensions.change_tools(gateway, inst, action, change))


# -- clock/v1 --


@router.get("/envs/{instance}/clock/time")
async def clock_time(request: Request, instance: str) -> Response:
    """The virtual now, for an agent (every role may read the clock) or the operator."""
    gateway = gateway_of(request)
    if gateway.is_admin(request.headers.get("authorization")):
        inst = await gateway.get(instance)
    else:
        inst = (await role_caller(request, instance)).instance
    return JSONResponse({"virtual_time": iso(inst.now())})


@router.get("/envs/{instance}/clock/state")
async def clock_state(inst: AdminInstance) -> Response:
    return JSONResponse(extensions.clock_state(inst))


@router.put("/envs/{instance}/clock/set-time")
async def clock_set_time(request: Request, inst: AdminInstance) -> Response:
    body = await control_body(request, extensions.SetTime, "set_time")
    return JSONResponse(await extensions.set_time(gateway_of(request), inst, body))


@router.post("/envs/{instance}/clock/clear")
async def clock_clear(request: Request, inst: AdminInstance) -> Response:
    await bounded_body(request, extensions.CONTROL_BODY_LIMIT)  # (nothing in it is needed)
    return JSONResponse(await extensions.clear_time(gateway_of(request), inst))


# -- triggers/v1: the state; registrations are the run's --


@router.get("/envs/{instance}/triggers/state")
async def triggers_state(inst: AdminInstance) -> Response:
    return JSONResponse(extensions.triggers_state(inst))


@router.post("/envs/{instance}/triggers/register")
@router.post("/envs/{instance}/triggers/remove")
@router.post("/envs/{instance}/triggers/clear")
async def triggers_write(request: Request, inst: AdminInstance) -> Response:
    verb = request.url.path.rsplit("/", 1)[-1]
    extensions.refuse_if_run_owned(inst, f"{verb} triggers", "register_env_triggers and cancel_triggers steps")
    raise GatewayError(
        501,
        f"{verb} triggers: this gateway's triggers belong to runs, whose workflows carry out their actions; "
        "declare them in a task (`triggers`) and register them with a register_env_triggers step",
    )


# -- trajectory/v1, state/v1 --


@router.get("/envs/{instance}/trajectory")
async def trajectory(request: Request, inst: AdminInstance, after: str = "0") -> Response:
    """Every entry as a JSON line, oldest first, read a page at a time (`after`: past that seq only)."""
    try:
        start = int(after or 0)
    except ValueError:
        raise GatewayError(400, "`after` must be an entry's seq number") from None
    gateway, instance = gateway_of(request), inst.spec.id

    async def lines() -> AsyncIterator[bytes]:
        seq = start
        while True:
            entries = await gateway.read_trajectory(instance, seq)
            yield b"".join(json.dumps(e).encode() + b"\n" for e in entries)
            if len(entries) < trajectories.PAGE:
                return
            seq = entries[-1]["seq"]

    return StreamingResponse(lines(), media_type="application/jsonl")


@router.get("/envs/{instance}/changes")
async def changelog(inst: AdminInstance, after_id: str = "0", limit: str = str(changes.PAGE_DEFAULT)) -> Response:
    """changes/v1: the instance's change rows past `after_id`, each with who made it (the admin token's: it names
    every agent's writes, as the trajectory names their calls)."""
    try:
        start, count = int(after_id or 0), int(limit)
    except ValueError:
        raise GatewayError(400, "changes: `after_id` and `limit` must be integers") from None
    if start < 0 or not 1 <= count <= changes.PAGE_MAX:
        raise GatewayError(400, f"changes: `after_id` must be >= 0 and `limit` between 1 and {changes.PAGE_MAX}")
    if not inst.keeps_changes:
        raise GatewayError(
            404, f"instance {inst.spec.id!r} keeps no changelog: its apps run in processes of their own or at URLs"
        )
    return JSONResponse(await changes.page(inst, start, count))


@router.get("/envs/{instance}/state")
async def state(inst: AdminInstance) -> Response:
    return JSONResponse(extensions.state(inst))


# -- step/v1: an agent's tools over REST --


@router.post("/envs/{instance}/step")
async def step(request: Request, caller: RoleCaller) -> Response:
    gateway = gateway_of(request)
    with gateway.limits.calling(caller.key, "rest"):  # a slow upload counts too, as for a REST call
        body = parse(extensions.StepRequest, await json_of(request), "step")
        if body.action == "list_tools":
            listed = [
                {"name": t.name, "description": t.description or "", "parameters": t.input_schema}
                for t in gateway.listing(caller)
            ]
            return JSONResponse({"tools": listed})
        if body.tool_name is None:
            raise GatewayError(400, "step: call_tool needs `tool_name`, the tool to call")
        outcome = await gateway.call(caller, body.tool_name, body.arguments, via="rest")
    if outcome.get("unknown") or outcome.get("refused"):
        return JSONResponse({"error": outcome["error"]}, status_code=404 if outcome.get("unknown") else 403)
    return JSONResponse(extensions.step_result(outcome))
