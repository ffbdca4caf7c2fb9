"""What the run pushes into an instance: roles and which agent plays which, its clock and trigger conditions
(state conditions already true come back as hits)."""

from __future__ import annotations

from typing import Any, cast

from agent_env.envs.app import ToolError
from agent_env.envs.context import Ctx
from agent_env.gateway import foreign
from agent_env.gateway.callers import GatewayError
from agent_env.gateway.env_instance import EnvInstance
from agent_env.gateway.releasing import Releasing
from agent_env.gateway.spec import RoleSpec
from agent_env.gateway.state import WORLDS
from agent_env.gateway.watch import UNMET
from agent_env.gateway_client import wire
from agent_env.spec.paths import walk
from agent_env.spec.predicates import operators_given, test
from agent_env.spec.roles import role_tools
from agent_env.spec.state_reads import StateRead
from agent_env.spec.templates import TemplateError, resolve
from agent_env.spec.world import StateWhen
from agent_env.spec.world_state import ClockState, TriggerHit, WorldPush


class WorldPushes(Releasing):
    async def set_role(self, instance_id: str, role: str, spec: RoleSpec) -> frozenset[str]:
        inst = await self.get(instance_id)
        await foreign.push_role(inst, role, role_tools(role, spec, inst.entries))  # (apps at URLs first: see there)
        allowed = inst.set_role(role, spec)
        self._save(inst)
        await self._tools_changed(instance_id)
        return allowed

    async def change_role(self, instance_id: str, role: str, enable: list[str], disable: list[str]) -> frozenset[str]:
        """Enable or disable tools for a role (names or patterns), keeping the rest of its rules."""
        inst = await self.get(instance_id)
        if role not in inst.spec.roles:
            raise GatewayError(
                400, f"no role {role!r} in instance {instance_id!r} (roles: {', '.join(inst.spec.roles)})"
            )
        current = inst.spec.roles[role]
        tools = current.tools + [t for t in enable if t not in current.tools]
        deny = [d for d in current.deny if d not in enable] + [d for d in disable if d not in current.deny]
        return await self.set_role(instance_id, role, RoleSpec(tools=tools, deny=deny))

    async def set_agent_role(self, instance_id: str, agent: str, role: str) -> None:
        inst = await self.get(instance_id)
        if role not in inst.spec.roles:
            raise GatewayError(
                400, f"no role {role!r} in instance {instance_id!r} (roles: {', '.join(inst.spec.roles)})"
            )
        inst.agents[agent] = role
        inst.spec.agents = dict(inst.agents)
        self._tokens[instance_id][self._digest(self._role_token(inst.spec, agent))] = agent
        self._save(inst)
        await self._tools_changed(instance_id)

    async def push_world(self, instance_id: str, push: WorldPush) -> list[wire.Hit]:
        """The run's clock and conditions for this instance. Returns hits of state conditions already true."""
        inst = await self.get(instance_id)
        if push.clock is not None and _moved(inst.world.clock if inst.world else None, push.clock):
            await foreign.push_clock(inst, push.clock)  # (apps at URLs first: see there)
        inst.apply_world(push)
        self.store.put(WORLDS, instance_id, push.model_dump(mode="json"))
        if inst.watcher is None or not inst.watcher.states:
            return []
        vnow = inst.now()
        values = await self._state_values(inst)
        return [
            cast(
                wire.Hit,
                TriggerHit(
                    trigger=w.trigger, instance=instance_id, virtual_time=vnow, match={"value": values[w.trigger]}
                ).model_dump(mode="json"),
            )
            for w in inst.watcher.state_edges(values)
        ]

    async def _state_values(self, inst: EnvInstance) -> dict[str, Any]:
        """Each state condition's current value, read through its (read-only) tools: UNMET when a read before
        its own failed, bound nothing or failed its test; left out when its own read failed."""
        assert inst.watcher is not None  # (callers check)
        values: dict[str, Any] = {}
        first_role = next(iter(inst.spec.roles))
        for watch, when in inst.watcher.states:
            ctx = Ctx(
                role=when.role or first_role,
                run_id=inst.spec.run_id,
                agent="@watch",
                instance=inst.spec.id,
                virtual_now=inst.now(),
            )
            bindings = await _read_before(inst, when, ctx)
            if bindings is None:
                values[watch.trigger] = UNMET
                continue
            try:
                arguments = resolve(when.arguments, bindings) if when.before else when.arguments
                values[watch.trigger] = await _read(inst, when.tool, arguments, when.path, ctx)
            except (ToolError, KeyError, TemplateError):
                continue
        return values


async def _read(inst: EnvInstance, tool: str, arguments: dict[str, object], path: str, ctx: Ctx) -> object:
    """A read-only tool's result at `path`; ToolError or KeyError when there is none."""
    route = inst.tools.get(tool)
    if route is None or route.app is None:
        raise ToolError(f"no tool {tool!r} served here")
    return walk(await route.app.call_async(route.spec.name, arguments, ctx), path)


async def _read_before(inst: EnvInstance, when: StateWhen, ctx: Ctx) -> dict[str, object] | None:
    """The values the reads before a state condition's own bind, or None when one fails or fails its test."""
    bindings: dict[str, object] = {}
    for read in when.before:
        try:
            value = await _read(inst, read.tool, resolve(read.arguments, bindings), read.path, ctx)
        except (ToolError, KeyError):
            return None
        if read.bind is not None:
            if value in (None, "", []):
                return None
            bindings[read.bind] = value
        if operators_given(read) and not test(*_operator(read, value))[0]:
            return None
    return bindings


def _operator(read: StateRead, value: object) -> tuple[str, object, object]:
    op, expected = read.operator
    return op, value, expected


def _moved(before: ClockState | None, after: ClockState) -> bool:
    """Whether the clock changed other than by a renewed lease (which the run pushes as it lives)."""
    return before is None or before.model_copy(update={"lease_until": None}) != after.model_copy(
        update={"lease_until": None}
    )
