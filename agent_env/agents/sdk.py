"""Write an agent in a few lines, served over A2A:

    from agent_env.agents.sdk import Agent, Turn, serve

    class Echo(Agent):
        name = "echo"

        async def answer(self, turn: Turn) -> str:
            async with turn.tools() as tools:           # the environment's MCP tools, as this agent
                notes = await tools.call("list_notes", {})
            return f"You said {turn.prompt!r}; there are {notes['count']} notes."

    serve(Echo(), port=9000)   # behind a proxy or a published port: serve(..., public_url="https://...")

An agent also enables the open protocol's extensions it takes part in with class attributes: `peer_agents = True`
(the run sets the agents it may delegate to: `turn.peers`), `triggers = True` (the SDK registers the run's rules
and decides a conversation's turns with them), `attribution_probe = True` (reports what `turn.attribution()` last
gave a model call), `install = {...}` (install/v1's commands, declared on the card).

What a run sets through agent-config/v1 reaches every turn: its `system_prompt` and `role` (unless the turn brings
its own), every field in `turn.config`; a `name` or `description` set there renames the agent on its served card.

Each turn arrives as an A2A message: the prompt as text, and a data part `{"agentenv": {...}}` with the
system prompt, the environment's MCP URL and this agent's role token, its role and name, the run and
its seed, its config and the conversation so far (so agents need keep no state).
"""

from __future__ import annotations

import contextlib
import json
import uuid
from dataclasses import dataclass, field
from typing import Any, Literal, TypedDict

from a2a.helpers import (
    get_data_parts,
    get_message_text,
    new_data_part,
    new_task_from_user_message,
    new_text_part,
)
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.request_handlers.response_helpers import agent_card_to_dict
from a2a.server.routes import create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types import AgentCapabilities, AgentCard, AgentInterface, AgentSkill
from a2a.utils.constants import AGENT_CARD_WELL_KNOWN_PATH, TransportProtocol
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from agent_env import telemetry, tls
from agent_env.agents import staging, transfer_serving
from agent_env.agents.changelog_serving import Changelog, changelog_of
from agent_env.agents.extension_ops import InstallDeclaration
from agent_env.agents.extension_table import ENDPOINTS, STAGING
from agent_env.agents.extensions import Configured, card_extensions
from agent_env.agents.served_extensions import Enabled, PeerListed, ServedExtensions, declarations
from agent_env.gateway_client.wire import JsonObject
from agent_env.guard import HostGuard
from agent_env.json_depth import JSON_RPC

KEY = "agentenv"

# One earlier message of the conversation as this agent sees it: "agent" is its own, "user" the other side's
# (the prompt's sender: the run, or the partner playing the user). Made by agent_env.agents.conversation.
Said = TypedDict("Said", {"from": Literal["user", "agent"], "text": str})


@dataclass
class Turn:
    prompt: str
    system_prompt: str = ""
    mcp_url: str | None = None
    token: str | None = None
    role: str | None = None
    agent: str | None = None
    run_id: str | None = None
    config: dict[str, Any] = field(default_factory=dict)
    conversation: list[Said] = field(default_factory=list)  # what was said before the prompt, oldest first
    context_id: str = ""
    message_id: str = ""  # the same for a resent turn: hosts answer it once
    task_id: str = ""  # the A2A task this turn answers
    deadline_s: float | None = None  # how long the framework waits for this answer
    turn: int | None = None  # which time this agent is asked in this conversation (0 first), if the sender says
    seed: int | None = None  # the run's seed: seed anything random (model sampling...) with it
    skills: list[dict[str, Any]] = field(default_factory=list)  # added through skill-config/v1: name, description...
    trajectory: list[dict[str, Any]] = field(default_factory=list)  # this turn's tool calls, for trajectory/v1
    peers: list[PeerListed] = field(default_factory=list)  # set through peer-agents/v1: name, url, description
    served: ServedExtensions | None = field(default=None, repr=False)
    # The prompt's own settings (its model, the format it asks the answer in...), where the run gave them.
    settings: JsonObject = field(default_factory=dict)

    def attribution(self) -> dict[str, str]:
        """What to send with a model call to attribute its cost (the run, the agent); attribution-probe/v1
        reports the last one handed out."""
        given = {k: str(v) for k, v in (("run_id", self.run_id), ("agent", self.agent)) if v}
        if self.served is not None:
            self.served.saw_attribution(given)
        return given

    @property
    def number(self) -> int:
        """Which turn this is for the agent (0 for the first)."""
        if self.turn is not None:
            return int(self.turn)
        return sum(1 for m in self.conversation if m.get("from") == "agent")

    @contextlib.asynccontextmanager
    async def tools(self):
        """The environment's tools over MCP, authenticated as this agent."""
        if not self.mcp_url:
            raise RuntimeError("this turn came with no environment (no MCP URL)")
        import httpx2
        from mcp import Client
        from mcp.client.streamable_http import streamable_http_client

        headers = {"authorization": f"Bearer {self.token}"} if self.token else {}
        hooks = telemetry.HTTP_HOOKS  # the turn's trace continues in the gateway's tool calls
        try:
            async with (
                httpx2.AsyncClient(headers=headers, timeout=120, verify=tls.context(), event_hooks=hooks) as http,
                Client(streamable_http_client(self.mcp_url, http_client=http)) as client,
            ):
                tools = Tools(client)
                try:
                    yield tools
                finally:
                    self.trajectory.extend({"event": "tool", **call} for call in tools.calls)
        except BaseExceptionGroup as group:  # the MCP client's task groups wrap what the agent raised
            inner: BaseException = group
            while isinstance(inner, BaseExceptionGroup) and len(inner.exceptions) == 1:
                inner = inner.exceptions[0]
            if inner is group:
                raise
            raise inner from None


