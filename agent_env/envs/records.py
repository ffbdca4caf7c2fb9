"""Environment records against the installed apps: do they load, do their tool names clash, does every
role pattern name a real tool. `spec.env` holds the records' shape and `spec.roles` the role rules; this is
what needs the apps."""

from __future__ import annotations

from typing import Any, cast

from pydantic import ValidationError

from agent_env.envs.app_instance import load_app_class
from agent_env.envs.builtin import app_targets
from agent_env.errors import BadInput
from agent_env.spec.env import AppRef, EnvRecord, RoleSpec
from agent_env.spec.roles import allowed_tools, tool_entries


def env_record(data: Any) -> EnvRecord:
    """`data` as an environment record whose apps compose (pydantic's errors, as if the model checked it)."""
    record = EnvRecord.model_validate(data)
    try:
        check_composition(record.apps, record.roles)
    except ValueError as e:
        raise ValidationError.from_exception_data(
            "EnvRecord", [{"type": "value_error", "loc": (), "input": data, "ctx": {"error": e}}]
        ) from None
    return record


def env_for_app(app: str) -> EnvRecord:
    """A one-app environment with a single role, `agent`, that sees every tool but hidden ones."""
    return EnvRecord(name=load_app_class(app_targets().get(app, app)).name.replace("_", "-"), apps=[AppRef(app=app)])


def check_composition(apps: list[AppRef], roles: dict[str, RoleSpec]) -> None:
    """Apps load, their tool names do not clash, and every role pattern names a real tool (ValueError if not)."""
    seen: set[str] = set()
    mounted = []
    for ref in apps:
        if ref.app is None:  # remote (AppRef's validator: it has a name); its tools are known once it runs
            seen.add(cast(str, ref.name))
            continue
        try:
            app_cls = load_app_class(app_targets().get(ref.app, ref.app))
        except BadInput as e:
            raise ValueError(f"{e.problem} — {e.fix}") from None
        name = ref.name or app_cls.name
        if name in seen:
            raise ValueError(f"two apps are named {name!r}; give one a `name`")
        seen.add(name)
        mounted.append((name, ref.prefix, app_cls.tools.values()))
    entries = tool_entries(mounted)  # ToolClash (a ValueError) names both tools
    if any(ref.remote for ref in apps):
        return  # roles are checked against the real tools when the environment is deployed
    for role, spec in roles.items():
        allowed_tools(role, spec, list(entries.values()))


def exposed_tools(record: EnvRecord) -> set[str] | None:
    """The tools an environment exposes; None when an app's tools are only known once it runs."""
    if any(ref.remote for ref in record.apps):
        return None
    classes = [(ref, load_app_class(app_targets().get(cast(str, ref.app), cast(str, ref.app)))) for ref in record.apps]
    return set(tool_entries((ref.name or cls.name, ref.prefix, cls.tools.values()) for ref, cls in classes))
