"""The extensions an agent written with our SDK enables (`Agent.peer_agents`, `.triggers`, `.attribution_probe`,
`.install`), declared on its card in the reference framework's params shape and served at its paths:

- peer-agents/v1: the run sets the agents this one may delegate to; each turn sees them as `turn.peers` (name,
  URL, description) and reaches one with `agent_env.agents.client.AgentClient(url, http).ask(...)`.
- triggers/v1: the SDK registers the run's rules and decides on them (`agent_triggers.TriggerEngine`).
- attribution-probe/v1: what `turn.attribution()` last handed the agent's model call, with when.
- install/v1: the declaration only (nothing is served).

Bodies are read within a limit and validated by the protocol's shapes; a bad one is a 400 naming the field.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, NotRequired, TypedDict

from pydantic import BaseModel, ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from agent_env.agents.agent_triggers import AgentTrigger, TriggerConflict, TriggerEngine
from agent_env.agents.extension_ops import (
    ATTRIBUTION_PROBE,
    ENDPOINTS,
    INSTALL,
    PEER_AGENTS,
    TRIGGERS,
    AttributionSeen,
    DecideRequest,
    InstallDeclaration,
    PeerAgent,
    PeersSet,
    TriggersRegister,
)
from agent_env.gateway_client.wire import JsonObject

MAX_BODY_BYTES = 1_000_000


class PeerListed(TypedDict):
    """A peer as a turn sees it (`turn.peers`) and peer-agents/v1 list answers it."""

    name: str
    url: str
    description: NotRequired[str]


@dataclass
class Enabled:
    """Which of these an agent enables (read from its class attributes)."""

    peer_agents: bool = False
    triggers: bool = False
    attribution_probe: bool = False
    install: InstallDeclaration | None = None

    @classmethod
    def of(cls, agent: object) -> Enabled:
        install = getattr(agent, "install", None)
        return cls(
            peer_agents=bool(getattr(agent, "peer_agents", False)),
            triggers=bool(getattr(agent, "triggers", False)),
            attribution_probe=bool(getattr(agent, "attribution_probe", False)),
            install=InstallDeclaration.model_validate(install) if install is not None else None,
        )


def _fields(model: type[BaseModel]) -> JsonObject:
    required = [n for n, f in model.model_fields.items() if f.is_required()]
    optional = [n for n, f in model.model_fields.items() if not f.is_required()]
    return {"required": required, **({"optional": optional} if optional else {})}


def declarations(enabled: Enabled) -> list[Any]:
    """The card's `capabilities.extensions` entries for what is enabled, as the reference renders them."""
    from a2a.types import AgentExtension  # the A2A SDK's types: loaded with the card

    out = []
    if enabled.peer_agents:
        methods = {
            "set": {"method": "POST", "request": _fields(PeersSet)},
            "list": {"method": "GET", "response": {"required": ["peers"]}},
        }
        out.append(
            (PEER_AGENTS, "Configure peer A2A agents available for delegation.", ENDPOINTS[PEER_AGENTS], methods)
        )
    if enabled.triggers:
        methods = {
            "register": {"method": "POST", "request": _fields(TriggersRegister)},
            "decide": {
                "method": "POST",
                "endpoint": ENDPOINTS[TRIGGERS] + "/decide",
                "request": _fields(DecideRequest),
                "response": {"required": ["parts", "done", "fired"]},
            },
            "state": {"method": "GET", "response": {"required": ["firing_log"]}},
        }
        out.append((TRIGGERS, "Register triggers and decide deterministic responses.", ENDPOINTS[TRIGGERS], methods))
    if enabled.attribution_probe:
        methods = {"probe": {"method": "POST", "response": _fields(AttributionSeen)}}
        out.append(
            (
                ATTRIBUTION_PROBE,
                "Report the attribution dimensions last sent with a model request.",
                ENDPOINTS[ATTRIBUTION_PROBE],
                methods,
            )
        )
    extensions = [
        AgentExtension(uri=uri, description=text, params={"endpoint": endpoint, "methods": methods})
        for uri, text, endpoint, methods in out
    ]
    if enabled.install is not None:
        extensions.append(
            AgentExtension(
                uri=INSTALL,
                description="Declare commands for installing the agent into an existing target.",
                params=enabled.install.model_dump(mode="json", exclude_none=True, exclude_defaults=True),
            )
        )
    return extensions


