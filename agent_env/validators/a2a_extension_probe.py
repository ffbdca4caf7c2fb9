"""Calling an A2A agent's `urn:agentenv:*/v1` extension operations to validate them: what the extension
validators (`a2a_extensions`, `a2a_extension_tasks`) share.

The agent under test is an outsider: every operation is called on the agent's own origin only (a card naming
another origin is a finding, never a request), with no credential of ours, and its answers are read to a bound
and parsed with a depth limit. A failed call is an answer too (status 0): the checks report it, never raise.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import urljoin

import httpx

from agent_env import json_depth
from agent_env.agents.client import AgentClient, AgentReplyInvalid, AgentUnreachable
from agent_env.agents.extensions import ENDPOINTS, SKILL_CONFIG, TRAJECTORY, declared, operation
from agent_env.config import url_origin
from agent_env.gateway_client.wire import JsonObject
from agent_env.validators.report import Finding, ValidationReport

PEER_AGENTS = "urn:agentenv:peer-agents/v1"
INSTALL = "urn:agentenv:install/v1"
SNAPSHOT = "urn:agentenv:snapshot/v1"
STANDARD_ENDPOINTS = {  # where the protocol puts each extension when its card names no endpoint
    SKILL_CONFIG: ENDPOINTS[SKILL_CONFIG],
    TRAJECTORY: ENDPOINTS[TRAJECTORY],
    PEER_AGENTS: "/ext/peer-agents",
    SNAPSHOT: "/ext/snapshot",
}
MAX_ANSWER_BYTES = 4_000_000  # an extension's answer (a trajectory is the largest) is read no further
CALL_TIMEOUT_S = 30.0


@dataclass
class ProbeAnswer:
    """What an operation answered: its status (0: no answer at all) and its body, parsed when it is JSON."""

    method: str
    url: str
    status: int
    body: Any = None  # the JSON answered; None when it was not JSON (or nothing came)
    text: str = ""  # the start of the body, or why nothing came: for the report
    too_large: bool = False

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300 and not self.too_large

    @property
    def json_object(self) -> JsonObject | None:
        return self.body if isinstance(self.body, dict) else None

    def said(self) -> str:
        """`POST http://…/ext/x answered 404: {"detail": …}`, for a finding's problem."""
        if self.status == 0:
            return f"{self.method} {self.url} got no answer ({self.text})"
        if self.too_large:
            return f"{self.method} {self.url} answered over {MAX_ANSWER_BYTES} bytes"
        return f"{self.method} {self.url} answered {self.status}: {self.text[:200] or '(empty)'}"


class OffOrigin(Exception):
    """The card names an operation on another origin than the agent's: it is not called."""


class ExtensionProbe:
    """One declared extension of the agent under test: its operations, called as its card declares them."""

    def __init__(self, agent: AgentClient, uri: str, params: JsonObject) -> None:
        self.agent = agent
        self.uri = uri
        self.params = params

    def where(self, name: str, default_method: str) -> tuple[str, str]:
        """(method, absolute URL) of operation `name`; OffOrigin if the card puts it on another origin."""
        method, path = operation(self.params, name, default_method, STANDARD_ENDPOINTS.get(self.uri, "/"))
        url = urljoin(self.agent.url, path)
        if url_origin(url) != url_origin(self.agent.url):
            raise OffOrigin(f"the card puts {self.uri} {name} at {url}, not on the agent's origin {self.agent.url}")
        return method, url

    def declares(self, name: str) -> bool:
        """The card lists operation `name` under its params' `methods`."""
        methods = self.params.get("methods")
        return isinstance(methods, dict) and isinstance(methods.get(name), dict)

    def offers(self, name: str, field: str) -> bool:
        """The card's request of operation `name` names `field` (in its fields or a `oneOf` branch's): the
        agent serves the variant that field makes."""
        spec = (self.params.get("methods") or {}).get(name)
        request = spec.get("request") if isinstance(spec, dict) else None
        if not isinstance(request, dict):
            return False
        schemas = [request, *[b for b in request.get("oneOf") or [] if isinstance(b, dict)]]
        return any(field in (s.get(k) or []) for s in schemas for k in ("required", "optional", "supported"))

    async def call(self, name: str, default_method: str, body: JsonObject | None = None) -> ProbeAnswer:
        method, url = self.where(name, default_method)
        request = self.agent.http.build_request(method, url, json=body, timeout=CALL_TIMEOUT_S)
        try:
            response = await self.agent.http.send(request, stream=True)
        except httpx.HTTPError as e:
            return ProbeAnswer(method, url, 0, text=f"{type(e).__name__}: {e}")
        content = bytearray()
        try:  # read at most one chunk past the limit, never an adversary's whole reply
            async for chunk in response.aiter_bytes():
                content += chunk
                if len(content) > MAX_ANSWER_BYTES:
                    return ProbeAnswer(method, url, response.status_code, too_large=True)
        except httpx.HTTPError as e:
            return ProbeAnswer(method, url, 0, text=f"the answer broke off ({type(e).__name__}: {e})")
        finally:
            await response.aclose()
        text = bytes(content).decode("utf-8", errors="replace")
        try:
            parsed = json_depth.loads(bytes(content)) if content else None
        except ValueError:  # not JSON, or nested past json_depth.MAX_DEPTH
            parsed = None
        return ProbeAnswer(method, url, response.status_code, body=parsed, text=text[:500])


