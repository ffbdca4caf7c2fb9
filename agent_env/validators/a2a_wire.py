"""How the A2A validators talk to an agent: its card as JSON, JSON-RPC in either dialect the A2A SDKs speak
(0.3: `message/send`, `tasks/get`, `"kind"` parts; 1.0: `SendMessage`, `GetTask`, the `A2A-Version` header),
and its `urn:agentenv:*` extension operations on its own origin (`extension_call`, raw; `ExtensionProbe`, each
answer kept for a finding). Every reply is read by the validators' one bounded reader (`target.read_within`).

A validator reads what the agent sent, not what an SDK makes of it: a card missing a field is a finding, never a
parse error. The agent is an adversary like any under evaluation: every reply is read within a size limit, and
nothing is sent to another origin than the one the card was fetched from (the MCP check hands the agent a role
token).
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urljoin

import httpx

from agent_env.agents.client import AgentClient
from agent_env.agents.extensions import ENDPOINTS, operation
from agent_env.config import url_origin
from agent_env.gateway_client.wire import JsonObject
from agent_env.validators.target import AnswerTooLarge, Unreachable, json_within_depth, read_within

CARD_PATHS = ("/.well-known/agent-card.json", "/.well-known/agent.json")  # A2A >= 0.3, then the older name
CALL_TIMEOUT_S = 30.0
MAX_REPLY_BYTES = 4_000_000  # an agent's reply (a trajectory is the largest) is read no further
TERMINAL = {"completed", "failed", "canceled", "rejected", "input_required", "auth_required"}
METHODS = {  # JSON-RPC method names by dialect
    "0.3": {"send": "message/send", "get": "tasks/get"},
    "1.0": {"send": "SendMessage", "get": "GetTask"},
}


class AgentUnanswered(Unreachable):
    """The agent did not answer usably (unreachable, over the size limit, not JSON, on another origin)."""


async def read_reply(http: httpx.AsyncClient, request: httpx.Request, limit: int = MAX_REPLY_BYTES) -> httpx.Response:
    """Send `request`; its reply read to at most `limit` bytes (AgentUnanswered past it or on a transport error)."""
    try:
        return await read_within(http, request, limit)
    except Unreachable as e:
        raise AgentUnanswered(str(e)) from None


def json_of(response: httpx.Response) -> Any:
    return json_within_depth(response.content)


@dataclass
class A2AEndpoint:
    """An agent as its card describes it: where the card was found, its JSON, the JSON-RPC URL and dialect."""

    url: str  # the agent's base URL, as given
    card_url: str
    card: JsonObject
    dialect: str = "1.0"
    rpc_url: str = ""
    problems: list[str] = field(default_factory=list)  # why no JSON-RPC interface could be used

    @property
    def origin(self) -> str | None:
        return url_origin(self.url)

    def extensions(self) -> dict[str, JsonObject]:
        """The card's `capabilities.extensions` by URI, their params (those with a string `uri` only)."""
        capabilities = self.card.get("capabilities")
        listed = capabilities.get("extensions") if isinstance(capabilities, dict) else None
        out: dict[str, JsonObject] = {}
        for entry in listed if isinstance(listed, list) else []:
            if isinstance(entry, dict) and isinstance(entry.get("uri"), str):
                params = entry.get("params")
                out[entry["uri"]] = params if isinstance(params, dict) else {}
        return out


async def fetch_card(http: httpx.AsyncClient, url: str) -> A2AEndpoint:
    """The agent's card at `url` (AgentUnanswered if none answers as JSON), with its JSON-RPC interface chosen."""
    base = url.rstrip("/") + "/"
    tried = []
    for path in CARD_PATHS:
        card_url = urljoin(base, path.lstrip("/"))
        response = await read_reply(http, http.build_request("GET", card_url, timeout=15))
        card = json_of(response)
        if response.status_code == 200 and isinstance(card, dict):
            return _with_interface(A2AEndpoint(url=base, card_url=card_url, card=card))
        tried.append(f"{card_url} ({response.status_code})")
    raise AgentUnanswered(f"no A2A agent card as a JSON object at {' or '.join(tried)}")


