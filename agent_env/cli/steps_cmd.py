"""`agent-env steps list|show TYPE`: the step catalog, readably, by family. Fields, types and defaults come from
each type's pydantic config model (the one source task files are validated against), never a second list; so does
the example, but for the built-ins whose rules the schema cannot say (EXAMPLE_CONFIGS, each checked to validate).
scripts/docs-reference makes docs/reference/steps.md from the same functions."""

from __future__ import annotations

import difflib
import json
import re
from typing import Any

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from agent_env.cli.output import console
from agent_env.errors import AgentEnvError, NotFound
from agent_env.gateway_client.wire import JsonObject
from agent_env.step_types import FAMILIES, PLUGINS, family_of
from agent_env.steps import BUILTINS, StepType, catalog


def list_command() -> int:
    from rich.markup import escape
    from rich.table import Table

    table = Table(box=None, pad_edge=False)
    for col in ("type", "from", "traits", "description"):
        table.add_column(col, overflow="fold")
    for family, names in by_family(catalog.names()).items():
        table.add_row(f"[bold]{escape(family)}[/]")
        for name in names:
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


def by_family(names: list[str]) -> dict[str, list[str]]:
    """These step types by family, families and their built-ins in the catalog's order, plugins last by name."""
    families = {family: [n for n in members if n in names] for family, members in FAMILIES.items()}
    families[PLUGINS] = sorted(n for n in names if family_of(n) == PLUGINS)
    return {family: members for family, members in families.items() if members}


