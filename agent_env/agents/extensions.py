"""The open protocol's agent extensions (`urn:agentenv:*/v1`): how a run configures an agent and reads its
trajectory, in one place for the client (`deploy_agent`, `prompt_agent`) and our agent SDK.

An agent built with the protocol's reference framework (`agentenv_protocol.a2a_agent`) gets no tools from
the turn itself: it takes its MCP servers, config and skills from plain HTTP operations it lists on its card,
`capabilities.extensions[].params` = `{"endpoint": "/ext/mcp-config", "methods": {"add": {"method": "POST"},
...}}` (an operation's own `endpoint` overrides the extension's). Its framework needs no activation header:
the operations are addressed by path, and the card is the contract. Paths resolve against the agent's URL and
must stay on its origin, since `mcp-config` carries the agent's role token (DESIGN §9). The URIs and the
protocol's paths are `extension_table`'s (re-exported here for the modules that name them through this one).
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urljoin

import httpx
from pydantic import BaseModel, ConfigDict, ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse

from agent_env.agents.extension_table import (  # noqa: F401 - ENDPOINTS and the URIs: named through here too
    AGENT_CONFIG,
    ENDPOINTS,
    MCP_CONFIG,
    SKILL_CONFIG,
    TRAJECTORY,
)
from agent_env.agents.transfer_serving import trajectory_to_object
from agent_env.config import url_origin
from agent_env.gateway_client.wire import JsonObject
from agent_env.spec.agent import InlineSkill  # skill-config/v1 add, inline variant: the record's shape is the wire's

CONFIGURING = (MCP_CONFIG, AGENT_CONFIG, SKILL_CONFIG, TRAJECTORY)  # the ones a run uses, in this order
MAX_TRAJECTORY_BYTES = 4_000_000  # an agent's own account of a turn, kept with the transcript


class _Wire(BaseModel):
    model_config = ConfigDict(extra="forbid")


class McpServer(_Wire):
    """`mcp-config/v1` add: an MCP server the agent should use, with the headers it must send there."""

    url: str
    headers: dict[str, str] | None = None
    name: str | None = None


class TrajectoryRequest(_Wire):
    """`trajectory/v1` get, task variant: the ended task's trajectory, answered as `{"trajectory": [...]}`."""

    task_id: str


class ExtensionRefused(Exception):
    """The agent refused a configuration it declared it takes, or names an operation on another origin."""


def declared(card: Any) -> dict[str, dict[str, Any]]:
    """The card's extensions by URI, with their params (a protobuf A2A card, as `AgentClient.card()` gives)."""
    return {e.uri: _plain(e.params) for e in card.capabilities.extensions}


def _plain(value: Any) -> Any:
    """A protobuf Struct (a Mapping) or ListValue (a Sequence) as plain JSON values."""
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, Sequence) and not isinstance(value, str):
        return [_plain(v) for v in value]
    return value


def operation(params: dict[str, Any], name: str, default_method: str, default_path: str) -> tuple[str, str]:
    """(HTTP method, path) of one operation as the card's params declare it."""
    spec = (params.get("methods") or {}).get(name) or {}
    return spec.get("method", default_method).upper(), spec.get("endpoint") or params.get("endpoint") or default_path


