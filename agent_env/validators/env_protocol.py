"""`verify_env_core_protocol`: the data plane at `<base>/agentenv` speaks protocol v1's JSON-RPC.

The facts its reference client relies on (DESIGN.md §8): errors come back with HTTP 200 as JSON-RPC error
objects; an unknown method is -32601 with the request's id echoed, malformed JSON -32700 with a null id,
invalid params -32602 (`data/add` with `parts: []` must be refused so: clients use it as a harmless probe);
`data/reset` answers an object (`{}`), `data/get` an object with `parts`. The card's `capabilities.operations`
says what is served: null all three, `[]` none, so a data plane that answers a method the card does not offer
is wrong too (a client trusting the card never calls it; one probing finds a different env than the card says).

Probes change nothing, except `data/reset` (it empties the env): it is called only when `mutating`.
"""

from __future__ import annotations

from typing import Any

from agentenv_protocol.types import METHOD_ADD, METHOD_GET, METHOD_RESET, GetDataResponse
from pydantic import ValidationError

from agent_env.envs.card import OPERATIONS, RPC_PATH
from agent_env.gateway_client.wire import JsonObject
from agent_env.validators import target as net
from agent_env.validators.report import Finding, ValidationReport

VALIDATOR = "verify_env_core_protocol"
UNKNOWN_METHOD = "agentenv/validator-unknown-method"
PROBE_ID = "agent-env-validate"


def offered(card: Any) -> list[str]:
    """The data operations the card offers: null or absent means all three."""
    caps = card.get("capabilities") if isinstance(card, dict) else None
    ops = caps.get("operations") if isinstance(caps, dict) else None
    if ops is None:
        return list(OPERATIONS)
    return [o for o in ops if isinstance(o, str)] if isinstance(ops, list) else list(OPERATIONS)


def _error_of(answer: net.EnvAnswer) -> JsonObject | None:
    error = answer.body.get("error") if isinstance(answer.body, dict) else None
    return error if isinstance(error, dict) else None


class Probes:
    """The data plane's answers, and what each says about HTTP statuses (collected for `rpc.errors_http_200`)."""

    def __init__(self, http: Any, target: net.EnvTarget) -> None:
        self.http, self.target = http, target
        self.http_errors: list[str] = []  # probes whose JSON-RPC error came with an HTTP error status

    async def send(self, label: str, method: str, params: Any = None, *, raw: bytes | None = None) -> net.EnvAnswer:
        if raw is None:
            answer = await net.rpc(self.http, self.target, method, params, id_=PROBE_ID)
        else:
            answer = await net.request(
                self.http, "POST", self.target.rpc_url, headers=self.target.rpc_headers, content=raw
            )
        if answer.status != 200 and _error_of(answer) is not None:
            self.http_errors.append(f"{label} came with HTTP {answer.status}")
        return answer


def _expect_error(name: str, answer: net.EnvAnswer, code: int, id_: Any, what: str, fix: str) -> Finding:
    error = _error_of(answer)
    if error is None:
        seen = f"HTTP {answer.status}: {net.clip(answer.text)}"
        return Finding.failed(name, f"{what}: expected a JSON-RPC error {code}, got {seen}", fix)
    if error.get("code") != code:
        return Finding.failed(name, f"{what}: error code {error.get('code')!r}, expected {code}", fix)
    body = answer.body if isinstance(answer.body, dict) else {}
    if body.get("id") != id_:
        return Finding.failed(
            name,
            f"{what}: the error's id is {body.get('id')!r}, expected {id_!r}",
            "echo the request's id (null when unparseable)",
        )
    return Finding.ok(name)


def _result_object(name: str, answer: net.EnvAnswer, method: str) -> tuple[Any, Finding]:
    body = answer.body if isinstance(answer.body, dict) else None
    if answer.status != 200 or body is None or "result" not in body:
        error = _error_of(answer)
        seen = (
            f"error {error.get('code')}: {error.get('message')}"
            if error
            else f"HTTP {answer.status}: {net.clip(answer.text)}"
        )
        return None, Finding.failed(
            name, f"{method} failed: {seen}", f"serve {method} (or leave it out of capabilities.operations)"
        )
    if not isinstance(body["result"], dict):
        return None, Finding.failed(
            name,
            f"{method} answered result {net.clip(repr(body['result']))}, not an object",
            f"answer {method} with an object ({{}} when there is nothing to say)",
        )
    return body["result"], Finding.ok(name)


