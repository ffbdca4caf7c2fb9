"""Environments as declared: which apps, composed how, which roles see which tools, what data to start with.

In a bundle, `envs/NAME/env.toml` holds an `EnvRecord`; its data files live beside it.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

NAME = r"^[a-z][a-z0-9_\-]{0,39}$"


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid")


class AppRef(_Spec):
    app: str = Field(description="a built-in app (notes, mail, chat, helpdesk, billing) or MODULE:Class")
    name: str | None = Field(None, pattern=NAME, description="name within the environment (default: the app's)")
    prefix: str = Field("", pattern=r"^([a-z][a-z0-9_]{0,19}_)?$",
                        description="prepended to its tool names, to tell two apps' tools apart")
    run: Literal["in_process", "subprocess"] = Field(
        "in_process", description="in the gateway's process (fastest), or in a process of its own, reached "
                                  "over MCP and the data plane like any remote env server")


class RoleSpec(_Spec):
    """Which tools a role sees and may call. Patterns: a tool name, `app.tool`, globs like `mail.*`
    or `*`. Globs never include hidden tools (e.g. billing's `issue_refund`): name those explicitly."""

    tools: list[str] = Field(default_factory=lambda: ["*"])
    deny: list[str] = Field(default_factory=list)


class EnvRecord(_Spec):
    name: str = Field(pattern=NAME)
    version: str = "1"
    description: str = ""
    apps: list[AppRef] = Field(min_length=1)
    roles: dict[str, RoleSpec] = Field(default_factory=lambda: {"agent": RoleSpec()})
    data: list[str] = Field(default_factory=list, description="JSON data files loaded at deploy, relative to the "
                                                              "record's folder: {app: {table: [rows]}}")

    @model_validator(mode="after")
    def _tools_exist(self) -> EnvRecord:
        check_composition(self.apps, self.roles)
        return self

    @classmethod
    def for_app(cls, app: str) -> EnvRecord:
        """A one-app environment with a single role, `agent`, that sees every tool but hidden ones."""
        from agentenv.envs.builtin import APPS
        from agentenv.envs.instance import load_app_class

        return cls(name=load_app_class(APPS.get(app, app)).name.replace("_", "-"), apps=[AppRef(app=app)])


def check_composition(apps: list[AppRef], roles: dict[str, RoleSpec]) -> None:
    """Apps load, their tool names do not clash, and every role pattern names a real tool."""
    from agentenv.envs.builtin import APPS
    from agentenv.envs.instance import load_app_class
    from agentenv.gateway.mcp_tools import GET_TIME
    from agentenv.gateway.roles import ToolEntry, allowed_tools

    entries = {GET_TIME: ToolEntry(GET_TIME, f"gateway.{GET_TIME}", False)}
    seen: set[str] = set()
    from agentenv.errors import BadInput

    for ref in apps:
        try:
            app_cls = load_app_class(APPS.get(ref.app, ref.app))
        except BadInput as e:
            raise ValueError(f"{e.problem} — {e.fix}") from None
        name = ref.name or app_cls.name
        if name in seen:
            raise ValueError(f"two apps are named {name!r}; give one a `name`")
        seen.add(name)
        for tool in app_cls.tools.values():
            exposed = ref.prefix + tool.name
            if exposed in entries:
                raise ValueError(f"{name}.{tool.name} and {entries[exposed].qualified} are both exposed as "
                                 f"{exposed!r}; give one app a `prefix` (e.g. prefix = \"{name}_\")")
            entries[exposed] = ToolEntry(exposed, f"{name}.{tool.name}", tool.hidden)
    for role, spec in roles.items():
        allowed_tools(role, spec, list(entries.values()))
