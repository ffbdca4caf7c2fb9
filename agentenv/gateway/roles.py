"""Resolve role patterns against an instance's tools.

A tool is known by its exposed name (what agents see, e.g. `issue_refund`) and its qualified name
(`billing.issue_refund`). Patterns may use either, with shell-style globs. Globs never match hidden
tools; exact names do. A pattern that matches nothing is an error: it is almost always a typo.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass

from agentenv.gateway.spec import RoleSpec


@dataclass(frozen=True)
class ToolEntry:
    exposed: str
    qualified: str
    hidden: bool


class RoleError(ValueError):
    pass


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
                raise RoleError(f"role {role!r}: {field} entry {pattern!r} matches no tool of this environment "
                                f"(tools: {known})")
    allowed = {t.exposed for t in tools if any(matches(p, t) for p in spec.tools)}
    denied = {t.exposed for t in tools if any(matches(p, t) for p in spec.deny)}
    return frozenset(allowed - denied)