class ExtensionClient:
    """Calls an agent's extension operations, on the agent's origin only."""

    def __init__(self, http: httpx.AsyncClient, agent_url: str, card: Any) -> None:
        self.http = http
        self.agent_url = agent_url
        self.extensions = declared(card)

    def has(self, uri: str) -> bool:
        return uri in self.extensions

    async def call(
        self, uri: str, name: str, method: str, body: BaseModel | None = None, *, path: str | None = None
    ) -> httpx.Response:
        """`path`: where the caller found the operation already (extension_ops resolves the other extensions')."""
        if path is None:
            method, path = operation(self.extensions[uri], name, method, ENDPOINTS[uri])
        url = urljoin(self.agent_url, path)
        if url_origin(url) != url_origin(self.agent_url):
            raise ExtensionRefused(
                f"the agent at {self.agent_url} names {uri} {name} at {url}: another origin, refused "
                "(its role token goes only to the agent) — serve the extension on the agent's own origin"
            )
        payload = body.model_dump(mode="json", exclude_none=True) if body is not None else None
        request = self.http.build_request(method, url, json=payload, timeout=30)
        response = await self.http.send(request, stream=True)
        try:  # an agent is an adversary: read at most one byte past the limit, never its whole reply
            content = bytearray()
            async for chunk in response.aiter_bytes():
                content += chunk
                if len(content) > MAX_TRAJECTORY_BYTES:
                    break
        finally:
            await response.aclose()
        return httpx.Response(response.status_code, content=bytes(content), request=request)  # (decoded already)

    async def configure(self, *, mcp: McpServer | None, config: dict[str, Any], skills: list[InlineSkill]) -> list[str]:
        """Register the environment's MCP server, set the agent's config, add its skills: whichever of
        these the card declares. A 409 (already registered: a retried deploy) counts as done. Returns the
        URIs configured."""
        done = []
        if mcp is not None and self.has(MCP_CONFIG):
            self._check(await self.call(MCP_CONFIG, "add", "POST", mcp), MCP_CONFIG)
            done.append(MCP_CONFIG)
        if config and self.has(AGENT_CONFIG):
            response = await self.call(AGENT_CONFIG, "set", "POST", _Config.model_validate(config))
            self._check(response, AGENT_CONFIG)
            done.append(AGENT_CONFIG)
        if skills and self.has(SKILL_CONFIG):
            for skill in skills:
                self._check(await self.call(SKILL_CONFIG, "add", "POST", skill), SKILL_CONFIG)
            done.append(SKILL_CONFIG)
        return done

    async def set_listed(self, fields: JsonObject) -> list[str]:
        """agent-config/v1 set of those `fields` its card lists as taken (as the reference framework negotiates a
        prompt's model, effort...: an agent is sent only what it says it takes). Returns the names set."""
        params = self.extensions.get(AGENT_CONFIG) or {}
        request = ((params.get("methods") or {}).get("set") or {}).get("request") or {}
        listed = {f for k in ("supported", "required", "optional") for f in request.get(k) or [] if isinstance(f, str)}
        taken = {k: v for k, v in fields.items() if k in listed}
        if taken:
            self._check(await self.call(AGENT_CONFIG, "set", "POST", _Config.model_validate(taken)), AGENT_CONFIG)
        return sorted(taken)

    async def trajectory(self, task_id: str) -> Any:
        """The agent's trajectory of one ended task (None if it kept none: a 404)."""
        if not task_id or not self.has(TRAJECTORY):
            return None
        response = await self.call(TRAJECTORY, "get", "POST", TrajectoryRequest(task_id=task_id))
        if response.status_code == 404:
            return None
        self._check(response, TRAJECTORY)
        if len(response.content) > MAX_TRAJECTORY_BYTES:
            return {"clipped": True, "bytes": f"over {MAX_TRAJECTORY_BYTES}"}
        return response.json().get("trajectory")

    def _check(self, response: httpx.Response, uri: str) -> None:
        if response.status_code == 409 or response.is_success:
            return
        raise ExtensionRefused(
            f"the agent at {self.agent_url} refused {uri} ({response.status_code}): {response.text[:500]}"
        )


class _Config(BaseModel):
    """`agent-config/v1` set: the agent's own fields, as its card's schema names them (not ours to judge)."""

    model_config = ConfigDict(extra="allow")


# -- serving them: our agent SDK's side (agents.sdk.serve), at the paths the reference framework uses --

MAX_BODY_BYTES = 1_000_000
MAX_KEPT_TRAJECTORIES = 256  # the latest tasks' trajectories; older ones answer 404
IDENTITY = ("name", "description")  # agent-config/v1 fields that rename the agent: its served card follows them
# The agent-config/v1 fields every agent of ours takes (the reference's AgentConfig), listed on the card as
# `supported` with the agent's own: a client sends only the fields listed there.
TAKEN_CONFIG = (*IDENTITY, "role", "timeout_seconds")


def card_extensions(config_fields: Sequence[str] = ()) -> list[Any]:
    """The card's `capabilities.extensions`, in the reference framework's shape; `config_fields`: the agent-config
    fields the agent takes beyond TAKEN_CONFIG."""
    from a2a.types import AgentExtension

    def declared_as(uri: str, description: str, methods: dict[str, Any]) -> Any:
        return AgentExtension(uri=uri, description=description, params={"endpoint": ENDPOINTS[uri], "methods": methods})

    return [
        declared_as(
            MCP_CONFIG,
            "Register MCP servers the agent should use.",
            {
                "add": {"method": "POST", "request": {"required": ["url"], "optional": ["headers", "name"]}},
                "list": {"method": "GET", "response": {"required": ["mcp_servers"]}},
            },
        ),
        declared_as(
            AGENT_CONFIG,
            "Set or read agent configuration.",
            {
                "set": {"method": "POST", "request": {"supported": sorted({*TAKEN_CONFIG, *config_fields})}},
                "get": {"method": "GET", "response": {"required": ["config"]}},
            },
        ),
        declared_as(
            SKILL_CONFIG,
            "Register skills made available to the agent.",
            {
                "add": {
                    "method": "POST",
                    "request": {"required": ["name", "description", "skill_md"]},
                    "response": {"required": ["name"]},
                },
                "list": {"method": "GET", "response": {"required": ["skills"]}},
            },
        ),
        declared_as(
            TRAJECTORY,
            "Retrieve an agent trajectory.",
            {"get": {"method": "POST", "request": {"required": ["task_id"], "oneOf": [{}, {"required": ["objects"]}]}}},
        ),
    ]