def not_declared(prefix: str, uri: str) -> Finding:
    """The one finding of a validator whose extension the card does not declare: optional, nothing to fix
    unless the agent means to serve it."""
    return Finding.failed(
        f"{prefix}.declared",
        f"not declared: the card's capabilities.extensions lists no {uri}, so it was not checked",
        f"if the agent serves {uri}, declare it in capabilities.extensions (its uri, and the params the protocol "
        "defines for it); otherwise there is nothing to fix",
        required=False,
    )


async def open_extension(
    agent: AgentClient, validator: str, uri: str, prefix: str
) -> tuple[ValidationReport, ExtensionProbe | None]:
    """A report begun for `validator`, and the agent's `uri` extension to probe (None when there is nothing
    to probe: no card, or the extension is not declared; the report says which)."""
    report = ValidationReport(validator=validator, target=agent.url)
    try:
        card = await agent.card()
    except (AgentUnreachable, AgentReplyInvalid) as e:
        report.checks.append(
            Finding.failed(
                f"{prefix}.card",
                f"no usable agent card: {e}",
                "serve the A2A agent card at URL/.well-known/agent-card.json, naming the URL it is reached at",
            )
        )
        return report, None
    params = declared(card).get(uri)
    if params is None:
        report.checks.append(not_declared(prefix, uri))
        return report, None
    report.checks.append(Finding.ok(f"{prefix}.declared"))
    problem = _malformed(params)
    if problem:
        report.checks.append(
            Finding.failed(
                f"{prefix}.params",
                f"the card's {uri} params: {problem}",
                'declare params as the protocol does: {"endpoint": "/ext/...", "methods": {"<operation>": '
                '{"method": "POST", ...}}}',
            )
        )
        return report, None
    return report, ExtensionProbe(agent, uri, params)


def _malformed(params: Any) -> str:
    """What makes a declaration's params unreadable as the protocol's (empty when they read)."""
    if not isinstance(params, dict):
        return f"not an object ({type(params).__name__})"
    methods = params.get("methods", {})
    if not isinstance(methods, dict) or not all(isinstance(m, dict) for m in methods.values()):
        return "methods is not an object of operations, each an object"
    for where, value in [("endpoint", params.get("endpoint"))] + [
        (f"methods.{name}.{key}", spec.get(key)) for name, spec in methods.items() for key in ("endpoint", "method")
    ]:
        if value is not None and not isinstance(value, str):
            return f"{where} is {str(value)[:80]}, not a string"
    return ""


def answered(name: str, answer: ProbeAnswer, fix: str, *, required: bool = True) -> Finding:
    """A check that the operation answered 2xx."""
    if answer.ok:
        return Finding.ok(name, required=required)
    return Finding.failed(name, answer.said(), fix, required=required)


def skipped(name: str, what: str, why: str, fix: str) -> Finding:
    """A check the validator could not make here: optional, and saying what was not checked and why."""
    return Finding.failed(name, f"not checked: {what} ({why})", fix, required=False)


def same_origin(probe: ExtensionProbe, prefix: str, operations: dict[str, str]) -> Finding:
    """The card's operations (name -> default method) all resolve on the agent's origin."""
    for name, method in operations.items():
        try:
            probe.where(name, method)
        except OffOrigin as e:
            return Finding.failed(
                f"{prefix}.origin",
                str(e),
                "declare the extension's endpoint as a path on the agent's own origin (e.g. "
                f"{STANDARD_ENDPOINTS.get(probe.uri, '/ext/...')})",
            )
    return Finding.ok(f"{prefix}.origin")
