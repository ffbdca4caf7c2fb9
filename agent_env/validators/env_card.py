"""`verify_env_card`: the environment card at `/.well-known/agent-env.json` is protocol v1's.

What the protocol's own validator and client read (DESIGN.md §8): the keys are camelCase (`protocolVersion`,
`preferredTransport`, `additionalInterfaces`, `inputSchema`) except `children_environments`; `name`,
`protocolVersion` ("1.0"), `url`, `preferredTransport` ("JSONRPC") and a non-empty `capabilities` are required;
`capabilities.operations` is null (all three data operations) or a list of them (`[]`: none). A misspelled key
is silently ignored by the protocol's pydantic models, so the exact keys are checked here, not just the model.
"""

from __future__ import annotations

import re
from typing import Any

from agentenv_protocol.types import PROTOCOL_VERSION, EnvironmentCard
from pydantic import ValidationError

from agent_env.envs.card import OPERATIONS, RPC_PATH, WELL_KNOWN_PATH
from agent_env.errors import format_loc
from agent_env.gateway_client.wire import JsonObject
from agent_env.validators import target as net
from agent_env.validators.report import Finding, ValidationReport

VALIDATOR = "verify_env_card"
REQUIRED_FIELDS = ("name", "protocolVersion", "url", "preferredTransport", "capabilities")
CARD_KEYS = {*REQUIRED_FIELDS, "additionalInterfaces", "children_environments"}
CAPABILITY_KEYS = {"tools", "extensions", "operations"}
TOOL_KEYS = {"name", "description", "inputSchema"}
# camelCase names the protocol uses, by the spellings that are ignored in their place
MISSPELLED = {
    "protocol_version": "protocolVersion",
    "preferred_transport": "preferredTransport",
    "additional_interfaces": "additionalInterfaces",
    "childrenEnvironments": "children_environments",
    "input_schema": "inputSchema",
}
SNAKE = re.compile(r"^[a-z0-9]+(_[a-z0-9]+)+$")


def _camel(key: str) -> str:
    head, *rest = key.split("_")
    return head + "".join(p.title() for p in rest)


def _misspelled(keys: Any, known: set[str], where: str) -> list[str]:
    """Keys of an object that are known keys spelled another way (snake_case for camelCase, or the reverse)."""
    out = []
    for key in keys:
        if key in known:
            continue
        right = MISSPELLED.get(key) or (_camel(key) if SNAKE.match(key) else None)
        if right in known:
            out.append(f"{where}{key} (the protocol's key is {right!r})")
    return out


def check_card(card: Any) -> list[Finding]:
    """The findings on a card as served (parsed JSON)."""
    if not isinstance(card, dict):
        return [
            Finding.failed(
                "card.object",
                f"the card is {type(card).__name__}, not a JSON object",
                f"serve the card as a JSON object at {WELL_KNOWN_PATH}",
            )
        ]
    findings = [_required(card, name) for name in REQUIRED_FIELDS]
    findings += [_value(card, "protocolVersion", PROTOCOL_VERSION), _value(card, "preferredTransport", "JSONRPC")]
    findings.append(_value(card, "url", RPC_PATH, required=False))
    findings.append(_spelling(card))
    findings.append(_model(card))
    caps = card.get("capabilities")
    findings.append(_operations(caps.get("operations") if isinstance(caps, dict) else None))
    findings.append(_tools(caps.get("tools") if isinstance(caps, dict) else None))
    findings.append(_mcp_interface(card))
    if card.get("children_environments"):
        findings.append(_children(card["children_environments"]))
    return findings


def _required(card: JsonObject, name: str) -> Finding:
    check = f"card.{name}"
    value = card.get(name)
    if value not in (None, "", {}, []):
        return Finding.ok(check)
    wrong = next((k for k, right in MISSPELLED.items() if right == name and k in card), None)
    if wrong is None and name != "name":
        snake = re.sub(r"([A-Z])", lambda m: "_" + m.group(1).lower(), name)
        wrong = snake if snake in card else None
    if wrong is not None:
        return Finding.failed(
            check,
            f"the card has {wrong!r} but not {name!r}: the protocol's keys are camelCase, and its readers ignore "
            f"{wrong!r}",
            f"rename {wrong!r} to {name!r}",
        )
    problem = f"the card has no {name!r}" if value is None else f"the card's {name!r} is empty"
    return Finding.failed(check, problem, f"add {name!r} to the card (see agentenv_protocol.types.EnvironmentCard)")


def _value(card: JsonObject, name: str, expected: str, *, required: bool = True) -> Finding:
    check = f"card.{name}.value"
    value = card.get(name)
    if value is None or value == expected:  # (a missing key is card.<name>'s finding)
        return Finding.ok(check, required=required)
    return Finding.failed(
        check, f"{name} is {value!r}; protocol v1 says {expected!r}", f"set {name} to {expected!r}", required=required
    )


