"""changes/v1 at the gateway: who made a call, as the changelog of the apps it writes records it (envs/changelog.py),
and the page of changes the extension answers.

An actor is the gateway's knowledge of a call, never the caller's claim: its role (from its token), its agent, the
tool, how it came (`via`: mcp, rest, run), and for a trigger's action the trigger, the run's firing and the action's
index. The run sends these for its trigger actions as the call's `cause` (`trigger NAME`) and idempotency key
(`RUN/world/FIRING/INDEX`, workflows/world_driver.py); a run's other calls keep their cause as it was sent.
"""

from __future__ import annotations

from agent_env.gateway.env_instance import EnvInstance
from agent_env.gateway_client.wire import JsonObject

PAGE_DEFAULT = 1000  # rows a page holds unless a client asks for fewer or more
PAGE_MAX = 10_000  # the most a client may ask for (the protocol's reference asks for this many)
_TRIGGER_CAUSE = "trigger "


def actor(role: str, agent: str, tool: str, via: str, cause: str | None, idempotency_key: str | None) -> JsonObject:
    """Who makes a call: a trigger's action, or a tool call (an agent's, or the run's own as a role)."""
    trigger = _trigger_action(cause, idempotency_key)
    named_agent = None if agent.startswith("@") else agent  # `@role`: the run acting as a role, no agent
    if trigger is not None:
        return {"kind": "trigger_action", **trigger, "tool": tool, "role": role, "agent": named_agent}
    made: JsonObject = {"kind": "tool_call", "tool": tool, "role": role, "agent": named_agent, "via": via}
    if cause:
        made["cause"] = cause[:200]
    return made


def _trigger_action(cause: str | None, key: str | None) -> JsonObject | None:
    if not cause or not cause.startswith(_TRIGGER_CAUSE) or not key:
        return None
    parts = key.rsplit("/", 3)
    if len(parts) != 4 or parts[1] != "world" or not (parts[2].isdigit() and parts[3].isdigit()):
        return None
    return {"trigger_id": cause.removeprefix(_TRIGGER_CAUSE), "firing": int(parts[2]), "action_index": int(parts[3])}


async def page(inst: EnvInstance, after_id: int, limit: int) -> JsonObject:
    """The instance's changes past `after_id`, oldest first, at most `limit`: `{changes, has_more}`."""
    rows, more = await inst.changes(after_id, limit)
    return {"changes": rows, "has_more": more}
