"""The open protocol's other agent extensions (beside configuring and trajectories, in `extensions`): their URIs,
where their operations are, the request and answer shapes as the reference (`agentenv_protocol.a2a_agent`) defines
them, and a run's calls to them.

- `peer-agents/v1`: set (POST) and list (GET) the A2A agents this one may delegate to.
- `triggers/v1` (agent side): register (POST) deterministic rules, decide (POST, its own path `/ext/triggers/decide`)
  what they say on a turn, read their state (GET).
- `attribution-probe/v1`: probe (POST) which attribution the agent last sent with a model request.
- `install/v1`: no endpoint, a declaration: the commands that install the agent into an existing target.
- `staging/v1`: an object store on the agent's own server, below its endpoint (object transfers use it).
- `tools/v1`, `proxy/v1`: URIs the framework knows; neither has a definition this side serves or calls yet.

An operation's path, as the framework reads a card: the method's own `endpoint` wins; one the protocol serves at
the extension's endpoint uses the card's `endpoint`; one it serves elsewhere (decide) uses the protocol's path.
The URIs and the protocol's paths are `extension_table`'s. Every call goes to the agent's own origin only (`ExtensionClient.call`), and answers are read within a limit.
"""

from __future__ import annotations

from typing import Any, Literal

import httpx
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agent_env.agents.extension_table import (  # noqa: F401 - the URIs: named through here too
    ATTRIBUTION_PROBE,
    ENDPOINTS,
    INSTALL,
    OPERATIONS,
    PEER_AGENTS,
    PROXY,
    STAGING,
    TOOLS,
    TRIGGERS,
)
from agent_env.agents.extensions import ExtensionClient, ExtensionRefused
from agent_env.gateway_client.wire import JsonObject

MAX_PEERS = 64
MAX_TRIGGERS = 256
MAX_SOLVER_MESSAGE = 200_000  # characters of the agent's message a decision reads (the reference's limit)
MAX_SAID = 8_192  # characters one `say` action says


class _Wire(BaseModel):
    model_config = ConfigDict(extra="forbid")


# -- peer-agents/v1 --


class PeerAgent(_Wire):
    """One agent in the routing table: where it answers A2A, its card as the run read it."""

    name: str = Field(min_length=1, max_length=128)
    url: str = Field(pattern=r"^https?://", max_length=2048)
    card: JsonObject = Field(default_factory=dict)
    description: str | None = Field(None, max_length=2000)


class PeersSet(_Wire):
    peers: list[PeerAgent] = Field(max_length=MAX_PEERS)


# -- triggers/v1 (agent side) --


class TextPart(_Wire):
    kind: Literal["text"] = "text"
    text: str


class TriggersRegister(_Wire):
    triggers: list[JsonObject] = Field(min_length=1, max_length=MAX_TRIGGERS)


class DecideRequest(_Wire):
    turn: int = Field(ge=1)
    solver_message: str = Field("", max_length=MAX_SOLVER_MESSAGE)
    context_id: str = Field("default", min_length=1, max_length=256)
    env_triggers: dict[str, dict[str, str]] | None = None


class Decision(BaseModel):
    """What the agent's triggers say on a turn: its text parts, whether the conversation is over, which fired."""

    model_config = ConfigDict(extra="ignore")  # an agent may say more; these three are the contract

    parts: list[TextPart | JsonObject] = Field(max_length=64)
    done: bool
    fired: list[str] = Field(max_length=MAX_TRIGGERS)

    def text(self) -> str:
        texts = [p.text if isinstance(p, TextPart) else str(p.get("text", "")) for p in self.parts]
        return "\n".join(t for t in texts if t)


# -- attribution-probe/v1 --


class AttributionSeen(_Wire):
    last_seen_attribution: dict[str, str]
    last_seen_at_utc: str | None = None


# -- install/v1 and staging/v1: declarations on the card --


class InstallDeclaration(BaseModel):
    """install/v1's params: commands (`{name}` placeholders, each named in `required_params`) that install the agent
    into a container (`install_commands`) or onto a sandbox's host (`install_commands_host`), and the port it then
    serves A2A on. Other keys are the agent's (`workdir_host`, `user_host` ...)."""

    model_config = ConfigDict(extra="allow")

    install_commands: list[str] | None = Field(None, max_length=256)
    install_commands_host: list[str] | None = Field(None, max_length=256)
    required_params: list[str] = Field(default_factory=list, max_length=64)
    required_params_host: list[str] = Field(default_factory=list, max_length=64)
    a2a_port: int | None = Field(None, ge=1, le=65535)

    def summary(self) -> JsonObject:
        """What a run records of it (never the commands' text: they are the agent's, and may be long)."""
        return {
            "container": len(self.install_commands or []),
            "host": len(self.install_commands_host or []),
            "a2a_port": self.a2a_port,
            "required_params": sorted({*self.required_params, *self.required_params_host}),
        }


