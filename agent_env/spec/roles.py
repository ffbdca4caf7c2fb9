"""Which tools an environment exposes, and which of them each role sees: the one place that decides it
(environment records' checks, the task's trigger checks and the gateway's instances all ask here). Pure rules
on declared roles, so they live with the specs, below everything that applies them.

An environment exposes the gateway's own tools (`get_time`) and each app's tools under the app's prefix.
A tool is known by its exposed name (what agents see, e.g. `issue_refund`) and its qualified name
(`billing.issue_refund`). Patterns may use either, with shell-style globs. Globs never match hidden
tools; exact names do. A pattern that matches nothing is an error: it is almost always a typo. Every role
may call `get_time`.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from agent_env.spec.env import RoleSpec

GATEWAY_APP = "gateway"  # the app name the gateway's own tools are qualified with
GET_TIME = "get_time"  # the gateway's own tool, in every instance: every role may call it


@dataclass(frozen=True)
class ToolEntry:
    exposed: str
    qualified: str
    hidden: bool


class RoleError(ValueError):
    pass


class ToolClash(ValueError):
    """Two tools would be exposed under one name; the message names both and the fix."""


def tool_entries(apps: Iterable[tuple[str, str, Iterable[Any]]]) -> dict[str, ToolEntry]:
    """The tools an environment exposes, by exposed name: the gateway's own, then each app's under its prefix.
    `apps`: (app name, prefix, the app's tools: anything with `.name` and `.hidden`). ToolClash on a clash."""
    entries = {GET_TIME: ToolEntry(GET_TIME, f"{GATEWAY_APP}.{GET_TIME}", False)}
    for app, prefix, tools in apps:
        for tool in tools:
            exposed = prefix + tool.name
            if exposed in entries:
                raise ToolClash(
                    f"{app}.{tool.name} and {entries[exposed].qualified} are both exposed as "
                    f'{exposed!r}; give one app a `prefix` (e.g. prefix = "{app}_")'
                )
            entries[exposed] = ToolEntry(exposed, f"{app}.{tool.name}", bool(tool.hidden))
    return entries


def _is_glob(pattern: str) -> bool:
    return any(c in pattern for c in "*?[")


def names(pattern: str, tool: ToolEntry) -> bool:
    """Whether the pattern refers to the tool at all (hidden or not)."""
    if _is_glob(pattern):
        return fnmatch.fnmatchcase(tool.exposed, pattern) or fnmatch.fnmatchcase(tool.qualified, pattern)
    return pattern in (tool.exposed, tool.qualified)


def matches(pattern: str, tool: ToolEntry) -> bool:
    """Whether the pattern grants (or denies) the tool: globs skip hidden tools."""
    return names(pattern, tool) and not (tool.hidden and _is_glob(pattern))


def allowed_tools(role: str, spec: RoleSpec, tools: list[ToolEntry]) -> frozenset[str]:
    """Exposed names of the tools `role` may see and call."""
    for field, patterns in (("tools", spec.tools), ("deny", spec.deny)):
        for pattern in patterns:
            if not any(names(pattern, t) for t in tools):
                known = ", ".join(t.exposed for t in tools)
                raise RoleError(
                    f"role {role!r}: {field} entry {pattern!r} matches no tool of this environment (tools: {known})"
                )
    allowed = {t.exposed for t in tools if any(matches(p, t) for p in spec.tools)}
    denied = {t.exposed for t in tools if any(matches(p, t) for p in spec.deny)}
    return frozenset(allowed - denied)


def role_tools(role: str, spec: RoleSpec, tools: list[ToolEntry]) -> frozenset[str]:
    """What `role` sees: the tools its patterns allow, and always `get_time` (a role cannot lose the clock)."""
    return allowed_tools(role, spec, tools) | {GET_TIME}
