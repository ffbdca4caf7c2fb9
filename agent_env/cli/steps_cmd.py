"""`agent-env steps list|show TYPE`: the step catalog, readably. Fields, types, defaults and the example come
from each type's pydantic config model (the one source task files are validated against), never a second list."""

from __future__ import annotations

import difflib
import json
import re
from typing import Any

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from agent_env.cli.output import console
from agent_env.errors import AgentEnvError, NotFound
from agent_env.steps import BUILTINS, StepType, catalog


def list_command() -> int:
    from rich.markup import escape
    from rich.table import Table

    table = Table(box=None, pad_edge=False)
    for col in ("type", "from", "traits", "description"):
        table.add_column(col, overflow="fold")
    for name in catalog.names():
        origin = "built-in" if name in BUILTINS else "plugin"
        try:
            st = catalog.get(name)
        except ImportError as e:  # one broken plugin must not hide the others
            cause = e.__cause__ or e
            table.add_row(escape(name), origin, "", f"[red]✗ does not load: {escape(str(cause))}[/]")
            continue
        table.add_row(escape(name), origin, escape(", ".join(traits(st))), escape(st.description))
    console().print(table)
    return 0


def show_command(name: str) -> int:
    st = _get(name)
    from rich.markup import escape
    from rich.table import Table

    print_ = console().print
    print_(f"[bold]{escape(st.name)}[/] ({'built-in' if st.name in BUILTINS else 'plugin'}): {escape(st.description)}")
    print_(f"traits: {escape(', '.join(traits(st)))}")
    print_()
    fields = st.config.model_fields
    if fields:
        table = Table(box=None, pad_edge=False, title=f"config ({st.config.__name__})", title_justify="left")
        for col in ("field", "type", "default", "description"):
            table.add_column(col, overflow="fold")
        for field_name, field in fields.items():
            default = "(required)" if field.is_required() else _default(field)
            table.add_row(
                escape(field_name),
                escape(_type_name(field.annotation)),
                escape(default),
                escape(field.description or ""),
            )
        print_(table)
    else:
        print_("config: none")
    print_()
    print_("example:")
    print_(escape(example_toml(st)), highlight=False)
    return 0


def traits(st: StepType) -> list[str]:
    """What sets this type apart, in the words of `@step_type`."""
    if st.in_workflow:
        return [f"in workflow ({st.verb or '?'})"]  # the workflow applies it: no activity, timeout or retries
    out = ["local" if st.local else ("quick when small" if st.quick else "activity")]
    out.append(f"timeout {_duration(st.timeout.total_seconds())}")
    out.append(f"retries {st.retries}")
    out += [label for flag, label in ((st.deploys_env, "deploys env"), (st.deploys_agent, "deploys agent")) if flag]
    out += [label for flag, label in ((st.conversation, "conversation"), (st.sandboxes, "sandboxes")) if flag]
    return out


def example_toml(st: StepType) -> str:
    """A task-file step of this type: its required config fields with placeholder values."""
    schema = st.config.model_json_schema()
    defs = schema.get("$defs", {})
    lines = ["[[steps]]", f'id = "{st.name}"', f'type = "{st.name}"']
    # a config that needs one of several fields (its schema's oneOf of `required`s, as prompt or parts) shows the first
    choices: list[dict[str, list[str]]] = schema.get("oneOf", [])
    needed = set(schema.get("required", [])) | set(choices[0].get("required", []) if choices else ())
    required = [name for name in schema.get("properties", {}) if name in needed]
    if required:
        lines += ["", "[steps.config]"]
        for name in required:
            prop = schema["properties"][name]
            note = f"  # {prop['description']}" if prop.get("description") else ""
            lines.append(f"{_key(name)} = {_toml(_placeholder(prop, defs))}{note}")
    optional = [name for name in schema.get("properties", {}) if name not in required]
    if optional:
        lines += ["", f"# optional: {', '.join(optional)}"]
    return "\n".join(lines)


def _get(name: str) -> StepType:
    names = catalog.names()
    if name not in names:
        close = difflib.get_close_matches(name, names, n=3, cutoff=0.5)
        raise NotFound(
            f"no step type named {name!r}" + (f" (did you mean {', '.join(close)}?)" if close else ""),
            "`agent-env steps list` shows every step type",
        )
    try:
        return catalog.get(name)
    except ImportError as e:
        raise AgentEnvError(str(e), f"`agent-env plugin check {name}` says what is wrong and how to fix it") from None


def _placeholder(prop: dict[str, Any], defs: dict[str, Any]) -> Any:
    """A value of this JSON Schema's shape: the first choice, the smallest number, '...' for text."""
    if "$ref" in prop:
        return _placeholder(defs[prop["$ref"].rsplit("/", 1)[-1]], defs)
    for key in ("anyOf", "oneOf", "allOf"):
        if key in prop:
            options = [o for o in prop[key] if o.get("type") != "null"] or prop[key]
            return _placeholder(options[0], defs)
    if "const" in prop:
        return prop["const"]
    if "enum" in prop:
        return prop["enum"][0]
    kind = prop.get("type")
    if kind == "string":
        return "..."
    if kind in ("integer", "number"):
        return prop.get("minimum", prop.get("exclusiveMinimum", -1) + 1)
    if kind == "boolean":
        return False
    if kind == "array":
        return [_placeholder(prop.get("items", {}), defs)] * min(prop.get("minItems", 0), 1)
    if kind == "object" or "properties" in prop:
        return {
            k: _placeholder(v, defs) for k, v in prop.get("properties", {}).items() if k in prop.get("required", [])
        }
    return "..."


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value)  # a JSON string is a TOML basic string
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{_key(k)} = {_toml(v)}" for k, v in value.items()) + " }" if value else "{}"
    return str(value)


def _key(name: str) -> str:
    return name if re.fullmatch(r"[A-Za-z0-9_-]+", name) else json.dumps(name)


def _default(field: Any) -> str:
    value = field.default_factory() if field.default_factory is not None else field.default
    if value is PydanticUndefined:
        return ""
    if isinstance(value, BaseModel):
        value = value.model_dump(mode="json")
    if hasattr(value, "total_seconds"):
        return _duration(value.total_seconds())
    return json.dumps(value, default=str)


def _type_name(annotation: Any) -> str:
    if isinstance(annotation, type) and not getattr(annotation, "__args__", None):
        return annotation.__name__
    text = str(annotation)
    return re.sub(r"\b(typing|typing_extensions|datetime|collections\.abc|[a-z_]+(\.[a-z_]+)+)\.", "", text)


def _duration(seconds: float) -> str:
    for unit, size in (("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:g}s"
