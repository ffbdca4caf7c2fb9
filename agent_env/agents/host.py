"""The agent host: the gateway serves the built-in agents (scripted, llm, persona, human) over A2A.

Each hosted agent lives at `/agents/{id}/` (its card at `/agents/{id}/.well-known/agent-card.json`),
beside the environments it works in. Runs deploy agents here (`deploy_agent`) and talk to them with a
real A2A client, exactly as they talk to an agent of your own.

Turns are answered once: a turn resent with the same message id (a step retried after its worker
died) gets the answer of the first, awaited if still in progress, read from the store if finished.
So an agent's work is never done twice and survives the worker; the gateway keeps it.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
from typing import TYPE_CHECKING, Any, cast

from pydantic import BaseModel, Field

from agent_env.agents import reviews
from agent_env.agents.models import Endpoints
from agent_env.agents.reviews import HumanAnswer
from agent_env.config import ModelSettings, Settings
from agent_env.spec.agent import AgentRecord, InlineSkill
from agent_env.spec.times import utc_now_iso
from agent_env.stores import in_thread, open_secrets
from agent_env.stores.base import Document

if TYPE_CHECKING:
    from agent_env.agents.sdk import Turn

AGENTS = "hosted_agents"
TURNS = "agent_turns"  # answers of finished turns, by agent and message id
HUMAN = "human_turns"  # turns waiting for (or answered by) a person
CARD_PATH = "/.well-known/agent-card.json"
GRACE_S = 5.0  # past the framework's deadline, a turn is abandoned (the caller stopped waiting)
MAX_SKILLS = 32  # skills per hosted agent: each SKILL.md (at most 100 kB) goes into its model's system prompt


class HostedAgentSpec(BaseModel):
    """What a run deploys: the agent's record and the model endpoints it may use (keys by reference)."""

    id: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,199}$")
    run_id: str | None = None
    record: AgentRecord
    models: dict[str, ModelSettings] = Field(default_factory=dict)
    skills: list[InlineSkill] = Field(
        default_factory=list,
        max_length=MAX_SKILLS,
        description="its skills' SKILL.md texts (read from the object store by deploy_agent): llm and persona "
        "agents' models get them in their system prompt; scripted and human agents do without",
    )


class DeployRequest(HostedAgentSpec):
    keys: dict[str, str] = Field(
        default_factory=dict, description="resolved API keys; kept in memory only", exclude=True
    )


class HumanInbox:
    """Turns for a person, in the gateway's store: `agent-env agents pending` lists, `answer` replies."""

    def __init__(self, store, agent_id: str) -> None:
        self.store, self.agent_id = store, agent_id

    def ask(self, name: str, turn: Turn) -> str:
        key = f"{self.agent_id}/{turn.message_id}"
        if self.store.get(HUMAN, key) is None:
            self.store.put(
                HUMAN,
                key,
                {
                    "id": key,
                    "agent_id": self.agent_id,
                    "agent": name,
                    "prompt": turn.prompt,
                    "conversation": turn.conversation,
                    "mcp_url": turn.mcp_url,
                    "role": turn.role,
                    "asked_at": utc_now_iso(),
                    "answer": None,
                    "answered_at": None,
                    "state": "waiting",
                },
            )
        return key

    def answer(self, key: str) -> str | None:
        doc = self.store.get(HUMAN, key)
        return doc["answer"] if doc else None

    def expire(self, key: str) -> None:
        doc = self.store.get(HUMAN, key)
        if doc and doc["state"] == "waiting":
            self.store.put(HUMAN, key, {**doc, "state": "expired"})


