"""`${...}` references from a step's config to earlier results.

    ${steps.read_back.outputs.count}   an output of step `read_back` (dots walk into dicts and lists)
    ${steps.verify.score}              a step's score value
    ${run.id}  ${task.id}  ${task.version}

A string that is exactly one reference takes the referenced value with its type; a reference inside
longer text is rendered as text. `$${` writes a literal `${`. Resolution is a pure function of the
scope, so the workflow can run it deterministically.
"""

from __future__ import annotations

import json
import re
from typing import Any

from agent_env.spec.paths import PathError, walk_parts

REF = re.compile(r"(?<!\$)\$\{\s*([A-Za-z_][\w.\-]*)\s*\}")


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


def referenced_steps(value: Any) -> set[str]:
    """Ids of the steps whose results `value` refers to."""
    found: set[str] = set()
    if isinstance(value, str):
        for path in REF.findall(value):
            parts = path.split(".")
            if parts[0] == "steps" and len(parts) > 1:
                found.add(parts[1])
    elif isinstance(value, dict):
        for v in value.values():
            found |= referenced_steps(v)
    elif isinstance(value, list):
        for v in value:
            found |= referenced_steps(v)
    return found


def lookup(scope: dict[str, Any], path: str) -> Any:
    """The value at a reference's dotted path; TemplateError saying where it stopped and what is there."""
    try:
        return walk_parts(scope, path.split("."))
    except PathError as e:
        where = ".".join(e.walked) or "the scope"
        if isinstance(e.at, dict):
            known = ", ".join(sorted(map(str, e.at))) or "nothing"
            raise TemplateError(f"${{{path}}}: {where} has no '{e.part}' (it has: {known})") from None
        raise TemplateError(f"${{{path}}}: cannot look up '{e.part}' in {where} ({type(e.at).__name__})") from None


def resolve(value: Any, scope: dict[str, Any]) -> Any:
    if isinstance(value, str):
        whole = REF.fullmatch(value.strip())
        if whole:
            return lookup(scope, whole.group(1))

        def render(m: re.Match[str]) -> str:
            found = lookup(scope, m.group(1))
            return found if isinstance(found, str) else json.dumps(found)

        return REF.sub(render, value).replace("$${", "${")
    if isinstance(value, dict):
        return {k: resolve(v, scope) for k, v in value.items()}
    if isinstance(value, list):
        return [resolve(v, scope) for v in value]
    return value


def ref(path: str) -> str:
    """A reference to `path` (e.g. "steps.deploy.outputs"), for configs that prepare hooks write."""
    return "${" + path + "}"
