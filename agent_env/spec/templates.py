"""`${...}` references from a step's config to earlier results.

    ${steps.read_back.outputs.count}   an output of step `read_back` (dots walk into dicts and lists)
    ${steps.verify.score}              a step's score value
    ${run.id}  ${task.id}  ${task.version}

A string that is exactly one reference takes the referenced value with its type; a reference inside
longer text is rendered as text. `$${` writes a literal `${`. Resolution is a pure function of the
scope, so the workflow can run it deterministically.

A reference ending in `?` (`${match.arguments.note?}`) is optional, as the AgentEnv Framework's trigger
placeholders are: when its path leads nowhere or to null, a value that is exactly the reference is left out (its
key dropped from a dict, its element from a list, so a tool applies its own default) and one inside text is empty.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from agent_env.spec.paths import PathError, walk_parts

REF = re.compile(r"(?<!\$)\$\{\s*([A-Za-z_][\w.\-]*\??)\s*\}")
_ABSENT = object()  # an optional reference that found nothing, used as a whole value: leave it out


class TemplateError(ValueError):
    pass


def has_template(value: Any) -> bool:
    if isinstance(value, str):
        return bool(REF.search(value))
    if isinstance(value, dict):
        return any(has_template(v) for v in value.values())
    if isinstance(value, list):
        return any(has_template(v) for v in value)
    return False


def referenced_names(value: Any) -> set[str]:
    """The paths `value`'s references look up (an optional one's without its `?`)."""
    if isinstance(value, str):
        return {path.rstrip("?") for path in REF.findall(value)}
    if isinstance(value, dict):
        return set().union(*map(referenced_names, value.values()))
    if isinstance(value, list):
        return set().union(*map(referenced_names, value))
    return set()


def referenced_steps(value: Any) -> set[str]:
    """Ids of the steps whose results `value` refers to."""
    found: set[str] = set()
    for path in referenced_names(value):
        parts = path.split(".")
        if parts[0] == "steps" and len(parts) > 1:
            found.add(parts[1])
    return found


def lookup(scope: Mapping[str, Any], path: str) -> Any:
    """The value at a reference's dotted path; TemplateError saying where it stopped and what is there."""
    try:
        return walk_parts(scope, path.split("."))
    except PathError as e:
        where = ".".join(e.walked) or "the scope"
        if isinstance(e.at, dict):
            known = ", ".join(sorted(map(str, e.at))) or "nothing"
            raise TemplateError(f"${{{path}}}: {where} has no '{e.part}' (it has: {known})") from None
        raise TemplateError(f"${{{path}}}: cannot look up '{e.part}' in {where} ({type(e.at).__name__})") from None


def _lookup_optional(scope: Mapping[str, Any], path: str) -> Any:
    """A reference's value; for an optional one (`path?`) that finds nothing or null, _ABSENT."""
    if not path.endswith("?"):
        return lookup(scope, path)
    try:
        found = walk_parts(scope, path[:-1].split("."))
    except PathError:
        return _ABSENT
    return _ABSENT if found is None else found


def _resolve(value: Any, scope: Mapping[str, Any]) -> Any:
    if isinstance(value, str):
        whole = REF.fullmatch(value.strip())
        if whole:
            return _lookup_optional(scope, whole.group(1))

        def render(m: re.Match[str]) -> str:
            found = _lookup_optional(scope, m.group(1))
            if found is _ABSENT:
                return ""
            return found if isinstance(found, str) else json.dumps(found)

        return REF.sub(render, value).replace("$${", "${")
    if isinstance(value, dict):
        return {k: r for k, v in value.items() if (r := _resolve(v, scope)) is not _ABSENT}
    if isinstance(value, list):
        return [r for v in value if (r := _resolve(v, scope)) is not _ABSENT]
    return value


def resolve(value: Any, scope: dict[str, Any]) -> Any:
    """`value` with its references resolved (an optional one that found nothing left out, or None on its own)."""
    out = _resolve(value, scope)
    return None if out is _ABSENT else out


def ref(path: str) -> str:
    """A reference to `path` (e.g. "steps.deploy.outputs"), for configs that prepare hooks write."""
    return "${" + path + "}"
