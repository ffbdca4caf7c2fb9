"""The env-side extensions of protocol v1 that the gateway serves for each instance, and declares on its card:
tool access (`disable-tool/v1`, `enable-tool/v1`), `clock/v1`, `triggers/v1` (its state), `trajectory/v1`,
`step/v1`, `state/v1` and `changes/v1` (on instances that keep a changelog: changes.py). Paths are relative to the
instance's base, `/envs/{instance}`.

Who may do what (routes_extensions.py enforces it): control (tool access, set-time, clear) and the operator's
reads (state, trigger state, clock state, the trajectory and the changes: every agent's calls and writes) need the
admin token; what the protocol lets an agent do (`get_time`, `step`) needs a role token and sees only what its role
sees.

An instance that belongs to a run refuses every control operation (409). The run's workflow is the source of
truth for its clock, roles and triggers (DESIGN §2 rule 2): the gateway holds a copy the run pushed, a change made
here would differ from what the run believes and from its record, and the run's next push would undo it. Routing
it to the run instead would need a workflow update of its own for each operation, sealed like every update, and
would turn an operator's call into a decision recorded in history that the task never declared; the task's own
steps (`modify_env_tool_access`, `sync_env_clock`, `register_env_triggers`, `cancel_triggers`) already say it, so the refusal names
them. Instances without a run (created over the admin API by a harness of one's own) take these operations.

Not served: the writes of `triggers/v1` (register, remove, clear):
our triggers are the run's and its workflow carries out their actions, so no instance can take one on its own; its
`state` shows what the run asked the gateway to watch.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated, Literal

from agentenv_protocol.types import EnvironmentExtension
from pydantic import AwareDatetime, BaseModel, Field

from agent_env.envs import changelog
from agent_env.gateway import changes
from agent_env.gateway.callers import GatewayError
from agent_env.gateway.env_instance import EnvInstance
from agent_env.gateway_client.wire import CallOutcome, JsonObject
from agent_env.spec import roles
from agent_env.spec.env import RoleSpec
from agent_env.spec.times import iso
from agent_env.spec.world import MAX_RATE
from agent_env.spec.world_state import ClockState, WorldPush

if TYPE_CHECKING:
    from agent_env.gateway.world import WorldPushes

DISABLE_TOOL = "urn:agentenv:disable-tool/v1"
ENABLE_TOOL = "urn:agentenv:enable-tool/v1"
TRIGGERS = "urn:agentenv:triggers/v1"
CLOCK = "urn:agentenv:clock/v1"
TRAJECTORY = "urn:agentenv:trajectory/v1"
STEP = "urn:agentenv:step/v1"
STATE = "urn:agentenv:state/v1"
CHANGES = "urn:agentenv:changes/v1"
WILDCARD = "*"
CONTROL_BODY_LIMIT = 64 * 1024  # a control request is a role and some tool names, or a time

_TOOLS_REQUEST: JsonObject = {
    "type": "object",
    "properties": {
        "role": {"type": "string"},
        "tools": {"anyOf": [{"type": "array", "items": {"type": "string"}}, {"const": WILDCARD}]},
    },
    "required": ["role", "tools"],
}
_STEP_REQUEST: JsonObject = {
    "type": "object",
    "properties": {
        "action": {"enum": ["list_tools", "call_tool"]},
        "tool_name": {"type": "string", "minLength": 1},
        "arguments": {"type": "object"},
    },
    "required": ["action"],
    "if": {"properties": {"action": {"const": "call_tool"}}},
    "then": {"required": ["tool_name"]},
}
_EMPTY: JsonObject = {"type": "object", "properties": {}}


def _ext(uri: str, description: str, params: JsonObject) -> EnvironmentExtension:
    return EnvironmentExtension(uri=uri, description=description, params=params, required=False)


def _tool_access(uri: str, action: str, description: str) -> EnvironmentExtension:
    return _ext(
        uri,
        description,
        {"endpoint": f"/tools/{action}", "methods": {action: {"method": "POST", "request": _TOOLS_REQUEST}}},
    )


CARD_EXTENSIONS: list[EnvironmentExtension] = [
    _tool_access(DISABLE_TOOL, "disable", "Disable tools for a role, or every role with '*' (admin token)."),
    _tool_access(ENABLE_TOOL, "enable", "Enable tools for a role, or every role with '*' (admin token)."),
    _ext(
        TRIGGERS,
        "The conditions the gateway watches for the instance's run, by trigger id (admin token). Triggers are "
        "declared in the task and registered by its steps: this gateway takes no registration of its own.",
        {"endpoint": "/triggers/state", "methods": {"state": {"method": "GET", "endpoint": "/triggers/state"}}},
    ),
    _ext(
        CLOCK,
        "The world's virtual time: get_time with a role token; state, set_time and clear with the admin token "
        "(set_time and clear only on an instance without a run: a run's clock is the run's).",
        {
            "endpoint": "/clock/time",
            "methods": {
                "get_time": {"method": "GET", "endpoint": "/clock/time"},
                "set_time": {
                    "method": "PUT",
                    "endpoint": "/clock/set-time",
                    "request": {
                        "type": "object",
                        "properties": {
                            "virtual_time": {"type": "string"},
                            "virtual_seconds_per_real_second": {"type": "number"},
                        },
                        "required": ["virtual_time"],
                    },
                },
                "clear": {"method": "POST", "endpoint": "/clock/clear", "request": _EMPTY},
                "state": {"method": "GET", "endpoint": "/clock/state", "request": _EMPTY},
            },
        },
    ),
    _ext(
        TRAJECTORY,
        "The instance's trajectory as JSON lines, oldest first: every tool call with its caller, role, arguments, "
        "result or error and virtual time (admin token; `after`: only entries past that seq).",
        {"endpoint": "/trajectory", "methods": {"get": {"method": "GET", "endpoint": "/trajectory"}}},
    ),
    _ext(
        STEP,
        "List or call the tools of the caller's role over REST (role token).",
        {"endpoint": "/step", "methods": {"step": {"method": "POST", "endpoint": "/step", "request": _STEP_REQUEST}}},
    ),
    _ext(
        STATE,
        "The instance's apps and their tools, and each role's rules and tools (admin token).",
        {"endpoint": "/state", "methods": {"get": {"method": "GET", "endpoint": "/state"}}},
    ),
]

CHANGES_EXTENSION = _ext(
    CHANGES,
    "The instance's changelog (admin token): its apps' row changes after `after_id`, oldest first, at most `limit`, "
    "each with its actors: the call that wrote it (its kind, role, agent and tool; for a trigger's action the "
    "trigger, the run's firing and the action's index) or the data-plane operation. Its last "
    f"{changelog.KEEP} changes are kept.",
    {
        "endpoint": "/changes",
        "methods": {
            "get": {
                "method": "GET",
                "endpoint": "/changes",
                "request": {
                    "type": "object",
                    "properties": {
                        "after_id": {"type": "integer", "minimum": 0},
                        "limit": {"type": "integer", "minimum": 1, "maximum": changes.PAGE_MAX},
                    },
                },
            }
        },
    },
)


def card_extensions(inst: EnvInstance) -> list[EnvironmentExtension]:
    """What an instance's card declares: changes/v1 only where its apps keep a changelog."""
    return [*CARD_EXTENSIONS, CHANGES_EXTENSION] if inst.keeps_changes else list(CARD_EXTENSIONS)


