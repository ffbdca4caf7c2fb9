"""Tool calls: made as a caller within its role and limits, stamped with the world's time, recorded in the
trajectory and matched against the run's trigger conditions; served over REST, the admin API and MCP."""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, cast

from agent_env import telemetry
from agent_env.envs.app import ToolError, ToolInfo, ToolSpec
from agent_env.envs.context import Ctx
from agent_env.envs.mcp import ChangeChannel, mcp_tool, owned_by, refuse, tool_error, tool_result
from agent_env.gateway import changes, trajectory
from agent_env.gateway.callers import Caller, GatewayError
from agent_env.gateway.env_instance import EnvInstance, Route
from agent_env.gateway.state import COLLECTION
from agent_env.gateway.world import WorldPushes
from agent_env.gateway_client import wire
from agent_env.spec.times import iso, utc_now_iso
from agent_env.spec.world_state import TriggerHit

if TYPE_CHECKING:
    from collections.abc import Iterable

    import mcp.types as types
    from starlette.requests import Request
    from starlette.types import Message, Receive, Scope, Send


class Calls(WorldPushes):
    async def serve_mcp(self, caller: Caller, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve one MCP request of `caller` within its limits; a refusal (429) is raised before anything is sent.
        Its MCP session is the caller's alone: another agent, another run's or no token cannot use or end it."""
        owned_by(scope, json.dumps([caller.instance.spec.id, caller.instance.spec.run_id, caller.agent]))
        with self.limits.requesting(caller.key):
            if not _opens_session(scope):
                await self.mcp(scope, receive, send)
                return
            with self.limits.opening(caller.key, self._session_alive) as opened:

                async def watch(message: Message) -> None:
                    if message["type"] == "http.response.start":
                        sid = _header(message.get("headers") or [], b"mcp-session-id")
                        if sid:
                            opened(sid)
                    await send(message)

                await self.mcp(scope, receive, watch)

    def _session_alive(self, session_id: str) -> bool:
        return session_id in self.mcp.sessions

    def channel(self, request: Request) -> ChangeChannel:
        return self._channels[request.scope["agentenv.caller"].instance.spec.id]

    def input_schema(self, name: str) -> dict[str, Any] | None:
        return None  # schemas depend on the instance; arguments are validated when the call runs

    def listing(self, caller: Caller) -> list[types.Tool]:
        inst, role = caller.instance, caller.role
        key = (inst.spec.id, role)
        tools = self._listings.get(key)
        if tools is None:
            allowed = inst.allowed[role]
            tools = self._listings[key] = [
                mcp_tool(_exposed(route)) for name, route in inst.tools.items() if name in allowed
            ]
        return tools

    async def list_tools(self, request: Request) -> list[types.Tool]:
        return self.listing(request.scope["agentenv.caller"])

    async def call_tool(
        self, request: Request, name: str, arguments: dict[str, Any], meta: dict[str, Any]
    ) -> types.CallToolResult:
        caller: Caller = request.scope["agentenv.caller"]
        try:
            with self.limits.calling(caller.key, "mcp"):
                outcome = await self.call(caller, name, arguments, via="mcp")
        except GatewayError as e:  # over its limit or its storage budget: a protocol error
            raise refuse(str(e)) from None
        return tool_error(outcome["error"]) if "error" in outcome else tool_result(outcome["result"])

    async def call(
        self,
        caller: Caller,
        name: str,
        arguments: dict[str, Any],
        *,
        via: str,
        idempotency_key: str | None = None,
        cause: str | None = None,
        at: datetime | None = None,
    ) -> wire.CallOutcome:
        """Call a tool as `caller`, enforcing its role, and record it. Returns {"result"} or {"error", "refused"?}.
        Past a storage budget it raises GatewayError(507) instead, and records nothing (storage.py). An instance
        in consistent mode serves one call at a time, in arrival order, from its check to its trajectory entry."""
        ordered = caller.instance.in_order
        if ordered is None:
            return await self._call(caller, name, arguments, via, idempotency_key, cause, at)
        async with ordered:
            return await self._call(caller, name, arguments, via, idempotency_key, cause, at)

    async def _call(
        self,
        caller: Caller,
        name: str,
        arguments: wire.JsonObject,
        via: str,
        idempotency_key: str | None,
        cause: str | None,
        at: datetime | None,
    ) -> wire.CallOutcome:
        inst, role = caller.instance, caller.role
        started = time.perf_counter()
        vnow = at.astimezone(UTC) if at is not None else inst.now()
        outcome: wire.CallOutcome
        route = inst.tools.get(name)
        writes = route is not None and route.app is not None and not route.spec.read_only and name in inst.allowed[role]
        self._refuse_storage(self.storage.admit(inst.usage, inst.spec.id, writes=writes, arguments=arguments), via)
        if route is None:
            outcome = {"error": f"unknown tool {name!r}", "unknown": True}
        elif name not in inst.allowed[role]:
            outcome = {"error": f"tool {name!r} is not available to role {role!r}", "refused": True}
        else:
            ctx = Ctx(
                role=role,
                run_id=inst.spec.run_id,
                agent=caller.agent,
                instance=inst.spec.id,
                virtual_now=vnow,
                idempotency_key=idempotency_key,
                actor=changes.actor(role, caller.agent, name, via, cause, idempotency_key),
            )
            inst.busy += 1  # not closed as idle while a call is in flight
            try:
                if route.app is None:  # a gateway tool
                    result = inst.time_answer(cast(ToolSpec, route.spec).parse_arguments(arguments).get("zone"))
                else:
                    with telemetry.span(f"app {route.qualified}", instance=inst.spec.id, agent=caller.agent, via=via):
                        result = await route.app.call_async(route.spec.name, arguments, ctx)
                outcome = {"result": result}
            except ToolError as e:
                outcome = {"error": str(e)}
            except Exception as e:  # noqa: BLE001 - a broken tool must not take the gateway down
                outcome = {"error": f"internal error in tool {name!r}: {type(e).__name__}: {e}"}
            finally:
                inst.busy -= 1
                inst.last_used = time.monotonic()
        duration = time.perf_counter() - started
        if "result" in outcome:
            self.metrics.called(via, "ok", duration)
        elif outcome.get("refused"):
            self.metrics.refused("role")
            self.metrics.called(via, "refused", duration)
        else:
            self.metrics.called(via, "error", duration)
        entry = cast(
            wire.TrajectoryEntry,
            {  # (its keys in the order the trajectory has always had them)
                "instance": inst.spec.id,
                "run_id": inst.spec.run_id,
                "agent": caller.agent,
                "role": role,
                "tool": name,
                "arguments": arguments,
                "via": via,
                **({"result": outcome["result"]} if "result" in outcome else {"error": outcome["error"]}),
                "refused": bool(outcome.get("refused")),
                "virtual_time": iso(vnow),
                "real_time": utc_now_iso(),
                "duration_ms": round(duration * 1000, 3),
            },
        )
        if cause:
            entry["cause"] = cause
        self.trajectory.record(inst.trajectory_path, entry)
        if inst.watcher is not None and route is not None and "unknown" not in outcome:
            await self._watch(inst, route, entry, outcome, vnow, via)
        return outcome

    async def _watch(
        self,
        inst: EnvInstance,
        route: Route,
        entry: wire.TrajectoryEntry,
        outcome: wire.CallOutcome,
        vnow: datetime,
        via: str,
    ) -> None:
        """Match the call against the run's conditions. The run's own calls get their hits back in the
        answer (it applies them in order); agents' calls have them delivered as updates."""
        assert inst.watcher is not None  # (the caller checks)
        call = {k: entry[k] for k in ("agent", "role", "tool", "arguments")}
        call.update({"result": outcome["result"]} if "result" in outcome else {"error": outcome["error"]})
        found = [(w, call) for w in inst.watcher.calls(call)]
        if inst.watcher.states and "result" in outcome and not route.spec.read_only:
            values = await self._state_values(inst)
            found += [(w, {"value": values[w.trigger], "after": call}) for w in inst.watcher.state_edges(values)]
        if not found:
            return
        hits = [(w, TriggerHit(trigger=w.trigger, instance=inst.spec.id, virtual_time=vnow, match=m)) for w, m in found]
        if via == "run":
            outcome["hits"] = [cast(wire.Hit, h.model_dump(mode="json")) for _, h in hits]
            return
        for watch, hit in hits:
            await self.delivery.send(inst.world.run_id, hit, watch.barrier_s)  # type: ignore[union-attr]  # a watcher comes with a world

    async def read_trajectory(self, instance_id: str, after: int = 0, *, last: bool = False) -> list[dict[str, Any]]:
        if instance_id not in self._instances and self.store.get(COLLECTION, instance_id) is None:
            raise GatewayError(404, f"no environment instance {instance_id!r} on this gateway")
        await asyncio.to_thread(self.trajectory.flush)  # the gateway serves others meanwhile
        return trajectory.read(self.folder(instance_id) / "trajectory.sqlite", after, last=last)


def _header(headers: Iterable[tuple[bytes, bytes]], name: bytes) -> str | None:
    return next((v.decode("latin-1") for k, v in headers if k.lower() == name), None)


def _opens_session(scope: Scope) -> bool:
    """A request the MCP SDK answers by opening a session: handshake era, and no session named yet."""
    from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

    headers = scope.get("headers") or []
    if _header(headers, b"mcp-session-id") is not None:
        return False
    version = _header(headers, b"mcp-protocol-version")
    return version is None or version in HANDSHAKE_PROTOCOL_VERSIONS


def _exposed(route: Route) -> ToolInfo:
    """The tool as agents see it: its exposed name (app prefix applied)."""
    if route.spec.name == route.exposed:
        return route.spec

    return replace(route.spec, name=route.exposed)
