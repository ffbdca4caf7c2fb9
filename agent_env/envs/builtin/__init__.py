"""Apps by name: the built-ins, then plugins in the `agent_env.envs` entry-point group (a built-in's name wins).

Each is an `agent_env.envs.App`; `APPS` maps built-in names to their import targets, `app_targets()` adds the plugins.
"""

from functools import cache

APPS = {
    "notes": "agent_env.envs.builtin.notes:Notes",
    "mail": "agent_env.envs.builtin.mail:Mail",
    "chat": "agent_env.envs.builtin.chat:Chat",
    "helpdesk": "agent_env.envs.builtin.helpdesk:Helpdesk",
    "billing": "agent_env.envs.builtin.billing:Billing",
    "payables": "agent_env.envs.builtin.payables:Payables",
}
ENTRY_POINT_GROUP = "agent_env.envs"


@cache
def app_targets() -> dict[str, str]:
    """Every app name this install knows -> its `module:Class` (read once per process, as step types are)."""
    from importlib.metadata import entry_points

    found = {ep.name: ep.value for ep in entry_points(group=ENTRY_POINT_GROUP)}
    return {**found, **APPS}