ToolName = Annotated[str, Field(min_length=1, max_length=256)]


class ToolsChange(BaseModel):
    """A disable-tool/v1 or enable-tool/v1 request."""

    role: str = Field(min_length=1, max_length=64)
    tools: Literal["*"] | Annotated[list[ToolName], Field(max_length=1024)]


class SetTime(BaseModel):
    """A clock/v1 set_time request: the virtual now, and how fast it runs (0: frozen; default 1, wall-clock pace)."""

    virtual_time: AwareDatetime
    virtual_seconds_per_real_second: float = Field(1.0, ge=0, le=MAX_RATE, allow_inf_nan=False)


class StepRequest(BaseModel):
    """A step/v1 request."""

    action: Literal["list_tools", "call_tool"]
    tool_name: ToolName | None = None
    arguments: JsonObject = Field(default_factory=dict)


def refuse_if_run_owned(inst: EnvInstance, what: str, steps: str) -> None:
    """409 when the instance belongs to a run: its clock, roles and triggers are the run's (see above)."""
    if inst.spec.run_id is not None:
        raise GatewayError(
            409,
            f"{what}: instance {inst.spec.id!r} belongs to run {inst.spec.run_id!r}, whose workflow is the source "
            f"of truth for its clock, roles and triggers; a change made here would not be the run's. Change it "
            f"through the run: {steps} in the task",
        )


def role_view(inst: EnvInstance, role: str) -> JsonObject:
    """A role's rules (patterns it allows, patterns it denies) and the tools they give it."""
    spec = inst.spec.roles[role]
    return {"role": role, "allowed": list(spec.tools), "disabled": list(spec.deny), "tools": sorted(inst.allowed[role])}


def _is_get_time(name: str) -> bool:
    return name in (roles.GET_TIME, f"{roles.GATEWAY_APP}.{roles.GET_TIME}")


def changed_rules(
    spec: RoleSpec, names: list[str] | Literal["*"], disable: bool, entries: list[roles.ToolEntry]
) -> RoleSpec:
    """A role's rules after tools are disabled or enabled by name (or all, '*'), as the protocol means it: the
    named tools are off, or on, whatever rule covered them before. A deny glob covering a tool being enabled is
    spelled out as the tools it denied, less the enabled ones."""
    if names == WILDCARD:
        return RoleSpec(tools=[], deny=[]) if disable else RoleSpec(tools=[WILDCARD], deny=[])
    if disable:
        return RoleSpec(
            tools=list(spec.tools), deny=spec.deny + [n for n in dict.fromkeys(names) if n not in spec.deny]
        )
    enabled = set(names)

    def named(entry: roles.ToolEntry) -> bool:
        return entry.exposed in enabled or entry.qualified in enabled

    deny: list[str] = []
    for pattern in spec.deny:
        covered = [e for e in entries if roles.matches(pattern, e)]
        if pattern in enabled:
            continue
        if any(named(e) for e in covered):
            deny += [e.exposed for e in covered if not named(e) and e.exposed not in deny]
        elif pattern not in deny:
            deny.append(pattern)
    tools = list(spec.tools)
    for name in dict.fromkeys(names):
        if not any(roles.matches(p, e) for p in tools for e in entries if name in (e.exposed, e.qualified)):
            tools.append(name)
    return RoleSpec(tools=tools, deny=deny)