class Tools:
    """A thin wrapper: `call` returns the tool's JSON result, or raises ToolFailed with its error text."""

    def __init__(self, client) -> None:
        self.client = client
        self.calls: list[dict[str, Any]] = []

    async def list(self):
        return (await self.client.list_tools()).tools

    async def call(self, name: str, arguments: dict[str, Any] | None = None) -> Any:
        result = await self.client.call_tool(name, arguments or {})
        text = "".join(getattr(c, "text", "") for c in result.content)
        self.calls.append({"tool": name, "arguments": arguments or {}, "error" if result.is_error else "result": text})
        if result.is_error:
            raise ToolFailed(text)
        try:
            return json.loads(text)
        except ValueError:
            return text


class ToolFailed(Exception):
    pass


@dataclass
class Answer:
    text: str
    data: dict[str, Any] = field(default_factory=dict)
    failed: bool = False  # the agent could not do it: the turn ends as a failed A2A task


class Agent:
    """Subclass and implement `answer`. Raise or return Answer(failed=True) to fail the turn."""

    name: str = "agent"
    description: str = "An agent-env agent."
    # The open protocol's extensions it enables (served by serve() beside mcp-config, agent-config, skill-config
    # and trajectory): peer agents to delegate to (turn.peers), deterministic replies the run registers
    # (triggers/v1), the attribution its model calls got (turn.attribution()), how to install it (declared only).
    peer_agents: bool = False
    triggers: bool = False
    attribution_probe: bool = False
    install: InstallDeclaration | None = None
    # agent-config/v1 fields it takes beyond the protocol's own (name, description, role, timeout_seconds), listed
    # on its card: a client sends only those. The system prompt (each turn's `turn.system_prompt`) unless it has no
    # model to give it to: a client then knows it is not followed.
    config_fields: tuple[str, ...] = ("system_prompt",)
    # How long a stopping server waits for turns in flight (None: until they end). A proxy's turns wait on a driver.
    shutdown_grace_seconds: int | None = None

    async def answer(self, turn: Turn) -> str | Answer:
        raise NotImplementedError

    def extension_declarations(self) -> list[Any]:
        """Further card entries (`a2a.types.AgentExtension`) of extensions this agent serves itself."""
        return []

    def extension_routes(self, configured: Configured) -> list[Route]:
        """Their routes; `configured`: what the run sets through the standard extensions (its MCP servers...)."""
        return []


def turn_from_message(message, context_id: str) -> Turn:
    env: dict[str, Any] = next((d[KEY] for d in get_data_parts(message.parts) if isinstance(d, dict) and KEY in d), {})
    return Turn(
        prompt=get_message_text(message),
        context_id=context_id,
        message_id=message.message_id,
        **{
            k: env[k]
            for k in (
                "system_prompt",
                "mcp_url",
                "token",
                "role",
                "agent",
                "run_id",
                "config",
                "conversation",
                "deadline_s",
                "turn",
                "seed",
                "settings",
            )
            if env.get(k) is not None
        },
    )