class StagingDeclaration(BaseModel):
    model_config = ConfigDict(extra="allow")

    endpoint: str = Field(ENDPOINTS[STAGING], pattern=r"^/")
    max_bytes: int = Field(ge=0)

    def path(self, staging_id: str, key: str) -> str:
        """Where an object is staged: below the endpoint, under an id long enough not to be guessed."""
        if len(staging_id) < 22 or "/" in staging_id:
            raise ValueError("a staging id is one path segment of at least 22 characters (about 128 bits)")
        if not key or key.startswith("/") or ".." in key.split("/"):
            raise ValueError(f"{key!r}: a staged key is a relative path without '..'")
        return f"{self.endpoint.rstrip('/')}/{staging_id}/{key}"


class DeclarationInvalid(ExtensionRefused):
    """A card's declaration (install/v1, staging/v1) is not what the protocol defines."""


def declaration(client: ExtensionClient, uri: str, model: type[InstallDeclaration] | type[StagingDeclaration]) -> Any:
    """A declaration-only extension's params as `model` (None when the card does not declare it)."""
    if not client.has(uri):
        return None
    try:
        return model.model_validate(client.extensions[uri])
    except ValidationError as e:
        raise DeclarationInvalid(
            f"the agent at {client.agent_url} declares {uri} with params the protocol does not define: "
            f"{e.errors()[0]['loc']}: {e.errors()[0]['msg']} — fix the card's params"
        ) from None


# -- a run's calls --


def operation_path(params: JsonObject, uri: str, name: str) -> tuple[str, str]:
    """(HTTP method, path) of one operation as the card declares it, by the framework's rule (module doc)."""
    method, protocol_path = OPERATIONS[(uri, name)]
    spec = (params.get("methods") or {}).get(name) or {}
    if spec.get("endpoint"):
        return str(spec.get("method", method)).upper(), spec["endpoint"]
    if protocol_path != ENDPOINTS[uri]:
        return str(spec.get("method", method)).upper(), protocol_path
    return str(spec.get("method", method)).upper(), params.get("endpoint") or protocol_path


async def call(client: ExtensionClient, uri: str, name: str, body: BaseModel | None = None) -> Any:
    """Call one operation the agent's card declares; its JSON answer. ExtensionRefused naming the extension and
    the fix when the agent does not serve what it declares, or answers something else."""
    method, path = operation_path(client.extensions[uri], uri, name)
    try:
        response = await client.call(uri, name, method, body, path=path)
    except httpx.HTTPError as e:
        raise ExtensionRefused(f"the agent at {client.agent_url} did not answer {uri} {name} ({e})") from None
    if response.status_code in (404, 405, 501):
        raise ExtensionRefused(
            f"the agent at {client.agent_url} declares {uri} on its card but does not serve its {name!r} operation "
            f"({method} {path} answered {response.status_code}) — serve the extension at the path the card names, "
            "or remove it from the card"
        )
    if not response.is_success:
        raise ExtensionRefused(
            f"the agent at {client.agent_url} refused {uri} {name} ({response.status_code}): {response.text[:500]}"
        )
    try:
        return response.json()
    except ValueError:
        raise ExtensionRefused(
            f"the agent at {client.agent_url} answered {uri} {name} with something that is not JSON: "
            f"{response.text[:200]!r}"
        ) from None


async def set_peers(client: ExtensionClient, peers: list[PeerAgent]) -> None:
    await call(client, PEER_AGENTS, "set", PeersSet(peers=peers))


async def register_triggers(client: ExtensionClient, triggers: list[JsonObject]) -> list[str]:
    """The ids the agent registered."""
    answer = await call(client, TRIGGERS, "register", TriggersRegister(triggers=triggers))
    added = answer.get("added") if isinstance(answer, dict) else None
    return [str(a) for a in added][:MAX_TRIGGERS] if isinstance(added, list) else []


async def decide(client: ExtensionClient, request: DecideRequest) -> Decision:
    answer = await call(client, TRIGGERS, "decide", request)
    try:
        return Decision.model_validate(answer)
    except ValidationError as e:
        raise ExtensionRefused(
            f"the agent at {client.agent_url} answered {TRIGGERS} decide without the protocol's shape "
            f"(parts, done, fired): {e.errors()[0]['loc']}: {e.errors()[0]['msg']}"
        ) from None


async def probe_attribution(client: ExtensionClient) -> AttributionSeen:
    answer = await call(client, ATTRIBUTION_PROBE, "probe")
    try:
        return AttributionSeen.model_validate(answer)
    except ValidationError as e:
        raise ExtensionRefused(
            f"the agent at {client.agent_url} answered {ATTRIBUTION_PROBE} probe without last_seen_attribution "
            f"(an object of strings): {e.errors()[0]['msg']}"
        ) from None
