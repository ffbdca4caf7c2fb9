"""The world's effects on environments: a trigger's action (a tool call, changed role tools, an instruction to a
deployed agent), and pushes of the run's clock and watches to the gateway."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypedDict

from temporalio import activity

from agent_env.activities.shared import Activities, clipped_hits
from agent_env.gateway_client import GatewayRefused
from agent_env.spec.world_state import WorldPush, clip_fields
from agent_env.workflows import contract
from agent_env.workflows.contract import Hit

if TYPE_CHECKING:
    from agent_env.gateway_client import GatewayClient


class Said(TypedDict, total=False):
    """What a deployed agent made of an instruction (`fallback`: why the action's own reply was used instead)."""

    fallback: str
    answer: str
    tool_calls: int
    usage: object


async def push_to(gateway: GatewayClient, pushes: list[tuple[str, WorldPush]]) -> list[Hit]:
    """Tell each instance's gateway the run's clock and the conditions it must watch. Returns the hits of state
    conditions that are already true."""
    hits: list[Hit] = []
    for instance, push in pushes:
        hits += await gateway.push_world(instance, push.model_dump(mode="json"))
    return clipped_hits(hits)


class WorldActivities(Activities):
    @activity.defn(name=contract.WORLD_ACTION.name)
    async def world_action(
        self, instance: str, action: dict[str, Any], key: str, cause: str, at: str | None = None
    ) -> dict[str, Any]:
        """A trigger's action on an environment, once per key. Returns its outcome and the hits it caused.
        A refusal by the gateway is the action's outcome, not a reason to retry."""
        try:
            outcome = await self._world_action(instance, action, key, cause, at)
        except GatewayRefused as e:
            if e.status >= 500:
                raise
            outcome = {"error": str(e), "hits": []}
        hits = clipped_hits(outcome.pop("hits", []))
        return {**clip_fields(outcome), "hits": hits}  # it is logged in the world's events, carried in history

    async def _world_action(
        self, instance: str, action: Mapping[str, Any], key: str, cause: str, at: str | None
    ) -> dict[str, Any]:
        gateway = await self._gateway()
        kind = action["type"]
        if kind == "set_tools":
            tools = await gateway.change_role(instance, action["role"], action["enable"], action["disable"])
            return {"role": action["role"], "tools": tools, "hits": []}
        said = None
        if kind == "instruct" and action.get("deployed"):
            said = await self._instruct_agent(gateway, action, key)
            if not said.get("fallback"):
                return {"instruction": action["instruction"], "agent": action["agent"], "hits": [], **said}
        call = action["reply"] if kind == "instruct" else action
        if call is None:
            return {"instruction": action["instruction"], "agent": action["agent"], "hits": [], **(said or {})}
        agent = action["agent"] if kind == "instruct" else call.get("agent")
        outcome = await gateway.call_as(
            instance,
            call["tool"],
            call.get("arguments") or {},
            role=call.get("role"),
            agent=agent,
            idempotency_key=key,
            cause=cause,
            at=at,
        )
        out: dict[str, Any] = {
            "tool": call["tool"],
            "agent": agent or call.get("role"),
            "hits": outcome.get("hits", []),
        }
        out.update({"result": outcome["result"]} if "result" in outcome else {"error": outcome["error"]})
        if kind == "instruct":
            out["instruction"] = action["instruction"]
            if said:
                out["fallback"] = said["fallback"]
        return out

    async def _instruct_agent(self, gateway: GatewayClient, action: Mapping[str, Any], key: str) -> Said:
        """Hand an instruction to a deployed agent (it acts with its tools). Answered once per key."""
        # (the A2A SDK loads with the first agent asked, not with the worker)
        from agent_env.agents.client import AgentReplyInvalid, AgentTimedOut, AgentUnreachable, ask_deployed

        try:
            reply = await ask_deployed(
                self.settings,
                gateway,
                action["deployed"],
                action["instruction"],
                run_id=key.split("/world/")[0],
                turn=0,
                deadline_s=min(float(action.get("timeout") or 240), 240),
                context_id=key,
                message_id=key,
            )
        except (AgentUnreachable, AgentReplyInvalid, AgentTimedOut) as e:
            return {"fallback": str(e)}
        if reply.failed or reply.data.get("fallback"):
            return {"fallback": reply.data.get("fallback") or reply.text[:500], "answer": reply.text[:2000]}
        said: Said = {"answer": reply.text[:2000], "tool_calls": len(reply.data.get("tool_calls") or [])}
        if reply.data.get("usage"):
            said["usage"] = reply.data["usage"]  # summed by `runs show`
        return said

    @activity.defn(name=contract.PUSH_WORLD.name)
    async def push_world(self, pushes: list[tuple[str, WorldPush]]) -> list[Hit]:
        """Tell each instance's gateway the run's clock and the conditions it must watch. Returns the
        hits of state conditions that are already true."""
        return await push_to(await self._gateway(), pushes)
