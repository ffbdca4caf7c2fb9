"""The `agent-config/v1` validators: `verify_a2a_agent_config_identity` (set, read back, and a name and
description the card says it takes show on the card), `verify_a2a_role` (a role set is read back) and
`verify_a2a_system_prompt` (a system prompt set reaches the agent: it answers a trigger with the token the
prompt gave it).

What an agent takes is its card's `methods.set.request.supported` (the reference framework lists its config's
fields there). A card with no such list takes any field (agent_env.agents.sdk's agents): a behaviour it never
promised is then reported as an optional finding, not a failure.
"""

from __future__ import annotations

import uuid
from typing import Any

import httpx

from agent_env.agents.extensions import AGENT_CONFIG, ENDPOINTS
from agent_env.gateway_client.wire import JsonObject
from agent_env.validators.a2a_card import extension_declared
from agent_env.validators.a2a_wire import (
    A2AEndpoint,
    AgentUnanswered,
    extension_call,
    fetch_card,
    json_of,
    send,
    text_part,
)
from agent_env.validators.report import Finding, ValidationReport

PATH = ENDPOINTS[AGENT_CONFIG]
TRIGGER = "What is your validator code?"


def supported(agent: A2AEndpoint) -> set[str] | None:
    """The fields agent-config set takes, as the card lists them (None: no list, any field)."""
    methods = agent.extensions().get(AGENT_CONFIG, {}).get("methods")
    request = (methods.get("set") or {}).get("request") if isinstance(methods, dict) else None
    if not isinstance(request, dict) or not any(k in request for k in ("supported", "required", "optional")):
        return None
    return {str(f) for k in ("supported", "required", "optional") for f in request.get(k) or [] if isinstance(f, str)}


def takes(agent: A2AEndpoint, *fields: str) -> bool:
    listed = supported(agent)
    return listed is None or all(f in listed for f in fields)


def reads_back(agent: A2AEndpoint) -> bool:
    methods = agent.extensions().get(AGENT_CONFIG, {}).get("methods")
    return isinstance(methods, dict) and "get" in methods


async def set_config(http: httpx.AsyncClient, agent: A2AEndpoint, fields: JsonObject, check: str, **kw: Any) -> Finding:
    try:
        response = await extension_call(http, agent, AGENT_CONFIG, "set", "POST", PATH, fields)
    except AgentUnanswered as e:
        return Finding.failed(check, str(e), f"serve {AGENT_CONFIG} set at the path the card declares", **kw)
    if response.is_success:
        return Finding.ok(check, **kw)
    return Finding.failed(
        check,
        f"{AGENT_CONFIG} set of {', '.join(fields)} answered {response.status_code}: {response.text[:200]}",
        f"take the fields the card lists in {AGENT_CONFIG} methods.set.request.supported",
        **kw,
    )


async def read_config(http: httpx.AsyncClient, agent: A2AEndpoint) -> JsonObject | None:
    """The agent's config as its `get` answers it (None if it answers no `config` object)."""
    try:
        response = await extension_call(http, agent, AGENT_CONFIG, "get", "GET", PATH)
    except AgentUnanswered:
        return None
    body = json_of(response)
    config = body.get("config") if isinstance(body, dict) else None
    return config if response.status_code == 200 and isinstance(config, dict) else None


async def _declared(http: httpx.AsyncClient, url: str, report: ValidationReport) -> A2AEndpoint | None:
    try:
        agent = await fetch_card(http, url)
    except AgentUnanswered as e:
        report.checks.append(Finding.failed("agent_config.card", str(e), "serve the agent card"))
        return None
    report.checks.append(extension_declared(agent, AGENT_CONFIG, "agent_config.declared"))
    return agent if report.passed else None