class _Executor(AgentExecutor):
    def __init__(
        self,
        agent: Agent,
        configured: Configured | None = None,
        served: ServedExtensions | None = None,
        changelog: Changelog | None = None,
    ) -> None:
        self.agent = agent
        self.configured = configured
        self.served = served
        self.changelog = changelog

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        task = context.current_task
        if task is None:
            task = new_task_from_user_message(context.message)  # type: ignore[arg-type]  # an execute request carries its message
            await event_queue.enqueue_event(task)
        updater = TaskUpdater(event_queue, task.id, task.context_id)
        turn = turn_from_message(context.message, task.context_id)
        turn.task_id = task.id
        if self.configured is not None:
            _apply(self.configured, turn)
        if self.served is not None:
            turn.served, turn.peers = self.served, self.served.peer_listing()
        try:
            reply = await self.agent.answer(turn)
        except Exception as e:  # noqa: BLE001 - the caller reads the failure as the turn's outcome
            reply = Answer(text=f"{type(e).__name__}: {e}", failed=True)
        if isinstance(reply, str):
            reply = Answer(text=reply)
        if self.configured is not None:
            answered = {"event": "answer", "text": reply.text, "failed": reply.failed}
            self.configured.keep_trajectory(
                task.id, [{"event": "prompt", "text": turn.prompt}, *turn.trajectory, answered]
            )
        if self.changelog is not None:  # before the answer goes out: a run that has it finds the increment
            await self.changelog.after_turn(task.context_id)
        message = updater.new_agent_message([new_text_part(reply.text), new_data_part({KEY: reply.data})])
        await (updater.failed(message) if reply.failed else updater.complete(message))

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        updater = TaskUpdater(event_queue, context.task_id, context.context_id)  # type: ignore[arg-type]  # a cancel names its task
        await updater.cancel(updater.new_agent_message([new_text_part("cancelled")]))


def _apply(configured: Configured, turn: Turn) -> None:
    """What the run configured through the extensions, where the turn itself did not say."""
    turn.config = {**configured.config, **turn.config}
    for key in ("system_prompt", "role"):  # the protocol's own fields, where the turn's data has them
        if not getattr(turn, key) and isinstance(configured.config.get(key), str):
            setattr(turn, key, configured.config[key])
    turn.skills = [s.model_dump() for s in configured.skills.values()]
    server = next(reversed(configured.mcp_servers.values()), None)  # the latest: a run that deployed it again
    if turn.mcp_url is None and server is not None:
        bearer = (server.headers or {}).get("authorization", (server.headers or {}).get("Authorization", ""))
        turn.mcp_url, turn.token = server.url, bearer.removeprefix("Bearer ") or None


def agent_card(agent: Agent, url: str, *, extensions: bool = False) -> AgentCard:
    declared = (
        card_extensions(agent.config_fields)
        + transfer_serving.card_entries(agent)
        + declarations(Enabled.of(agent))
        + staging.card_entries(staging.configured_max_bytes())
        + agent.extension_declarations()
        if extensions
        else []
    )
    return AgentCard(
        name=agent.name,
        description=agent.description,
        version="1",
        supported_interfaces=[
            AgentInterface(url=url, protocol_binding=TransportProtocol.JSONRPC, protocol_version="1.0")
        ],
        capabilities=AgentCapabilities(streaming=False, push_notifications=False, extensions=declared),
        default_input_modes=["text/plain", "application/json"],
        default_output_modes=["text/plain", "application/json"],
        skills=[
            AgentSkill(
                id="work", name="Work in an agent-env environment", description=agent.description, tags=["agentenv"]
            )
        ],
    )


def a2a_routes(agent: Agent, url: str, *, extensions: bool = False) -> tuple[list, DefaultRequestHandler]:
    """Starlette routes serving `agent` over A2A (card + JSON-RPC) for clients reaching it at `url`. With
    `extensions` (an agent served at its origin's root: their paths are absolute), it also declares and serves
    the open protocol's urn:agentenv:*/v1 (mcp-config, agent-config, skill-config, trajectory, staging, and those
    the agent enables: peer-agents, triggers, attribution-probe, install), as its reference framework does; hosted agents are
    configured by the gateway instead."""
    card = agent_card(agent, url, extensions=extensions)
    configured = Configured() if extensions else None
    served = ServedExtensions(Enabled.of(agent)) if extensions else None
    changelog = changelog_of(agent) if extensions else None
    executor = _Executor(agent, configured, served, changelog)
    handler = DefaultRequestHandler(agent_executor=executor, task_store=InMemoryTaskStore(), agent_card=card)
    routes = card_routes(card, configured) + create_jsonrpc_routes(handler, rpc_url="/")
    if extensions:  # where the reference framework's clients (A2A 0.3) send turns: `message/send` to /a2a
        routes += create_jsonrpc_routes(handler, rpc_url=LEGACY_RPC_PATH, enable_v0_3_compat=True)
    own = (
        configured.routes() + transfer_serving.routes(agent) + agent.extension_routes(configured) if configured else []
    )
    own += staging.routes(staging.StagingArea(staging.configured_max_bytes())) if extensions else []
    own += changelog.routes() if changelog else []
    return routes + own + (served.routes() if served else []), handler