class AgentHost:
    """`public_url`: the gateway's configured base URL (`gateway_client.configured.public_base`); hosted agents'
    cards name it. None (an in-process gateway without settings): the address of the socket a request came in on."""

    def __init__(self, store, public_url: str | None = None) -> None:
        self.store = store
        self.public_url = public_url.rstrip("/") if public_url else None
        self.turns: dict[str, asyncio.Future] = {}
        self._keys: dict[str, dict[str, str]] = {}  # agent id -> purpose -> API key (memory only)
        self._apps: dict[str, tuple[Any, Any]] = {}  # agent id -> (ASGI app, A2A request handler)
        self._closing: set[asyncio.Task] = set()  # handlers of redeployed agents being closed

    # -- records --

    def put(self, request: DeployRequest) -> HostedAgentSpec:
        """Deploy (or redeploy) an agent; idempotent. A changed record takes effect on its next turn."""
        spec = HostedAgentSpec.model_validate(request.model_dump())
        if request.record.type in ("a2a", "cli", "trainer"):
            raise ValueError(
                f"agents of type {request.record.type!r} are not hosted; the host runs scripted, llm, "
                "persona and human agents"
            )
        self.store.put(AGENTS, spec.id, spec.model_dump(mode="json"))
        if request.keys:
            self._keys[spec.id] = dict(request.keys)
        if (old := self._apps.pop(spec.id, None)) is not None:  # rebuilt on its next request; close the old one
            task = asyncio.get_running_loop().create_task(old[1].aclose())
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)
        return spec

    def get(self, agent_id: str) -> HostedAgentSpec | None:
        doc = self.store.get(AGENTS, agent_id)
        return HostedAgentSpec.model_validate(doc) if doc else None

    def list(self) -> list[dict[str, Any]]:
        return self.store.query(AGENTS)

    async def delete(self, agent_id: str) -> bool:
        """Forget the agent and close its A2A handler (its tasks in memory); finished turns stay stored."""
        app = self._apps.pop(agent_id, None)
        if app is not None:
            await app[1].aclose()
        self._keys.pop(agent_id, None)
        return self.store.delete(AGENTS, agent_id)

    async def close(self) -> None:
        for _, handler in self._apps.values():
            await handler.aclose()
        self._apps.clear()

    # -- people --

    def pending(self) -> builtins.list[dict[str, Any]]:
        return [d for d in self.store.query(HUMAN) if d["state"] == "waiting"]

    def reply(self, turn_id: str, answer: HumanAnswer) -> Document | None:
        """The turn answered (as it stands if it is not waiting); ValueError: a verdict for an agent's turn."""
        doc = self.turn(turn_id)
        if doc is None or doc["state"] != "waiting":
            return doc
        doc = reviews.decided(doc, answer)
        self.store.put(HUMAN, turn_id, doc)
        return doc

    def turn(self, turn_id: str) -> Document | None:
        doc = self.store.get(HUMAN, turn_id)
        return reviews.current(self.store, HUMAN, doc) if doc is not None else None

    async def decision(self, turn_id: str, wait_s: float) -> Document | None:
        """The turn once it is no longer waiting, or as it stands after `wait_s` (a long poll: the review step
        asks again, so nothing waits longer than one request)."""
        end = asyncio.get_running_loop().time() + min(max(wait_s, 0.0), reviews.MAX_WAIT_S)
        while (doc := self.turn(turn_id)) is not None and doc["state"] == "waiting":
            if (left := end - asyncio.get_running_loop().time()) <= 0:
                break
            await asyncio.sleep(min(0.2, left))
        return doc

    def open_review(self, request: reviews.ReviewRequest) -> Document:
        return reviews.open_review(self.store, HUMAN, request)

    def end_reviews(self, run_id: str) -> builtins.list[str]:
        return reviews.expire_run(self.store, HUMAN, run_id)

    # -- serving --

    def _build(self, spec: HostedAgentSpec, url: str):
        from agent_env.agents.builtin import build_agent

        keys: dict[str, str | None] = dict(self._keys.get(spec.id, {}))
        missing = [p for p, config in spec.models.items() if p not in keys and config.api_key]
        if missing and self.secrets_from is not None:  # a restarted gateway looks keys up again
            with contextlib.suppress(Exception):
                secrets = open_secrets(self.secrets_from)
                try:
                    for purpose in missing:
                        with contextlib.suppress(Exception):
                            keys[purpose] = secrets.resolve(cast(str, spec.models[purpose].api_key))
                finally:
                    secrets.close()
        inner = build_agent(spec.record, Endpoints(spec.models, keys), HumanInbox(self.store, spec.id), spec.skills)
        from agent_env.agents.once import OnceAgent
        from agent_env.agents.sdk import a2a_routes  # (the A2A SDK: loaded when the first hosted agent is served)

        routes, handler = a2a_routes(OnceAgent(self, spec.id, inner), url)
        from starlette.applications import Starlette

        return Starlette(routes=routes), handler

    secrets_from: Settings | None = None  # the settings whose secret store the host reads keys from, if any

    async def __call__(self, scope, receive, send) -> None:
        """ASGI for everything under /agents/{id}/ (mounted by the gateway)."""
        agent_id = scope["path_params"]["agent_id"]
        entry = self._apps.get(agent_id)
        if entry is None:
            spec = self.get(agent_id)
            if spec is None:
                from starlette.responses import JSONResponse

                await JSONResponse({"error": f"no agent {agent_id!r} is hosted here"}, status_code=404)(
                    scope, receive, send
                )
                return
            # Built on the stores' threads: a restarted gateway looks the keys up in the secret store again.
            built = await in_thread(self._build, spec, self.card_url(agent_id, scope))
            entry = self._apps.setdefault(agent_id, built)  # (of two first requests racing, one build is kept)
        await entry[0](scope, receive, send)

    def card_url(self, agent_id: str, scope) -> str:
        """Where the card says the agent is: configuration, never the request's `Host` (a forged one would
        send the worker's next turn, and the credentials on it, elsewhere)."""
        return f"{self.public_url or _socket_base(scope)}/agents/{agent_id}/"


def _socket_base(scope) -> str:
    """The local address the connection was accepted on (the server's, not a header the client wrote)."""
    host, port = scope.get("server") or ("127.0.0.1", 80)
    host = f"[{host}]" if ":" in host else host
    return f"{'https' if scope.get('scheme') == 'https' else 'http'}://{host}:{port}"
