"""`verify_a2a_agent_mcp`: told an MCP server through `mcp-config/v1`, the agent actually calls it.

The validator hands the agent an environment of the run (its MCP URL on the gateway and a role token minted for
it, sent only to the agent's origin), checks the agent takes and lists it (never echoing the token), then asks
it, over plain A2A with nothing in the turn but the prompt, to use a tool. The gateway's trajectory of that
environment is the evidence: an agent that ignores the server it was given, or answers from memory, made no
call there and fails.
"""

from __future__ import annotations

import httpx

from agent_env.agents.extensions import ENDPOINTS, MCP_CONFIG
from agent_env.gateway_client import GatewayClient, GatewayRefused
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

VALIDATOR = "verify_a2a_agent_mcp"
PROMPT = (
    "Use the `search_messages` tool of the MCP server you were given to search the mailbox for messages containing "
    "the word 'invoice'. Do not answer from memory and do not skip the tool: actually call it, then report its "
    "raw output."
)


def redacted(report: ValidationReport, token: str) -> ValidationReport:
    """The report without the role token, whatever the agent echoed of it (a report goes into the run's history,
    where secrets never go)."""
    for check in report.checks:
        check.problem = check.problem.replace(token, "[role token]")
        check.fix = check.fix.replace(token, "[role token]")
    return report


async def verify_agent_mcp(
    http: httpx.AsyncClient,
    url: str,
    gateway: GatewayClient,
    instance: str,
    *,
    agent_name: str,
    role: str,
    prompt: str = PROMPT,
    deadline_s: float = 120,
    poll_s: float = 0.2,
) -> ValidationReport:
    report = ValidationReport(validator=VALIDATOR, target=url)
    try:
        agent = await fetch_card(http, url)
    except AgentUnanswered as e:
        report.checks.append(Finding.failed("mcp.card", str(e), "serve the agent card"))
        return report
    report.checks.append(extension_declared(agent, MCP_CONFIG, "mcp.declared"))
    if not report.passed:
        return report
    try:
        await gateway.set_agent_role(instance, agent_name, role)
        token = await gateway.token(instance, agent_name)
    except GatewayRefused as e:
        report.checks.append(
            Finding.failed("mcp.environment", f"the environment refused the agent: {e}", "give the step a real role")
        )
        return report
    return redacted(
        await _hand_over(http, agent, gateway, instance, agent_name, token, prompt, (deadline_s, poll_s), report), token
    )


async def _hand_over(
    http: httpx.AsyncClient,
    agent: A2AEndpoint,
    gateway: GatewayClient,
    instance: str,
    agent_name: str,
    token: str,
    prompt: str,
    waits: tuple[float, float],  # (deadline, tasks/get interval) in seconds
    report: ValidationReport,
) -> ValidationReport:
    """Give the agent the environment's MCP server (with its token), then ask it to use it."""

    def said(text: str) -> str:  # what the agent said, for a problem: without the token, then clipped
        return text.replace(token, "[role token]")[:200]

    mcp_url = f"{await gateway.url_for(instance)}/envs/{instance}/mcp"
    # named by its instance: a long-lived agent validated again gets this run's server beside the last one's
    server = {"url": mcp_url, "name": f"agentenv-{instance}"[:128], "headers": {"authorization": f"Bearer {token}"}}
    try:
        added = await extension_call(http, agent, MCP_CONFIG, "add", "POST", ENDPOINTS[MCP_CONFIG], server)
        listed = await extension_call(http, agent, MCP_CONFIG, "list", "GET", ENDPOINTS[MCP_CONFIG])
    except AgentUnanswered as e:
        report.checks.append(Finding.failed("mcp.add", str(e), f"serve {MCP_CONFIG} add and list"))
        return report
    report.checks.append(
        Finding.ok("mcp.add")
        if added.is_success or added.status_code == 409
        else Finding.failed(
            "mcp.add",
            f"{MCP_CONFIG} add of {{url, headers, name}} answered {added.status_code}: {said(added.text)}",
            'take an MCP server as {"url", "headers", "name"} (McpAddRequest) and answer 200',
        )
    )
    if not report.passed:
        return report
    servers = (json_of(listed) or {}).get("mcp_servers") if isinstance(json_of(listed), dict) else None
    urls = [s.get("url") for s in servers.values() if isinstance(s, dict)] if isinstance(servers, dict) else []
    report.checks.append(
        Finding.ok("mcp.listed")
        if mcp_url in urls
        else Finding.failed(
            "mcp.listed",
            f"{MCP_CONFIG} list answered {listed.status_code} without the server just added ({mcp_url})",
            'answer list with {"mcp_servers": {NAME: {"url": ..., "has_headers": ...}}}',
        )
    )
    report.checks.append(
        Finding.ok("mcp.list_hides_headers")
        if token not in listed.text
        else Finding.failed(
            "mcp.list_hides_headers",
            f"{MCP_CONFIG} list answers the server's headers: the role token in them is readable by anyone who asks",
            "list each server's url and has_headers, never the headers themselves",
        )
    )
    mark = await gateway.last_seq(instance)
    try:
        sent = await send(http, agent, [text_part(agent, prompt)], *waits)
    except AgentUnanswered as e:
        report.checks.append(Finding.failed("mcp.answered", str(e), "answer the task over A2A"))
        return report
    report.checks.append(
        Finding.ok("mcp.answered")
        if sent.error is None and not sent.note and sent.state == "completed"
        else Finding.failed(
            "mcp.answered",
            f"the task asking for a tool call ended {sent.state or sent.error or sent.note}: {said(sent.text)!r}",
            "complete the task, using the MCP server you were given",
        )
    )
    calls = [c for c in await gateway.trajectory(instance, mark) if c.get("agent") == agent_name]
    report.checks.append(
        Finding.ok("mcp.tool_called")
        if calls
        else Finding.failed(
            "mcp.tool_called",
            f"asked to use a tool, the agent made no call to the MCP server it was given through {MCP_CONFIG}",
            "connect to the servers mcp-config add registered (with their headers) and call their tools in tasks",
        )
    )
    return report