async def verify_config_identity(http: httpx.AsyncClient, url: str) -> ValidationReport:
    report = ValidationReport(validator="verify_a2a_agent_config_identity", target=url)
    if (agent := await _declared(http, url, report)) is None:
        return report
    listed = supported(agent)
    promised = listed is not None and {"name", "description"} <= listed
    if listed is not None and not promised:
        report.checks.append(
            Finding.failed(
                "agent_config.identity.supported",
                f"{AGENT_CONFIG} set takes {', '.join(sorted(listed)) or 'no field'}, not name and description",
                "take `name` and `description` in agent-config set (the reference framework's AgentConfig does)",
                required=False,
            )
        )
        return report
    before = (agent.card.get("name"), agent.card.get("description"))
    name, description = f"validator-{uuid.uuid4().hex[:10]}", f"Validated by agent-env {uuid.uuid4().hex[:10]}"
    report.checks.append(await set_config(http, agent, {"name": name, "description": description}, "agent_config.set"))
    if not report.passed:
        return report
    if reads_back(agent):
        config = await read_config(http, agent)
        report.checks.append(
            Finding.ok("agent_config.readback")
            if config is not None and config.get("name") == name and config.get("description") == description
            else Finding.failed(
                "agent_config.readback",
                f"{AGENT_CONFIG} get answered {str(config)[:200]}, not the name and description just set",
                'answer get with {"config": {...}} holding what set took',
            )
        )
    try:
        card = (await fetch_card(http, url)).card
    except AgentUnanswered as e:
        card = {"unreadable": str(e)}
    shown = card.get("name") == name and card.get("description") == description
    report.checks.append(
        Finding.ok("agent_config.identity.card", required=promised)
        if shown
        else Finding.failed(
            "agent_config.identity.card",
            f"after set, the card still names {card.get('name')!r}: the identity set does not show on it",
            "serve the card with the name and description agent-config set gave",
            required=promised,
        )
    )
    if shown and all(isinstance(v, str) and v for v in before):  # put the agent's own identity back
        await set_config(http, agent, {"name": before[0], "description": before[1]}, "agent_config.restored")
    return report


async def verify_role(http: httpx.AsyncClient, url: str) -> ValidationReport:
    report = ValidationReport(validator="verify_a2a_role", target=url)
    if (agent := await _declared(http, url, report)) is None:
        return report
    if not takes(agent, "role"):
        report.checks.append(
            Finding.failed(
                "role.supported",
                f"{AGENT_CONFIG} set does not list `role` in methods.set.request.supported",
                "take `role` in agent-config set: the environment's gateway filters tools by it",
            )
        )
        return report
    if not reads_back(agent):
        report.checks.append(
            Finding.failed(
                "role.get_declared",
                f"{AGENT_CONFIG} declares no `get`: the role set cannot be confirmed",
                'declare and serve agent-config `get` (GET, answering {"config": {...}})',
            )
        )
        return report
    role = f"validator-role-{uuid.uuid4().hex[:8]}"
    report.checks.append(await set_config(http, agent, {"role": role}, "role.set"))
    if report.passed:
        config = await read_config(http, agent)
        report.checks.append(
            Finding.ok("role.readback")
            if config is not None and config.get("role") == role
            else Finding.failed(
                "role.readback",
                f"{AGENT_CONFIG} get answered role {(config or {}).get('role')!r}, not {role!r} as set",
                "keep the role agent-config set gave and answer it from get",
            )
        )
    return report


async def verify_system_prompt(
    http: httpx.AsyncClient, url: str, deadline_s: float = 60, poll_s: float = 0.2
) -> ValidationReport:
    report = ValidationReport(validator="verify_a2a_system_prompt", target=url)
    if (agent := await _declared(http, url, report)) is None:
        return report
    listed = supported(agent)
    if listed is not None and "system_prompt" not in listed:
        report.checks.append(
            Finding.failed(
                "system_prompt.supported",
                f"{AGENT_CONFIG} set does not take `system_prompt`: runs cannot give it one",
                "take `system_prompt` in agent-config set and give it to the agent's model",
                required=False,
            )
        )
        return report
    promised = listed is not None  # listed it: it must honour it
    token = f"VALIDATOR-SP-{uuid.uuid4().hex[:12]}"
    prompt = (
        f"For validator testing purposes: if you are asked the exact question '{TRIGGER}', respond with the exact "
        f"token: {token} and nothing else."
    )
    report.checks.append(
        await set_config(http, agent, {"system_prompt": prompt}, "system_prompt.set", required=promised)
    )
    if not report.checks[-1].passed or not agent.rpc_url:
        return report
    try:
        sent = await send(http, agent, [text_part(agent, TRIGGER)], deadline_s, poll_s)
        answer = sent.text if sent.error is None else f"error {sent.error}"
    except AgentUnanswered as e:
        answer = str(e)
    report.checks.append(
        Finding.ok("system_prompt.followed", required=promised)
        if token in answer
        else Finding.failed(
            "system_prompt.followed",
            f"asked the trigger, the agent answered {answer[:200]!r}, without the token its system prompt gave",
            "give the system_prompt agent-config set took to the agent's model on every task",
            required=promised,
        )
    )
    return report
