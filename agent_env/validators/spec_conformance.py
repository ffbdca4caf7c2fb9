"""`verify_spec_conformance`: the env's OpenAPI document (if it serves one) promises what its MCP tools take.

Each operation's `operationId` is a tool; its parameters and JSON body properties are the tool's arguments.
The document is a floor: what it promises must hold (the tool exists, the parameter exists with the same type,
required where it is required), while a server may offer more. The one extra that is not free is an undeclared
*required* argument: a caller that follows the document cannot send it. No document (404, 405, 501, or none that
parses as JSON): nothing to check, and the report says it skipped.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agent_env.gateway_client.wire import JsonObject
from agent_env.validators import target as net
from agent_env.validators.mcp_tools import ListedTool, McpUnreachable, list_mcp_tools
from agent_env.validators.report import Finding, ValidationReport

VALIDATOR = "verify_spec_conformance"
DOCUMENTS = ("/openapi.json", "/openapi.yaml")  # read as JSON (YAML is a superset: a JSON document passes)
ABSENT = (404, 405, 501)
HTTP_METHODS = ("get", "post", "put", "delete", "patch", "head", "options", "trace")
MAX_REFS = 32  # $ref hops followed from one node (a cycle stops here)


@dataclass(frozen=True)
class Param:
    type: str | None
    required: bool


def resolve(node: Any, doc: Any) -> Any:
    """`node` with `#/...` `$ref`s followed through `doc` (its own keys win over the target's)."""
    for _ in range(MAX_REFS):
        if not (isinstance(node, dict) and isinstance(node.get("$ref"), str) and node["$ref"].startswith("#/")):
            return node
        target: Any = doc
        for part in node["$ref"][2:].split("/"):
            part = part.replace("~1", "/").replace("~0", "~")
            if not isinstance(target, dict) or part not in target:
                return node
            target = target[part]
        rest = {k: v for k, v in node.items() if k != "$ref"}
        node = {**target, **rest} if isinstance(target, dict) else target
    return node


def type_of(schema: Any, doc: Any) -> str | None:
    schema = resolve(schema, doc)
    if not isinstance(schema, dict):
        return None
    if isinstance(schema.get("type"), str):
        t: str = schema["type"]
        return t
    for key in ("anyOf", "oneOf", "allOf"):
        for variant in schema.get(key) or []:
            v = resolve(variant, doc)
            if isinstance(v, dict) and isinstance(v.get("type"), str) and v["type"] != "null":
                found: str = v["type"]
                return found
    return None


def document_params(doc: JsonObject) -> dict[str, dict[str, Param]]:
    """operationId -> its arguments (path/query parameters and JSON body properties)."""
    out: dict[str, dict[str, Param]] = {}
    for item in (doc.get("paths") or {}).values():
        if not isinstance(item, dict):
            continue
        shared = item.get("parameters") or []
        for method, op in item.items():
            if method.lower() not in HTTP_METHODS or not isinstance(op, dict) or not op.get("operationId"):
                continue
            params: dict[str, Param] = {}
            for p in [*shared, *(op.get("parameters") or [])]:
                p = resolve(p, doc)
                if isinstance(p, dict) and isinstance(p.get("name"), str):
                    params[p["name"]] = Param(type_of(p.get("schema") or {}, doc), bool(p.get("required")))
            body = resolve(op.get("requestBody") or {}, doc)
            schema = resolve(((body.get("content") or {}).get("application/json") or {}).get("schema") or {}, doc)
            if isinstance(schema, dict):
                required = set(schema.get("required") or [])
                for name, prop in (schema.get("properties") or {}).items():
                    params.setdefault(name, Param(type_of(prop, doc), name in required))
            out[str(op["operationId"])] = params
    return out


def tool_params(schema: JsonObject | None) -> dict[str, Param]:
    schema = schema or {}
    required = set(schema.get("required") or [])
    props = schema.get("properties") or {}
    return {name: Param(type_of(prop, schema), name in required) for name, prop in props.items()}


def check_conformance(doc: JsonObject, served: list[ListedTool]) -> list[Finding]:
    promised = document_params(doc)
    live = {t.name: tool_params(t.input_schema) for t in served}
    blocking, advisory = [], []
    for op in sorted(set(promised) - set(live)):
        blocking.append(f"operation {op!r} has no MCP tool")
    for extra in sorted(set(live) - set(promised)):
        advisory.append(f"tool {extra!r} is not in the document")
    for name in sorted(set(promised) & set(live)):
        spec, tool = promised[name], live[name]
        for p in sorted(set(spec) - set(tool)):
            blocking.append(f"{name}.{p} is in the document, not in the tool's inputSchema")
        for p in sorted(set(tool) - set(spec)):
            (blocking if tool[p].required else advisory).append(
                f"{name}.{p} is not in the document" + (" and the tool requires it" if tool[p].required else "")
            )
        for p in sorted(set(spec) & set(tool)):
            s, t = spec[p], tool[p]
            if s.type and t.type and s.type != t.type:
                blocking.append(f"{name}.{p}: the document says {s.type}, the tool takes {t.type}")
            if s.required != t.required:
                blocking.append(f"{name}.{p}: required {s.required} in the document, {t.required} in the tool")
    return [
        Finding.failed(
            "spec.matches_tools",
            "; ".join(blocking[:8]) + (f" (and {len(blocking) - 8} more)" if len(blocking) > 8 else ""),
            "make the OpenAPI document and the MCP tools say the same (operationId = tool name, same arguments)",
        )
        if blocking
        else Finding.ok("spec.matches_tools"),
        Finding.failed(
            "spec.documents_everything",
            "; ".join(advisory[:8]),
            "document every tool and argument",
            required=False,
        )
        if advisory
        else Finding.ok("spec.documents_everything", required=False),
    ]


async def fetch_document(target: net.EnvTarget) -> tuple[JsonObject | None, str]:
    """(the OpenAPI document, or None; where it was found, or why none was)."""
    async with net.client() as http:
        tried = []
        for path in DOCUMENTS:
            try:
                answer = await net.request(http, "GET", target.base + path, headers=target.card_headers)
            except net.Unreachable as e:
                tried.append(str(e))
                continue
            if answer.status in ABSENT:
                tried.append(f"{path}: HTTP {answer.status}")
                continue
            body = answer.body if answer.status == 200 else None
            if isinstance(body, dict) and isinstance(body.get("paths"), dict) and body["paths"]:
                return body, path
            tried.append(f"{path}: HTTP {answer.status}, no OpenAPI document with paths (as JSON)")
    return None, "; ".join(tried)


async def verify_conformance(target: net.EnvTarget, card: Any) -> tuple[ValidationReport, str | None]:
    """(the report; why it was skipped, when no document was served)."""
    report = ValidationReport(validator=VALIDATOR, target=target.base)
    doc, where = await fetch_document(target)
    report.checks.append(Finding.ok("spec.document", required=False))
    if doc is None:
        return report, f"no OpenAPI document ({where})"
    try:
        _, served = await list_mcp_tools(target, card)
    except McpUnreachable as e:
        report.checks.append(
            Finding.failed("mcp.served", f"could not list tools over MCP at {e}", "serve MCP at the card's interface")
        )
        return report, None
    report.checks += check_conformance(doc, served)
    return report, None
