"""What the gateway tells the apps behind an instance that it reaches at a URL (servers that are not ours, written
with the protocol's env SDK or the framework's gateway) when a role's tools or the clock change, where their cards
declare the extension for it: `disable-tool/v1` and `enable-tool/v1` (the step `modify_env_tool_access`, the trigger action
`set_tools`, the instance's own tool-access extension) and `clock/v1` set_time (the run's clock, `sync_env_clock`).

This gateway enforces roles and stamps every call with the world's time itself, so agents coming through it need
neither; these keep such an app's own view the run's (its tool listing, its clock and what it does by its time,
whoever reaches it) instead of its defaults. An app that refuses is an error naming it (502), and nothing of
the change is applied here: the caller (a run's step) fails or retries instead of the two disagreeing.

Each time the gateway opens an instance (created, forked, or reopened from its store: after a restart, or once it
was closed as idle), every role's tools and the world's clock are pushed too (`push_view`): such an app starts with
the run's roles, not its own defaults, and after a gateway that died comes back, a clock that ran on alone past the
run's lease (the world's stopped there) is set to the world's again.

Not pushed: triggers (`triggers/v1` register). Every call to such an app passes through this gateway, which matches
it against the run's conditions; an engine of the app's own would fire them a second time, with its own actions.
"""

from __future__ import annotations

from datetime import UTC, datetime

import httpx2 as httpx

from agent_env.envs.app import ToolError
from agent_env.gateway.callers import GatewayError
from agent_env.gateway.env_instance import EnvInstance
from agent_env.gateway.extensions import CLOCK, DISABLE_TOOL, ENABLE_TOOL
from agent_env.gateway.remote import RemoteApp
from agent_env.spec.times import iso
from agent_env.spec.world_state import ClockState


def _remote_apps(inst: EnvInstance) -> list[RemoteApp]:
    return [app for app in inst.apps.values() if isinstance(app, RemoteApp) and app.extensions]


async def _invoke(app: RemoteApp, uri: str, method: str, body: dict[str, object]) -> None:
    try:
        await app.invoke(uri, method, body)
    except ToolError as e:
        raise GatewayError(502, f"{e}; nothing was changed") from None
    except httpx.HTTPError as e:
        raise GatewayError(
            502,
            f"app {app.name!r} at {app.base_url} did not answer {uri} {method} ({type(e).__name__}): nothing "
            "was changed; is its server running?",
        ) from None


async def push_role(inst: EnvInstance, role: str, allowed: frozenset[str]) -> None:
    """Tell each app that declares tool access which of its tools `role` may call now (by the app's own names)."""
    for app in _remote_apps(inst):
        tools = [(route.spec.name, exposed in allowed) for exposed, route in inst.tools.items() if route.app is app]
        off, on = [name for name, ok in tools if not ok], [name for name, ok in tools if ok]
        if off and app.declares(DISABLE_TOOL, "disable"):
            await _invoke(app, DISABLE_TOOL, "disable", {"role": role, "tools": off})
        if on and app.declares(ENABLE_TOOL, "enable"):
            await _invoke(app, ENABLE_TOOL, "enable", {"role": role, "tools": on})


async def push_clock(inst: EnvInstance, clock: ClockState) -> None:
    """Set the clock of each app that declares clock/v1 set_time to the world's now and pace (none once the world's
    clock stopped at its lease or its horizon). Such a clock runs on its own from there: it may pass the run's next
    event (the horizon) or its lease until the run's next push sets it again."""
    real = datetime.now(UTC)
    stopped = (clock.lease_until is not None and clock.lease_until <= real) or (
        clock.horizon is not None and clock.now(real) >= clock.horizon
    )
    body: dict[str, object] = {
        "virtual_time": iso(clock.now(real)),
        "virtual_seconds_per_real_second": clock.rate if clock.running and not stopped else 0.0,
    }
    for app in _remote_apps(inst):
        if app.declares(CLOCK, "set_time"):
            await _invoke(app, CLOCK, "set_time", body)


async def push_view(inst: EnvInstance) -> None:
    """Every role's tools and the world's clock, to the apps that declare taking them (an instance being opened)."""
    if not _remote_apps(inst):
        return
    for role in inst.spec.roles:
        await push_role(inst, role, inst.allowed[role])
    if inst.world is not None and inst.world.clock is not None:
        await push_clock(inst, inst.world.clock)
