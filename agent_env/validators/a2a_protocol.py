"""`verify_a2a_core_protocol`: the agent speaks A2A over JSON-RPC 2.0 as the spec says — message/send answers
a task (or a message), the task reaches a final state and tasks/get finds it, and errors come back as JSON-RPC
error objects with the spec's codes: unknown method -32601 (its id echoed), malformed JSON -32700, invalid
params -32602, an unknown task -32001 (TaskNotFoundError). Either dialect (A2A 0.3 or 1.0), as its card says.
"""

from __future__ import annotations

import json
import uuid

import httpx

from agent_env.validators.a2a_wire import (
    METHODS,
    A2AEndpoint,
    AgentUnanswered,
    call,
    fetch_card,
    get_task,
    rpc,
    send,
    task_of,
    text_part,
)
from agent_env.validators.report import Finding, ValidationReport

VALIDATOR = "verify_a2a_core_protocol"
PROMPT = "Hello, respond with OK."
SPEC_CODES = {  # check -> (expected code, what provokes it)
    "protocol.method_not_found": (-32601, "an unknown method"),
    "protocol.parse_error": (-32700, "a body that is not JSON"),
    "protocol.invalid_params": (-32602, "message/send without a message"),
    "protocol.task_not_found": (-32001, "tasks/get of an unknown task id"),
}


def _code(reply: object) -> int | None:
    error = reply.get("error") if isinstance(reply, dict) else None
    code = error.get("code") if isinstance(error, dict) else None
    return code if isinstance(code, int) else None


def _spec_error(check: str, reply: object, agent: A2AEndpoint) -> Finding:
    expected, provoked = SPEC_CODES[check]
    got = _code(reply)
    if got == expected:
        return Finding.ok(check)
    said = f"error {got}" if got is not None else f"{json.dumps(reply)[:200] if reply is not None else 'no JSON'}"
    return Finding.failed(
        check,
        f"{provoked} was answered with {said}, not the JSON-RPC error {expected}",
        f'answer {provoked} with HTTP 200 and {{"error": {{"code": {expected}, ...}}}} at {agent.rpc_url} '
        "(the A2A SDKs' JSON-RPC handlers do)",
    )


async def _exchange_checks(http: httpx.AsyncClient, agent: A2AEndpoint, deadline_s: float) -> list[Finding]:
    """message/send, the task's final state, tasks/get of it."""
    names = METHODS[agent.dialect]
    sent = await send(http, agent, [text_part(agent, PROMPT)], deadline_s)
    if sent.error is not None or sent.note:
        why = f"error {sent.error}" if sent.error is not None else sent.note
        return [
            Finding.failed(
                "protocol.message_send",
                f"{names['send']} of a text message failed: {str(why)[:300]}",
                f"answer {names['send']} with a task (or a message), as the A2A spec says",
            )
        ]
    found = [Finding.ok("protocol.message_send")]
    if not sent.task_id:  # a message: no task to look up (allowed)
        return found
    if sent.state in ("completed", "failed", "canceled", "rejected", "input_required", "auth_required"):
        found.append(Finding.ok("protocol.task_final"))
    else:
        found.append(
            Finding.failed(
                "protocol.task_final",
                f"task {sent.task_id} was still {sent.state or 'stateless'} after {deadline_s:g}s",
                "end the task (completed or failed) within the deadline, or answer with a message",
            )
        )
    got = task_of(await get_task(http, agent, sent.task_id), agent.dialect)
    found.append(
        Finding.ok("protocol.tasks_get")
        if got is not None and got.get("id") == sent.task_id
        else Finding.failed(
            "protocol.tasks_get",
            f"{names['get']} of task {sent.task_id}, which {names['send']} answered, did not return it",
            f"keep the tasks you answer and return them from {names['get']} by id",
        )
    )
    return found


async def check_core_protocol(http: httpx.AsyncClient, agent: A2AEndpoint, deadline_s: float = 60) -> list[Finding]:
    if not agent.rpc_url:
        return [
            Finding.failed(
                "protocol.interface",
                f"no JSON-RPC interface to talk to: {'; '.join(agent.problems)}",
                "name the agent's JSON-RPC URL in its card (supportedInterfaces or url), on its own origin",
            )
        ]
    names = METHODS[agent.dialect]
    found = [Finding.ok("protocol.interface")]
    try:
        found += await _exchange_checks(http, agent, deadline_s)
        unknown = await call(http, agent, "agentenv/no-such-method", {})
        found.append(_spec_error("protocol.method_not_found", unknown, agent))
        if _code(unknown) == -32601 and isinstance(unknown, dict) and unknown.get("id") is None:
            found[-1] = Finding.failed(
                "protocol.method_not_found",
                "the -32601 error does not echo the request's id",
                "answer every error to a request with an id with that id (JSON-RPC 2.0)",
            )
        malformed = await rpc(http, agent, b'{"jsonrpc": "2.0", "id": 1, "method": ')
        found.append(_spec_error("protocol.parse_error", malformed, agent))
        if _code(malformed) == -32700:
            found.append(
                Finding.ok("protocol.parse_error.id_null", required=False)
                if isinstance(malformed, dict) and "id" in malformed and malformed["id"] is None
                else Finding.failed(
                    "protocol.parse_error.id_null",
                    "the -32700 error has no `id: null`",
                    'answer a parse error with `"id": null` (JSON-RPC 2.0)',
                    required=False,
                )
            )
        found.append(_spec_error("protocol.invalid_params", await call(http, agent, names["send"], {}), agent))
        missing = await call(http, agent, names["get"], {"id": f"agentenv-validate-{uuid.uuid4().hex}"})
        found.append(_spec_error("protocol.task_not_found", missing, agent))
    except AgentUnanswered as e:
        found.append(
            Finding.failed(
                "protocol.answers",
                str(e),
                f"answer JSON-RPC at {agent.rpc_url} with JSON objects within {2_000_000} bytes",
            )
        )
    return found


async def verify_core_protocol(http: httpx.AsyncClient, url: str, deadline_s: float = 60) -> ValidationReport:
    report = ValidationReport(validator=VALIDATOR, target=url)
    try:
        agent = await fetch_card(http, url)
    except AgentUnanswered as e:
        report.checks.append(Finding.failed("protocol.card", str(e), "serve the agent card (verify_a2a_agent_card)"))
        return report
    report.checks += await check_core_protocol(http, agent, deadline_s)
    return report