async def check_protocol(target: net.EnvTarget, card: Any, *, mutating: bool = True) -> list[Finding]:
    ops = offered(card)
    findings: list[Finding] = []
    async with net.client() as http:
        probes = Probes(http, target)
        try:
            unknown = await probes.send("an unknown method", UNKNOWN_METHOD)
        except net.Unreachable as e:
            return [
                Finding.failed(
                    "rpc.served", f"no answer at {RPC_PATH}: {e}", f"serve the JSON-RPC data plane at <base>{RPC_PATH}"
                )
            ]
        findings.append(
            _expect_error(
                "rpc.unknown_method",
                unknown,
                -32601,
                PROBE_ID,
                f"calling {UNKNOWN_METHOD}",
                "answer unknown methods with error -32601, HTTP 200",
            )
        )
        garbled = await probes.send("malformed JSON", "", raw=b'{"jsonrpc": "2.0", "id": 1, "method": ')
        findings.append(
            _expect_error(
                "rpc.parse_error",
                garbled,
                -32700,
                None,
                "sending malformed JSON",
                "answer unparseable bodies with error -32700 and id null, HTTP 200",
            )
        )
        add = await probes.send("data/add with no parts", METHOD_ADD, {"parts": []})
        get = await probes.send("data/get", METHOD_GET, {})
        if METHOD_ADD in ops:
            findings.append(
                _expect_error(
                    "data/add.empty_parts",
                    add,
                    -32602,
                    PROBE_ID,
                    "data/add with parts []",
                    "refuse data/add without parts with error -32602 (invalid params), HTTP 200",
                )
            )
        if METHOD_GET in ops:
            result, finding = _result_object("data/get.result", get, METHOD_GET)
            if result is not None:
                try:
                    GetDataResponse.model_validate(result)
                except ValidationError as e:
                    finding = Finding.failed(
                        "data/get.result",
                        f"data/get's result is no GetDataResponse: {net.clip(str(e))}",
                        "answer {parts: [...]} of the protocol's parts",
                    )
            findings.append(finding)
        if METHOD_RESET in ops and mutating:
            reset = await probes.send("data/reset", METHOD_RESET, {})
            findings.append(_result_object("data/reset.result", reset, METHOD_RESET)[1])
        findings.append(_not_offered(ops, {METHOD_ADD: add, METHOD_GET: get}))
        findings.append(
            Finding.failed(
                "rpc.errors_http_200",
                "JSON-RPC errors sent as HTTP errors: " + "; ".join(probes.http_errors),
                "send JSON-RPC error objects with HTTP 200, as protocol v1's clients expect",
            )
            if probes.http_errors
            else Finding.ok("rpc.errors_http_200")
        )
    return findings


def _not_offered(ops: list[str], answers: dict[str, net.EnvAnswer]) -> Finding:
    """Methods the card does not offer must be unknown (-32601) to the data plane."""
    served = []
    for method, answer in answers.items():
        if method in ops:
            continue
        error = _error_of(answer)
        if error is None and isinstance(answer.body, dict) and "result" in answer.body:
            served.append(f"{method} answered a result")
        elif error is not None and error.get("code") == -32602:
            served.append(f"{method} is served (it checked the params: -32602)")
    if not served:
        return Finding.ok("operations.match_card")
    declared = "[]" if not ops else repr(ops)
    none = " (the card offers none)" if not ops else ""
    return Finding.failed(
        "operations.match_card",
        f"the data plane answers methods the card does not offer{none}: {'; '.join(served)} — capabilities.operations is {declared}",
        "list every served method in capabilities.operations (null: all three), or answer the others with -32601",
    )


async def verify_protocol(target: net.EnvTarget, card: Any, *, mutating: bool = True) -> ValidationReport:
    return ValidationReport(
        validator=VALIDATOR, target=target.base, checks=await check_protocol(target, card, mutating=mutating)
    )