def _spelling(card: JsonObject) -> Finding:
    wrong = _misspelled(card, CARD_KEYS, "")
    caps = card.get("capabilities")
    if isinstance(caps, dict):
        wrong += _misspelled(caps, CAPABILITY_KEYS, "capabilities.")
        for n, tool in enumerate(caps.get("tools") or []):
            if isinstance(tool, dict):
                wrong += _misspelled(tool, TOOL_KEYS, f"capabilities.tools[{n}].")
    if not wrong:
        return Finding.ok("card.key_spelling")
    return Finding.failed(
        "card.key_spelling",
        "keys the protocol's readers ignore: " + "; ".join(wrong[:8]),
        "use the protocol's spelling: camelCase keys, except children_environments",
    )


def _model(card: JsonObject) -> Finding:
    try:
        EnvironmentCard.model_validate(card)
    except ValidationError as e:
        problems = [f"{format_loc(tuple(p['loc']))}: {p['msg']}" for p in e.errors(include_url=False)]
        return Finding.failed(
            "card.schema",
            "the card is not the protocol's EnvironmentCard: " + "; ".join(problems[:5]),
            "give each field the type agentenv_protocol.types.EnvironmentCard declares",
        )
    return Finding.ok("card.schema")


def _operations(operations: Any) -> Finding:
    check = "card.capabilities.operations"
    if operations is None:
        return Finding.ok(check)
    if not isinstance(operations, list) or not all(isinstance(o, str) for o in operations):
        return Finding.failed(
            check,
            f"capabilities.operations is {operations!r}",
            "list the data operations served (null: all three; []: none)",
        )
    unknown = [o for o in operations if o not in OPERATIONS]
    if unknown:
        return Finding.failed(
            check,
            f"capabilities.operations names methods protocol v1 has not: {', '.join(unknown)}",
            f"list only {', '.join(OPERATIONS)}",
        )
    return Finding.ok(check)


def _tools(tools: Any) -> Finding:
    check = "card.capabilities.tools"
    if tools is None:
        return Finding.ok(check)
    problems = []
    names: list[str] = []
    for n, tool in enumerate(tools if isinstance(tools, list) else []):
        name = tool.get("name") if isinstance(tool, dict) else None
        if not isinstance(name, str) or not name:
            problems.append(f"tools[{n}] has no name")
            continue
        if name in names:
            problems.append(f"tool {name!r} is listed twice")
        names.append(name)
        schema = tool.get("inputSchema")
        if schema is not None and not isinstance(schema, dict):
            problems.append(f"tool {name!r}: inputSchema is not an object")
    if not isinstance(tools, list):
        problems.append("capabilities.tools is not a list")
    if problems:
        return Finding.failed(check, "; ".join(problems[:5]), "list each tool once, with a name and an inputSchema")
    return Finding.ok(check)


def _mcp_interface(card: JsonObject) -> Finding:
    check = "card.additionalInterfaces.mcp"
    if any(e.get("transport") == net.MCP_TRANSPORT for e in net.interfaces(card)):
        return Finding.ok(check, required=False)
    return Finding.failed(
        check,
        'no additionalInterfaces entry with transport "mcp": clients fall back to /mcp',
        'declare {"url": "/mcp", "transport": "mcp"} in additionalInterfaces',
        required=False,
    )


def _children(children: Any) -> Finding:
    check = "card.children_environments"
    if not isinstance(children, list):
        return Finding.failed(check, "children_environments is not a list", "list the child environments' cards")
    problems = []
    for n, child in enumerate(children):
        if not isinstance(child, dict) or not isinstance(child.get("name"), str) or not child["name"]:
            problems.append(f"children_environments[{n}] has no name")
    if problems:
        return Finding.failed(check, "; ".join(problems[:5]), "give each child environment a card with its name")
    return Finding.ok(check)


async def fetch_card(target: net.EnvTarget) -> tuple[Any, Finding]:
    """(the card, or None; the finding `card.served`)."""
    async with net.client() as http:
        try:
            answer = await net.request(http, "GET", target.card_url, headers=target.card_headers)
        except net.Unreachable as e:
            return None, Finding.failed(
                "card.served", f"no answer: {e}", "start the env server, and check the URL (its base, not the card's)"
            )
    if answer.status != 200:
        return None, Finding.failed(
            "card.served",
            f"GET {WELL_KNOWN_PATH} answered HTTP {answer.status}: {net.clip(answer.text)}",
            f"serve the environment card at {WELL_KNOWN_PATH}",
        )
    if not isinstance(answer.body, dict):
        return None, Finding.failed(
            "card.served",
            f"GET {WELL_KNOWN_PATH} answered no JSON object: {net.clip(answer.text)}",
            "serve the card as a JSON object (application/json)",
        )
    return answer.body, Finding.ok("card.served")


async def verify_card(target: net.EnvTarget) -> tuple[ValidationReport, Any]:
    """The card's report, and the card (None when none was served)."""
    card, served = await fetch_card(target)
    findings = [served] + (check_card(card) if card is not None else [])
    return ValidationReport(validator=VALIDATOR, target=target.base, checks=findings), card
