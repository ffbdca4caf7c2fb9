"""`verify_mcp_tool_schema`: the tools served over MCP are the tools on the card, with the same input schemas,
each a valid JSON Schema of an object. A client reads the card to decide what to call and MCP to call it: any
difference between them is a tool it cannot call as described.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any

from agent_env.gateway_client.wire import JsonObject
from agent_env.validators import target as net
from agent_env.validators.report import Finding, ValidationReport

VALIDATOR = "verify_mcp_tool_schema"
MCP_DEADLINE = 30.0  # connect, initialize and list: a server slower than this is reported, not waited for


@dataclass(frozen=True)
class ListedTool:
    name: str
    description: str
    input_schema: JsonObject | None


class McpUnreachable(Exception):
    pass


def _leaf(error: BaseException) -> BaseException:
    while isinstance(error, BaseExceptionGroup) and error.exceptions:
        error = error.exceptions[0]
    return error


async def list_mcp_tools(target: net.EnvTarget, card: Any) -> tuple[str, list[ListedTool]]:
    """(the MCP URL, its tools), over MCP's streamable HTTP with the target's MCP credential (only to its origin)."""
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    url = target.mcp_url(card)
    headers = target.headers_for(url, target.mcp_headers)
    try:
        async with asyncio.timeout(MCP_DEADLINE):
            async with (
                create_mcp_http_client(headers=headers, timeout=httpx2.Timeout(15.0)) as http,
                Client(streamable_http_client(url, http_client=http)) as mcp,
            ):
                listed = (await mcp.list_tools()).tools
    except Exception as e:  # noqa: BLE001 - any failure to list is the finding
        leaf = _leaf(e)
        raise McpUnreachable(f"{url}: {type(leaf).__name__}: {leaf}") from None
    return url, [ListedTool(t.name, t.description or "", t.input_schema) for t in listed]


def card_tools(card: Any) -> dict[str, JsonObject]:
    caps = card.get("capabilities") if isinstance(card, dict) else None
    tools = caps.get("tools") if isinstance(caps, dict) else None
    return (
        {t["name"]: t for t in tools or [] if isinstance(t, dict) and isinstance(t.get("name"), str)}
        if isinstance(tools, list)
        else {}
    )


def schema_problem(schema: Any) -> str | None:
    """Why `schema` is no valid JSON Schema of a tool's arguments (an object), or None."""
    from jsonschema.exceptions import SchemaError  # type: ignore[import-untyped]  # (it comes with mcp)
    from jsonschema.validators import validator_for  # type: ignore[import-untyped]

    if not isinstance(schema, dict):
        return f"inputSchema is {type(schema).__name__}, not a JSON Schema object"
    try:
        validator_for(schema).check_schema(schema)
    except SchemaError as e:
        return f"not a valid JSON Schema: {e.message} at {'/'.join(map(str, e.absolute_path)) or 'its root'}"
    if schema.get("type") != "object":
        return f'its type is {schema.get("type")!r}: a tool\'s arguments are an object ("type": "object")'
    return None


ANNOTATIONS = frozenset({"title", "description", "examples", "$comment", "$schema"})  # no part of what a call takes


def _contract(schema: Any) -> Any:
    """A schema without its annotations: SDKs title every property (FastMCP does, the reference card does not)."""
    if isinstance(schema, dict):
        return {
            k: (v if k in ("enum", "const", "required", "default") else _contract(v))
            for k, v in schema.items()
            if k not in ANNOTATIONS or (k in ("title", "description") and isinstance(v, dict))  # (a property named so)
        }
    if isinstance(schema, list):
        return [_contract(v) for v in schema]
    return schema


def _canonical(value: Any) -> str:
    return json.dumps(_contract(value), sort_keys=True, separators=(",", ":"))


def check_tools(card: Any, served: list[ListedTool]) -> list[Finding]:
    on_card = card_tools(card)
    over_mcp = {t.name: t for t in served}
    findings = []
    missing = sorted(set(on_card) - set(over_mcp))
    extra = sorted(set(over_mcp) - set(on_card))
    if missing or extra:
        said = []
        if missing:
            said.append(f"on the card but not over MCP: {', '.join(missing)}")
        if extra:
            said.append(f"over MCP but not on the card: {', '.join(extra)}")
        findings.append(
            Finding.failed(
                "mcp.tools_match_card",
                "; ".join(said),
                "list exactly the tools MCP serves in the card's capabilities.tools (same names)",
            )
        )
    else:
        findings.append(Finding.ok("mcp.tools_match_card"))
    invalid = [f"{t.name}: {p}" for t in served if (p := schema_problem(t.input_schema))]
    findings.append(
        Finding.failed(
            "mcp.input_schemas_valid",
            "; ".join(invalid[:5]),
            'give each tool an inputSchema that is a valid JSON Schema with "type": "object"',
        )
        if invalid
        else Finding.ok("mcp.input_schemas_valid")
    )
    differ, absent = [], []
    for name in sorted(set(on_card) & set(over_mcp)):
        declared = on_card[name].get("inputSchema")
        if declared is None:
            absent.append(name)
        elif _canonical(declared) != _canonical(over_mcp[name].input_schema):
            differ.append(name)
    findings.append(
        Finding.failed(
            "mcp.schemas_match_card",
            f"the card's inputSchema differs from the one served over MCP for: {', '.join(differ)}",
            "put on the card the inputSchema MCP serves (generate both from one definition)",
        )
        if differ
        else Finding.ok("mcp.schemas_match_card")
    )
    findings.append(
        Finding.failed(
            "card.tools_have_schemas",
            f"tools on the card without an inputSchema: {', '.join(absent)}",
            "list each tool's inputSchema on the card",
            required=False,
        )
        if absent
        else Finding.ok("card.tools_have_schemas", required=False)
    )
    findings.append(_quality(served))
    return findings


def _quality(served: list[ListedTool]) -> Finding:
    """Advisory: what a model needs to call a tool well (a description, typed and described parameters)."""
    issues = []
    for t in served:
        if not t.description.strip():
            issues.append(f"{t.name} has no description")
        props = (t.input_schema or {}).get("properties") or {}
        for param, spec in props.items() if isinstance(props, dict) else ():
            if isinstance(spec, dict) and not ({"type", "anyOf", "oneOf", "$ref", "enum", "const"} & spec.keys()):
                issues.append(f"{t.name}.{param} has no type")
    if issues:
        return Finding.failed(
            "mcp.tools_described",
            "; ".join(issues[:6]) + (f" (and {len(issues) - 6} more)" if len(issues) > 6 else ""),
            "describe each tool, and give each parameter a type",
            required=False,
        )
    return Finding.ok("mcp.tools_described", required=False)


async def verify_tools(target: net.EnvTarget, card: Any) -> ValidationReport:
    report = ValidationReport(validator=VALIDATOR, target=target.base)
    try:
        url, served = await list_mcp_tools(target, card)
    except McpUnreachable as e:
        report.checks.append(
            Finding.failed(
                "mcp.served",
                f"could not list tools over MCP at {e}",
                'serve MCP (streamable HTTP) at the card\'s "mcp" interface, or /mcp',
            )
        )
        return report
    report.checks.append(Finding.ok("mcp.served"))
    if card is None:
        report.checks.append(
            Finding.failed("mcp.card", "no card to compare the tools with", "serve the card (see verify_env_card)")
        )
        return report
    report.checks += check_tools(card, served)
    return report