def _with_interface(agent: A2AEndpoint) -> A2AEndpoint:
    """The JSON-RPC interface a client would use: a 1.0 `supportedInterfaces` entry, else the 0.3 `url`; only
    one on the agent's origin (turns may carry credentials for it)."""
    card = agent.card
    candidates: list[tuple[str, str]] = []
    interfaces = card.get("supportedInterfaces")
    for entry in interfaces if isinstance(interfaces, list) else []:
        if isinstance(entry, dict) and str(entry.get("protocolBinding", "")).upper() == "JSONRPC":
            version = str(entry.get("protocolVersion") or "1.0")
            candidates.append((str(entry.get("url") or ""), "0.3" if version.startswith("0.") else "1.0"))
    if isinstance(card.get("url"), str) and str(card.get("preferredTransport") or "JSONRPC").upper() == "JSONRPC":
        candidates.append((card["url"], "0.3"))
    for where, dialect in candidates:
        resolved = urljoin(agent.card_url, where)
        if url_origin(resolved) == agent.origin:
            agent.rpc_url, agent.dialect = resolved, dialect
            return agent
        agent.problems.append(f"{resolved} is on another origin than {agent.origin}")
    if not candidates:
        agent.problems.append("the card names no JSON-RPC interface (supportedInterfaces[] or url)")
    return agent


async def rpc(http: httpx.AsyncClient, agent: A2AEndpoint, payload: bytes, timeout: float = 30) -> Any:
    """POST one raw JSON-RPC body; the reply as JSON (None if it is not JSON)."""
    headers = {"content-type": "application/json"}
    if agent.dialect == "1.0":
        headers["A2A-Version"] = "1.0"
    request = http.build_request("POST", agent.rpc_url, content=payload, headers=headers, timeout=timeout)
    return json_of(await read_reply(http, request))


async def call(http: httpx.AsyncClient, agent: A2AEndpoint, method: str, params: Any, timeout: float = 30) -> Any:
    body = {"jsonrpc": "2.0", "id": uuid.uuid4().hex[:12], "method": method, "params": params}
    return await rpc(http, agent, json.dumps(body).encode(), timeout)


def text_part(agent: A2AEndpoint, text: str) -> JsonObject:
    return {"text": text} if agent.dialect == "1.0" else {"kind": "text", "text": text}


def file_part(agent: A2AEndpoint, data_b64: str, media_type: str, name: str) -> JsonObject:
    if agent.dialect == "1.0":
        return {"raw": data_b64, "mediaType": media_type, "filename": name}
    return {"kind": "file", "file": {"bytes": data_b64, "mimeType": media_type, "name": name}}


def message(agent: A2AEndpoint, parts: list[JsonObject]) -> JsonObject:
    role = "ROLE_USER" if agent.dialect == "1.0" else "user"
    shape: JsonObject = {"messageId": uuid.uuid4().hex, "role": role, "parts": parts}
    return shape if agent.dialect == "1.0" else {**shape, "kind": "message"}


@dataclass
class Exchange:
    """What one message/send came to: an error, a message, or a task (polled to a final state)."""

    error: JsonObject | None = None
    task_id: str = ""
    state: str = ""  # normalized: completed, failed, working, input_required ...
    text: str = ""
    task: JsonObject | None = None
    note: str = ""  # why the reply could not be read as A2A


def state_of(status: Any) -> str:
    raw = str(status.get("state", "")) if isinstance(status, dict) else ""
    return raw.removeprefix("TASK_STATE_").lower().replace("-", "_")


def text_of(message_json: Any) -> str:
    parts = message_json.get("parts") if isinstance(message_json, dict) else None
    return "".join(str(p.get("text", "")) for p in parts if isinstance(p, dict)) if isinstance(parts, list) else ""


def _task_in(result: Any, dialect: str) -> JsonObject | None:
    if not isinstance(result, dict):
        return None
    if dialect == "1.0":
        return result.get("task") if isinstance(result.get("task"), dict) else None
    return result if result.get("kind") == "task" or "status" in result else None


def _message_in(result: Any, dialect: str) -> JsonObject | None:
    if not isinstance(result, dict):
        return None
    if dialect == "1.0":
        return result.get("message") if isinstance(result.get("message"), dict) else None
    return result if result.get("kind") == "message" else None