def show_command(name: str) -> int:
    st = _get(name)
    from rich.markup import escape
    from rich.table import Table

    print_ = console().print
    print_(f"[bold]{escape(st.name)}[/] ({'built-in' if st.name in BUILTINS else 'plugin'}): {escape(st.description)}")
    print_(f"family: {escape(family_of(st.name))}")
    print_(f"traits: {escape(', '.join(traits(st)))}")
    print_()
    fields = st.config.model_fields
    if fields:
        table = Table(box=None, pad_edge=False, title=f"config ({st.config.__name__})", title_justify="left")
        for col in ("field", "type", "default", "description"):
            table.add_column(col, overflow="fold")
        for field_name, field in fields.items():
            default = "(required)" if field.is_required() else default_text(field)
            table.add_row(
                escape(field_name),
                escape(type_name(field.annotation)),
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


# The built-in types' example configs: each validates (tests/test_docs_reference.py checks it), which a config
# made from the JSON Schema alone does not when a rule says more than the schema (one field of two, an operator per
# check, a name that must exist), and each reads as a real step would. The steps they name: `notes` deploys the
# notes app (as in the hello task), `assistant` an agent, `ask` prompts it, `box` is a deploy_sandbox sandbox.
_NOTES = "notes"
_A2A_AGENT = {"agent": "assistant"}
_ENV = {"env": _NOTES}
EXAMPLE_CONFIGS: dict[str, JsonObject] = {
    "sleep": {"seconds": 1},
    "reset_env": _ENV,
    "restore_env": {"env": _NOTES, "snapshot": "before"},
    "call_tool": {"env": _NOTES, "tool": "write_note", "arguments": {"key": "ada", "text": "Hello, Ada!"}},
    "teardown_env": _ENV,
    "cancel_triggers": {"triggers": ["reminder"]},
    "prompt_agent": {"agent": "assistant", "prompt": "Write a note that greets Ada."},
    "agent_prompt_response_verifier": {
        "prompt_id": "ask",
        "criteria": [{"type": "response_contains", "needles": ["Ada"]}],
    },
    "check_image": {"image": "${steps.collect.outputs.files.0.key}", "width": 512, "height": 512},
    "snapshot_agent_state": {"agent": "assistant", "prompt": "ask"},
    "register_agent_triggers": {
        "agent": "customer",
        "triggers": [{"id": "greet", "when": {"type": "step", "turn": 1}, "actions": [{"type": "say", "text": "Hi"}]}],
    },
    "combine_universe_verdicts": {"roundtrip": "roundtrip"},
    "deploy_sandbox": {"sandbox_name": "box", "sandbox_mode": "vm"},
    "env_outcome_verifier": {"env_id": "notes", "file_artifact_id": "verify-notes"},
    "run_container_unit_tests_verifier": {"sandbox_name": "box", "container_name": "service", "command": "pytest -q"},
    "check": {"checks": [{"name": "greeted", "value": "${steps.greet.outputs.text}", "contains": "Hello"}]},
    "deploy_env": {"env_id": "notes"},
    "load_data": {
        "env": _NOTES,
        "data": {"notes": {"notes": [{"key": "ada", "text": "Hello, Ada!", "updated_at": "2026-01-05T09:00:00Z"}]}},
    },
    "snapshot_env": _ENV,
    "modify_env_tool_access": {"env": _NOTES, "role": "user", "action": "disable", "tools": ["delete_note"]},
    "check_state": {
        "env": _NOTES,
        "checks": [
            {
                "name": "Ada was greeted",
                "tool": "read_note",
                "arguments": {"key": "ada"},
                "path": "text",
                "contains": "Ada",
            }
        ],
    },
    "sync_env_clock": {"rate": 60},
    "wait_clock": {"seconds": 3600},
    "deploy_agent": {"env": _NOTES, "agent": "echo"},
    "check_response": {"response": "${steps.ask.outputs.answer}", "checks": [{"name": "polite", "contains": "thank"}]},
    "rubrics_verifier": {"prompt_id": "ask", "criteria": [{"id": "polite", "description": "The answer is polite."}]},
    "aggregate_verifiers": {"inputs": ["graded", "judged"]},
    "sandbox_exec": {"sandbox": _NOTES, "command": ["ls", "/"]},
    "put_files": {"sandbox": _NOTES, "files": {"/work/hello.txt": {"text": "Hello"}}},
    "collect_files": {"sandbox": _NOTES, "paths": ["/work/hello.txt"]},
    "peer_agents": {"agent": "lead", "peers": ["helper"]},
    "validation_gate_aggregator": {"inputs": ["card", "protocol"]},
    "load_artifact": {"sandbox_name": "box", "artifact_id": "fixtures"},
    "verify_sandbox": {"sandbox_name": "box"},
    "teardown_sandboxes": {"sandbox_names": ["box"]},
    "run_code": {"sandbox_name": "box", "script_artifact_id": "score"},
    "add_skills": {
        "agent_name": "assistant",
        "skills": [{"name": "greet", "description": "Greet people by name.", "body": "Say hello, then the name."}],
    },
    "run_docker_container": {"sandbox_name": "box", "docker_context_artifact_id": "service"},
    "apply_server_config": {"env": _NOTES, "directives": [{"service": "*", "uri": "urn:agentenv:set-errors/v1"}]},
    "build_mcp_cli": {"env_id": "notes", "command_name": "notes"},
    "install_agent": {"sandbox_name": "box", "a2a_agent_id": "assistant"},
    "verify_a2a_agent_mcp": {**_A2A_AGENT, **_ENV},
    "verify_universe_load_export_roundtrip": {**_ENV, "data": {"notes": {"notes": []}}},
    # every agent validator takes an agent; the one that also takes an env has its own example above
    **{name: _A2A_AGENT for name in FAMILIES["agent validators"] if name != "verify_a2a_agent_mcp"},
    **{
        name: _ENV
        for name in (
            "verify_env_card",
            "verify_env_core_protocol",
            "verify_mcp_tool_schema",
            "verify_spec_conformance",
            "verify_mcp_env_assessment",
        )
    },
}


def example_config(st: StepType) -> JsonObject:
    """A config of this type that validates: a built-in's from EXAMPLE_CONFIGS, else its required fields with
    placeholder values from its JSON Schema."""
    if st.name in BUILTINS and st.name in EXAMPLE_CONFIGS:
        return EXAMPLE_CONFIGS[st.name]
    schema = st.config.model_json_schema()
    defs = schema.get("$defs", {})
    # a config that needs one of several fields (its schema's oneOf of `required`s, as prompt or parts) shows the first
    choices: list[dict[str, list[str]]] = schema.get("oneOf", [])
    needed = set(schema.get("required", [])) | set(choices[0].get("required", []) if choices else ())
    properties = schema.get("properties", {})
    return {name: _placeholder(properties[name], defs) for name in properties if name in needed}


def example_toml(st: StepType, *, fragment: bool = False) -> str:
    """A task-file step of this type (example_config's). A fragment is the step alone (id, type and [config] at
    the top level: what docs/reference/steps.md shows), without the list of optional fields."""
    properties = st.config.model_json_schema().get("properties", {})
    config = example_config(st)
    lines = [*([] if fragment else ["[[steps]]"]), f'id = "{st.name}"', f'type = "{st.name}"']
    if config:
        lines += ["", "[config]" if fragment else "[steps.config]"]
        for name, value in config.items():
            described = properties.get(name, {}).get("description")
            lines.append(f"{_key(name)} = {_toml(value)}" + (f"  # {described}" if described else ""))
    optional = [name for name in properties if name not in config]
    if optional and not fragment:
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


def default_text(field: Any) -> str:
    """A pydantic field's default as JSON (a duration as 5m), '' when it has none."""
    value = field.default_factory() if field.default_factory is not None else field.default
    if value is PydanticUndefined:
        return ""
    if isinstance(value, BaseModel):
        value = value.model_dump(mode="json")
    if hasattr(value, "total_seconds"):
        return _duration(value.total_seconds())
    return json.dumps(value, default=str)


def type_name(annotation: Any) -> str:
    """A field's type as a reader writes it: `list[Check]`, not `list[agent_env.steps.builtin.check.Check]`."""
    if isinstance(annotation, type) and not getattr(annotation, "__args__", None):
        return annotation.__name__
    text = str(annotation)
    return re.sub(
        r"\b(typing|typing_extensions|datetime|collections\.abc|[a-z_][a-z0-9_]*(\.[a-z_][a-z0-9_]*)+)\.", "", text
    )


def _duration(seconds: float) -> str:
    for unit, size in (("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:g}s"