@dataclass
class Configured:
    """What a run configured through the extensions: every later turn gets it (a turn's own data wins)."""

    mcp_servers: dict[str, McpServer] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)
    skills: dict[str, InlineSkill] = field(default_factory=dict)
    trajectories: OrderedDict[str, list[dict[str, Any]]] = field(default_factory=OrderedDict)

    def identity(self) -> dict[str, str]:
        """The name and description the run gave the agent (its card shows them instead of its own)."""
        return {key: self.config[key] for key in IDENTITY if key in self.config}

    def keep_trajectory(self, task_id: str, events: list[dict[str, Any]]) -> None:
        self.trajectories[task_id] = events
        while len(self.trajectories) > MAX_KEPT_TRAJECTORIES:
            self.trajectories.popitem(last=False)

    def routes(self) -> list[Any]:
        from starlette.routing import Route

        async def mcp_add(request: Request) -> JSONResponse:
            server = McpServer.model_validate(await _body(request))
            if any(s.url == server.url for s in self.mcp_servers.values()):
                return _refused(409, f"MCP URL {server.url!r} is already registered")
            name = server.name or f"mcp_{len(self.mcp_servers) + 1}"
            if name in self.mcp_servers:
                return _refused(409, f"MCP name {name!r} is already registered")
            self.mcp_servers[name] = server
            return JSONResponse({"status": "added", "name": name, "url": server.url})

        async def mcp_list(request: Request) -> JSONResponse:
            listing = {n: {"url": s.url, "has_headers": bool(s.headers)} for n, s in self.mcp_servers.items()}
            return JSONResponse({"mcp_servers": listing})  # never the headers: they hold tokens

        async def config_set(request: Request) -> JSONResponse:
            body = await _body(request)
            for key in IDENTITY:  # as the reference answers: an agent is never renamed to nothing
                if key in body and not (isinstance(body[key], str) and body[key].strip()):
                    return _refused(400, f"{key} must be a non-empty string")
            if not isinstance(body.get("system_prompt", ""), str | None):
                return _refused(400, "system_prompt must be a string")
            self.config.update(body)
            return JSONResponse({"status": "updated"})

        async def config_get(request: Request) -> JSONResponse:
            return JSONResponse({"config": self.config})

        async def skill_add(request: Request) -> JSONResponse:
            skill = InlineSkill.model_validate(await _body(request))
            if skill.name in self.skills:
                return _refused(409, f"Skill {skill.name!r} is already registered")
            self.skills[skill.name] = skill
            return JSONResponse({"name": skill.name})

        async def skill_list(request: Request) -> JSONResponse:
            return JSONResponse({"skills": {n: {"description": s.description} for n, s in self.skills.items()}})

        async def trajectory_get(request: Request) -> JSONResponse:
            body = await _body(request)
            if "objects" in body:  # the task_objects variant: written through the run's grant
                return await trajectory_to_object(body, self.trajectories)
            wanted = TrajectoryRequest.model_validate(body)
            events = self.trajectories.get(wanted.task_id)
            if events is None:
                return _refused(404, f"No completed trajectory available for task {wanted.task_id!r}")
            return JSONResponse({"trajectory": events})

        def both(uri: str, post, get=None) -> list[Route]:
            return [Route(ENDPOINTS[uri], _answering(post), methods=["POST"])] + (
                [Route(ENDPOINTS[uri], _answering(get), methods=["GET"])] if get else []
            )

        return (
            both(MCP_CONFIG, mcp_add, mcp_list)
            + both(AGENT_CONFIG, config_set, config_get)
            + both(SKILL_CONFIG, skill_add, skill_list)
            + both(TRAJECTORY, trajectory_get)
        )


async def _body(request: Request) -> dict[str, Any]:
    raw = await request.body()
    if len(raw) > MAX_BODY_BYTES:
        raise ValueError(f"the body is over {MAX_BODY_BYTES} bytes")
    body = json.loads(raw or b"{}")
    if not isinstance(body, dict):
        raise ValueError("the body must be a JSON object")
    return body


def _refused(status: int, detail: str) -> JSONResponse:
    return JSONResponse({"detail": detail}, status_code=status)


def _answering(handler):
    """A bad body is a 400 naming what is wrong, as the reference framework answers."""

    async def route(request: Request) -> JSONResponse:
        try:
            return await handler(request)
        except (ValueError, ValidationError) as e:  # pydantic's ValidationError is a ValueError
            return _refused(400, str(e)[:2000])

    return route