async def send(
    http: httpx.AsyncClient, agent: A2AEndpoint, parts: list[JsonObject], deadline_s: float, poll_s: float = 0.2
) -> Exchange:
    """message/send `parts`; a task not final yet is polled with tasks/get (every `poll_s`) until it is or the
    deadline passes."""
    started = time.monotonic()
    reply = await call(http, agent, METHODS[agent.dialect]["send"], {"message": message(agent, parts)}, deadline_s)
    if not isinstance(reply, dict):
        return Exchange(note="message/send answered no JSON-RPC object")
    if isinstance(reply.get("error"), dict):
        return Exchange(error=reply["error"])
    result = reply.get("result")
    if (said := _message_in(result, agent.dialect)) is not None:
        return Exchange(state="completed", text=text_of(said))
    task = _task_in(result, agent.dialect)
    if task is None or not isinstance(task.get("id"), str):
        return Exchange(note=f"message/send's result is neither a task with an id nor a message: {str(result)[:200]}")
    while state_of(task.get("status")) not in TERMINAL and time.monotonic() - started < deadline_s:
        await asyncio.sleep(min(poll_s, max(0.0, deadline_s - (time.monotonic() - started))))
        task = task_of(await get_task(http, agent, task["id"]), agent.dialect) or task
    status = task.get("status")
    return Exchange(
        task_id=task["id"],
        state=state_of(status),
        text=text_of(status.get("message") if isinstance(status, dict) else None),
        task=task,
    )


async def get_task(http: httpx.AsyncClient, agent: A2AEndpoint, task_id: str) -> Any:
    return await call(http, agent, METHODS[agent.dialect]["get"], {"id": task_id})


def task_of(reply: Any, dialect: str) -> JsonObject | None:
    """The task in a tasks/get reply (1.0 answers the task itself as the result too)."""
    result = reply.get("result") if isinstance(reply, dict) else None
    if isinstance(result, dict) and isinstance(result.get("id"), str):
        return result
    return _task_in(result, dialect)


# -- urn:agentenv:* extension operations, as the card declares them, on the agent's origin only --

PEER_AGENTS = "urn:agentenv:peer-agents/v1"
INSTALL = "urn:agentenv:install/v1"
SNAPSHOT = "urn:agentenv:snapshot/v1"
STANDARD_ENDPOINTS = {  # where the protocol puts each extension when its card names no endpoint
    **ENDPOINTS,
    PEER_AGENTS: "/ext/peer-agents",
    SNAPSHOT: "/ext/snapshot",
}


class OffOrigin(AgentUnanswered):
    """The card names an operation on another origin than the agent's: it is not called (what is sent may carry
    a role token or grants)."""


def resolve(agent_url: str, uri: str, params: JsonObject, name: str, method: str, path: str = "") -> tuple[str, str]:
    """(method, absolute URL) of operation `name` as the card's `params` declare it (else `method` at `path`, or
    the extension's standard endpoint); OffOrigin if that is not on the agent's origin."""
    method, where = operation(params, name, method, path or STANDARD_ENDPOINTS.get(uri, "/"))
    url = urljoin(agent_url, where)
    if url_origin(url) != url_origin(agent_url):
        raise OffOrigin(f"the card puts {uri} {name} at {url}, not on the agent's origin {agent_url}: not sent there")
    return method, url


async def extension_call(
    http: httpx.AsyncClient,
    agent: A2AEndpoint,
    uri: str,
    name: str,
    default_method: str,
    default_path: str,
    body: JsonObject | None = None,
) -> httpx.Response:
    """One operation of an extension as the card declares it (OffOrigin if on another origin)."""
    method, url = resolve(agent.url, uri, agent.extensions().get(uri, {}), name, default_method, default_path)
    request = http.build_request(method, url, json=body if method != "GET" else None, timeout=30)
    return await read_reply(http, request)


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
        if self.too_large:
            return f"{self.method} {self.url} answered over {MAX_REPLY_BYTES} bytes"
        if self.status == 0:
            return f"{self.method} {self.url} got no answer ({self.text})"
        return f"{self.method} {self.url} answered {self.status}: {self.text[:200] or '(empty)'}"


class ExtensionProbe:
    """One declared extension of the agent under test: its operations, called as its card declares them. A
    failed call is an answer too (status 0): the checks report it, never raise."""

    def __init__(self, agent: AgentClient, uri: str, params: JsonObject) -> None:
        self.agent = agent
        self.uri = uri
        self.params = params

    def where(self, name: str, default_method: str) -> tuple[str, str]:
        """(method, absolute URL) of operation `name`; OffOrigin if the card puts it on another origin."""
        return resolve(self.agent.url, self.uri, self.params, name, default_method)

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
            response = await read_within(self.agent.http, request, MAX_REPLY_BYTES)
        except AnswerTooLarge:
            return ProbeAnswer(method, url, 0, too_large=True)
        except Unreachable as e:
            return ProbeAnswer(method, url, 0, text=str(e))
        text = response.content.decode("utf-8", errors="replace")
        return ProbeAnswer(method, url, response.status_code, body=json_of(response), text=text[:500])