async def change_tools(gateway: WorldPushes, inst: EnvInstance, action: str, change: ToolsChange) -> JsonObject:
    """Apply a disable-tool/v1 or enable-tool/v1 request through the gateway's own role changes (so agents are
    told their tools changed, and apps behind the instance that take tool access hear of it too)."""
    refuse_if_run_owned(inst, f"{action} tools", "modify_env_tool_access steps (or set_tools trigger actions)")
    disable = action == "disable"
    if disable and change.tools != WILDCARD and any(_is_get_time(t) for t in change.tools):
        raise GatewayError(400, f"{roles.GET_TIME!r} is the world's clock: every role keeps it; disable others")
    if change.role not in inst.spec.roles and change.role != WILDCARD:
        raise GatewayError(
            400, f"no role {change.role!r} in instance {inst.spec.id!r} (roles: {', '.join(inst.spec.roles)}, or '*')"
        )
    targets = list(inst.spec.roles) if change.role == WILDCARD else [change.role]
    for role in targets:
        rules = changed_rules(inst.spec.roles[role], change.tools, disable, inst.entries)
        await gateway.set_role(inst.spec.id, role, rules)
    if change.role != WILDCARD:
        return role_view(inst, change.role)
    listed = [] if change.tools == WILDCARD else list(change.tools)
    return {
        "role": WILDCARD,
        "disabled": listed if disable else [],
        "allowed": listed if not disable else [],
        "roles": {role: role_view(inst, role) for role in targets},
    }


async def set_time(gateway: WorldPushes, inst: EnvInstance, request: SetTime) -> JsonObject:
    """Anchor the instance's clock at `virtual_time`, running at the given pace from now."""
    refuse_if_run_owned(inst, "set_time", "sync_env_clock steps")
    rate = request.virtual_seconds_per_real_second
    clock = ClockState(
        mode="paced" if rate > 0 else "frozen",
        virtual_anchor=request.virtual_time.astimezone(UTC),
        real_anchor=datetime.now(UTC),
        rate=rate,
    )
    await gateway.push_world(inst.spec.id, WorldPush(run_id="", clock=clock))
    return clock_state(inst)


async def clear_time(gateway: WorldPushes, inst: EnvInstance) -> JsonObject:
    """Drop the clock set with set_time: the instance's time is its fixed `now` again, or the real time."""
    refuse_if_run_owned(inst, "clear the clock", "sync_env_clock steps")
    await gateway.push_world(inst.spec.id, WorldPush(run_id=""))
    return {"ok": True, "armed": False}


def clock_state(inst: EnvInstance) -> JsonObject:
    clock = inst.world.clock if inst.world is not None else None
    state: JsonObject = {"armed": clock is not None, "virtual_time": iso(inst.now())}
    if clock is not None:
        state.update(
            t0=iso(clock.virtual_anchor),
            virtual_seconds_per_real_second=clock.rate if clock.running else 0.0,
            mode=clock.mode,
        )
    return state


def triggers_state(inst: EnvInstance) -> JsonObject:
    """What the run asked the gateway to watch on this instance (the run keeps their firings)."""
    watches = inst.world.watches if inst.world is not None else []
    return {
        "run_id": inst.spec.run_id,
        "triggers": [{"id": w.trigger, "type": w.kind, "when": w.spec, "status": "armed"} for w in watches],
        "events": [],
    }


def state(inst: EnvInstance) -> JsonObject:
    """The instance's apps with their tools (as exposed), and each role's rules and tools."""
    servers: dict[str, list[JsonObject]] = {}
    for name, route in inst.tools.items():
        servers.setdefault(route.app_name, []).append(
            {"name": name, "description": route.spec.description, "parameters": route.spec.input_schema}
        )
    return {
        "mcp_servers": [{"name": app, "tools": tools} for app, tools in servers.items()],
        "changelog_id": inst.change_ids.last if inst.keeps_changes else None,
        "roles": {role: role_view(inst, role) for role in inst.spec.roles},
        "tool_name_clashes": {},
    }


def step_result(outcome: CallOutcome) -> JsonObject:
    """A tool's result as an MCP CallToolResult in JSON, as step/v1 answers it."""
    if "error" in outcome:
        return {"content": [{"type": "text", "text": outcome["error"]}], "isError": True}
    result = outcome["result"]
    text = result if isinstance(result, str) else json.dumps(result)
    answer: JsonObject = {"content": [{"type": "text", "text": text}], "isError": False}
    if isinstance(result, dict):
        answer["structuredContent"] = result
    return answer
