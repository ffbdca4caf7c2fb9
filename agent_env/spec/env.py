"""Environments as declared: which apps, composed how, which roles see which tools, what data to start with.

In a bundle, `envs/NAME/env.toml` holds an `EnvRecord`; its data files live beside it. What needs the
installed apps (do they load, do their tool names clash, does every role pattern name a tool) is checked
by `agent_env.envs.records`, where records are loaded.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from agent_env.spec.secret_refs import NAME as SECRET_NAME
from agent_env.spec.secret_refs import PREFIX, is_reference

NAME = r"^[a-z][a-z0-9_\-]{0,39}$"


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Network(BaseModel):
    """`open` (default), `none`, an allowlist of addresses (IPs or CIDRs) the sandbox may reach, or
    `host`: the host's own network (it reaches services on the host's loopback, e.g. the gateway)."""

    model_config = ConfigDict(extra="forbid")
    mode: Literal["open", "none", "allowlist", "host"] = "open"
    allow: list[str] = Field(default_factory=list)

    @classmethod
    def parse(cls, value: Any) -> Network:
        if isinstance(value, Network):
            return value
        if value in (None, "open"):
            return cls()
        if value in ("none", "host"):
            return cls(mode=value)
        if isinstance(value, list):
            import ipaddress

            for item in value:
                try:
                    ipaddress.ip_network(item, strict=False)
                except ValueError:
                    raise ValueError(
                        f'network allowlist entry {item!r} is not an IP address or CIDR (e.g. "10.0.0.0/8")'
                    ) from None
            return cls(mode="allowlist", allow=list(value))
        raise ValueError(f'network must be "open", "none", "host" or a list of allowed CIDRs, not {value!r}')


class SandboxRun(_Spec):
    """What runs in a sandbox: a container built from a Dockerfile, an image, or (with the local provider)
    a command. Shared by sandboxed env apps and sandboxed agents."""

    build: str | None = Field(None, description="a folder with a Dockerfile, relative to the record's folder")
    image: str | None = Field(None, description="an image to run instead of building one")
    command: list[str] | None = Field(
        None, description="what to run (default: the image's CMD); the local provider needs it"
    )
    port: int = Field(8000, ge=1, le=65535, description="the port the server listens on ($PORT is set to it)")
    host_port: int | None = Field(None, ge=1, le=65535, description="publish on this host port (default: a free one)")
    env: dict[str, str] = Field(
        default_factory=dict,
        description="environment variables; give keys and tokens "
        "as `secret:NAME` references (resolved when the "
        "sandbox starts: values written here are recorded "
        "with the run)",
    )
    cpus: float | None = Field(None, gt=0, le=64)
    memory_mb: int | None = Field(None, ge=16)
    network: Literal["open", "none", "host"] | list[str] = Field(
        "open",
        description='"open", "none" (no route out), a list of CIDRs it may reach, or "host" (the '
        "host's network: it reaches the gateway on 127.0.0.1; isolation of files only)",
    )
    provider: str | None = Field(
        None,
        description="sandbox provider or fallback chain (default: [sandboxes] envs "
        "for apps, [sandboxes] agents for agents)",
    )
    ttl_hours: float | None = Field(None, gt=0, description="reaped after this long whatever its run")

    @model_validator(mode="after")
    def _source(self) -> SandboxRun:
        if not (self.build or self.image or self.command):
            raise ValueError("a sandbox needs `build` (a folder with a Dockerfile), `image` or `command`")
        if self.build and self.image:
            raise ValueError("give either `build` or `image`, not both")
        Network.parse(self.network)
        _check_env(self.env)
        return self


ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")


def _check_env(env: dict[str, str]) -> None:
    """Names a process can receive; `secret:` references that name a secret (their values are checked when
    the run is planned, and read only when the sandbox starts)."""
    for name, value in env.items():
        if not ENV_NAME.match(name):
            raise ValueError(f"env name {name!r} is not a variable name (letters, digits and '_', not first a digit)")
        if name in ("HOST", "PORT"):
            raise ValueError(f"env {name} is set by the provider (where the sandbox must serve); remove it")
        if is_reference(value) and not SECRET_NAME.match(value[len(PREFIX) :]):
            raise ValueError(
                f"env {name}: {value!r} is not a valid secret reference (secret:NAME, NAME of "
                "letters, digits, '.', '_' and '-')"
            )


class SandboxApp(SandboxRun):
    """An app that is any MCP server (streamable HTTP), run in a sandbox."""

    path: str = Field("/mcp", pattern=r"^/", description="the MCP endpoint's path")


class AgentSandbox(SandboxRun):
    """An A2A agent run in a sandbox (see `A2aConfig`)."""

    path: str = Field("/", pattern=r"^/", description="the A2A base path (its card is under it)")


class AppRef(_Spec):
    """One app of an environment: exactly one of a Python app (`app`), an MCP server in a sandbox, or a URL."""

    app: str | None = Field(None, description="a built-in app (notes, mail, chat, helpdesk, billing) or MODULE:Class")
    sandbox: SandboxApp | None = Field(None, description="instead of `app`: an MCP server run in a sandbox")
    url: str | None = Field(
        None,
        pattern=r"^https?://",
        description="instead of `app`: a running MCP server's base URL (its endpoint is `path` under it)",
    )
    path: str = Field("/mcp", pattern=r"^/", description="with `url`: the MCP endpoint's path")
    name: str | None = Field(None, pattern=NAME, description="name within the environment (default: the app's)")
    prefix: str = Field(
        "",
        pattern=r"^([a-z][a-z0-9_]{0,19}_)?$",
        description="prepended to its tool names, to tell two apps' tools apart",
    )
    run: Literal["in_process", "subprocess"] = Field(
        "in_process",
        description="in the gateway's process (fastest), or in a process of its own, reached "
        "over MCP and the data plane like any remote env server",
    )

    @model_validator(mode="after")
    def _one_source(self) -> AppRef:
        if sum(x is not None for x in (self.app, self.sandbox, self.url)) != 1:
            raise ValueError(
                "an app is exactly one of `app` (a Python app), `sandbox` (an MCP server in a "
                "sandbox) or `url` (a running MCP server)"
            )
        if self.app is None and self.name is None:
            raise ValueError("a sandboxed or remote app needs a `name`")
        return self

    @property
    def remote(self) -> bool:
        """Its tools are only known once it runs."""
        return self.app is None


class RoleSpec(_Spec):
    """Which tools a role sees and may call. Patterns: a tool name, `app.tool`, globs like `mail.*`
    or `*`. Globs never include hidden tools (e.g. billing's `issue_refund`): name those explicitly."""

    tools: list[str] = Field(default_factory=lambda: ["*"])
    deny: list[str] = Field(default_factory=list)


class EnvRecord(_Spec):
    """An environment (`env.toml`): its apps, the roles agents act as, the data loaded at deploy, its topology."""

    name: str = Field(pattern=NAME)
    version: str = "1"
    description: str = ""
    apps: list[AppRef] = Field(min_length=1)
    env_provider_type: str = Field(
        "gateway",
        pattern=NAME,
        description="its topology: `gateway` (an instance behind the install's gateway), `server` (a server of its "
        "own, reached directly, with the gateway's roles and tokens at its door) or an `agent_env.env_providers` "
        "plugin's name (a server of its own on that plugin's compute)",
    )
    roles: dict[str, RoleSpec] = Field(default_factory=lambda: {"agent": RoleSpec()})
    data: list[str] = Field(
        default_factory=list,
        description="JSON data files loaded at deploy, relative to the record's folder: {app: {table: [rows]}}",
    )