LEGACY_RPC_PATH = "/a2a"
LEGACY_CARD_PATH = "/.well-known/agent.json"  # A2A 0.3's card path, which the reference framework reads


def card_routes(card: AgentCard, configured: Configured | None = None) -> list[Route]:
    """The card as the A2A SDK renders it, with whole numbers in extensions' params as integers: a protobuf Struct
    holds every number as a double, and install/v1's `a2a_port` must read 8000, not 8000.0. A name or description
    the run set through agent-config/v1 (`configured`) replaces the agent's own, as the reference framework does."""
    body = card_body(card)

    async def served(request: Request) -> JSONResponse:
        return JSONResponse({**body, **configured.identity()} if configured is not None else body)

    paths = (AGENT_CARD_WELL_KNOWN_PATH, LEGACY_CARD_PATH) if configured is not None else (AGENT_CARD_WELL_KNOWN_PATH,)
    return [Route(path, served, methods=["GET"]) for path in paths]


def card_body(card: AgentCard) -> JsonObject:
    """The card as JSON, as served: the A2A SDK's rendering, whole numbers in extensions' params as integers."""
    body = agent_card_to_dict(card)
    for extension in body.get("capabilities", {}).get("extensions", []):
        if "params" in extension:
            extension["params"] = _whole(extension["params"])
    return body


def _whole(value: Any) -> Any:
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: _whole(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_whole(v) for v in value]
    return value


WILDCARDS = ("0.0.0.0", "::", "")
RELATIVE_URL = "../"  # from the card (/.well-known/agent-card.json) to the agent: where it was fetched


def advertised_url(host: str, port: int, public_url: str | None) -> str:
    """The URL the card names. Never the request's `Host` (anyone can send any): the configured public
    URL, else the address served on, else (on all interfaces, e.g. in a container behind a published
    port) a URL relative to the card, which clients resolve against where they fetched it."""
    if public_url:
        if not public_url.startswith(("http://", "https://")):
            raise ValueError(f"public URL {public_url!r} is not an http(s) URL: give e.g. http://127.0.0.1:9000/")
        return public_url.rstrip("/") + "/"
    if host in WILDCARDS:
        return RELATIVE_URL
    return f"http://{'[' + host + ']' if ':' in host else host}:{port}/"


def serve(agent: Agent, host: str = "127.0.0.1", port: int = 9000, public_url: str | None = None) -> None:
    """Serve `agent` over A2A on host:port. `public_url` (or $AGENT_ENV_PUBLIC_URL): where clients reach it,
    if not there (behind a proxy or a tunnel); its card names that URL."""
    import os
    from urllib.parse import urlsplit

    import uvicorn
    from starlette.applications import Starlette

    public_url = public_url or os.environ.get("AGENT_ENV_PUBLIC_URL") or None
    routes, handler = a2a_routes(agent, advertised_url(host, port, public_url), extensions=True)

    @contextlib.asynccontextmanager
    async def lifespan(app):
        yield
        await handler.aclose()

    names = [urlsplit(public_url).hostname if public_url else None, None if host in WILDCARDS else host]
    app = HostGuard(
        Starlette(routes=routes, lifespan=lifespan),
        names=[n for n in names if n],
        json_rpc={"/": JSON_RPC, LEGACY_RPC_PATH: JSON_RPC},
        form_paths=(ENDPOINTS[STAGING] + "/",),  # staging/v1 takes a namespace grant's upload: a form
    )
    grace = agent.shutdown_grace_seconds
    uvicorn.run(app, host=host, port=port, log_level="warning", timeout_graceful_shutdown=grace)


def new_message_id() -> str:
    return str(uuid.uuid4())