@dataclass
class ServedExtensions:
    """What the run set through them, kept for the agent's turns."""

    enabled: Enabled
    peers: list[PeerAgent] = field(default_factory=list)
    engine: TriggerEngine = field(default_factory=TriggerEngine)
    attribution: AttributionSeen | None = None

    def peer_listing(self) -> list[PeerListed]:
        listed = []
        for p in self.peers:
            peer = PeerListed(name=p.name, url=p.url)
            if p.description is not None:
                peer["description"] = p.description
            listed.append(peer)
        return listed

    def saw_attribution(self, attribution: dict[str, str]) -> None:
        self.attribution = AttributionSeen(
            last_seen_attribution=attribution, last_seen_at_utc=datetime.now(UTC).isoformat()
        )

    def routes(self) -> list[Route]:
        routes = []
        if self.enabled.peer_agents:

            async def peers_set(request: Request) -> JSONResponse:
                wanted = PeersSet.model_validate(await _body(request))
                names = [p.name for p in wanted.peers]
                if len(set(names)) != len(names):
                    raise ValueError("peer names must be unique")
                self.peers = list(wanted.peers)
                return JSONResponse({"status": "updated", "peers": len(names)})

            async def peers_list(request: Request) -> JSONResponse:
                return JSONResponse({"peers": self.peer_listing()})

            routes += [
                Route(ENDPOINTS[PEER_AGENTS], _answering(peers_set), methods=["POST"]),
                Route(ENDPOINTS[PEER_AGENTS], _answering(peers_list), methods=["GET"]),
            ]
        if self.enabled.triggers:

            async def register(request: Request) -> JSONResponse:
                body = TriggersRegister.model_validate(await _body(request))
                rules = [AgentTrigger.model_validate(t) for t in body.triggers]
                added = self.engine.register(rules)
                return JSONResponse({"ok": True, "added": added, "all": list(self.engine.rules)})

            async def decide(request: Request) -> JSONResponse:
                return JSONResponse(self.engine.decide(DecideRequest.model_validate(await _body(request))))

            async def state(request: Request) -> JSONResponse:
                return JSONResponse(self.engine.state())

            routes += [
                Route(ENDPOINTS[TRIGGERS], _answering(register), methods=["POST"]),
                Route(ENDPOINTS[TRIGGERS] + "/decide", _answering(decide), methods=["POST"]),
                Route(ENDPOINTS[TRIGGERS], _answering(state), methods=["GET"]),
            ]
        if self.enabled.attribution_probe:

            async def probe(request: Request) -> JSONResponse:
                seen = self.attribution or AttributionSeen(last_seen_attribution={})
                return JSONResponse(seen.model_dump(mode="json"))

            routes.append(Route(ENDPOINTS[ATTRIBUTION_PROBE], _answering(probe), methods=["POST"]))
        return routes


async def _body(request: Request) -> JsonObject:
    raw = bytearray()
    async for chunk in request.stream():  # within the limit, whatever the body declares
        raw += chunk
        if len(raw) > MAX_BODY_BYTES:
            raise ValueError(f"the body is over {MAX_BODY_BYTES} bytes")
    body = json.loads(raw or b"{}")
    if not isinstance(body, dict):
        raise ValueError("the body must be a JSON object")
    return body


def _answering(handler: Callable[[Request], Awaitable[JSONResponse]]) -> Callable[[Request], Awaitable[JSONResponse]]:
    """A bad body is a 400 naming what is wrong (as the reference framework answers); a rule taken by another, 409."""

    async def route(request: Request) -> JSONResponse:
        try:
            return await handler(request)
        except TriggerConflict as e:
            return JSONResponse({"detail": str(e)}, status_code=409)
        except (ValueError, ValidationError) as e:  # pydantic's ValidationError is a ValueError
            return JSONResponse({"detail": str(e)[:2000]}, status_code=400)

    return route
