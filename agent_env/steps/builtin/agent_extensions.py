"""What runs do with the agent extensions beyond configuring (agents.extension_ops), wherever a card declares them:

- `deploy_agent` sends an agent its `peers` (other deploy_agent steps' agents) through peer-agents/v1, and reads
  its install/v1 declaration into its outputs;
- `register_agent_triggers` (its own module) registers deterministic rules on an agent through triggers/v1;
- steps acting on an agent another step deployed (`register_agent_triggers`, `peer_agents`, `snapshot_agent_state`)
  reach the extension they use through `deployed_extension`;
- `prompt_agent` asks a conversation partner that declares triggers/v1 to decide each of its turns first: a rule
  that fires answers for it (its model is not asked), and one that ends the conversation ends it.

An agent that declares one of these but does not serve it fails the step, naming the extension and the fix.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from agent_env.agents.client import agent_client
from agent_env.agents.extension_ops import (
    INSTALL,
    PEER_AGENTS,
    TRIGGERS,
    DecideRequest,
    Decision,
    InstallDeclaration,
    PeerAgent,
    decide,
    declaration,
    set_peers,
)
from agent_env.agents.extensions import ExtensionClient, ExtensionRefused
from agent_env.gateway_client.wire import JsonObject
from agent_env.steps import StepContext, StepFailed

MAX_PEER_CARD_BYTES = 64 * 1024  # a larger card is not forwarded: the agent can read it at the peer's URL
RUN_USES = (PEER_AGENTS, TRIGGERS, INSTALL)  # beside extensions.CONFIGURING: what deploy_agent's outputs name

CardOf = Callable[[str], Awaitable[Any]]  # a deployed agent's URL -> its A2A card (protobuf), fetched by the caller


async def deployed_extension(
    ctx: StepContext, deployed: JsonObject, uri: str, *, step: str, fix: str, hosted_refusal: str | None = None
) -> ExtensionClient:
    """The extension client of the agent the deploy_agent step `step` deployed (`deployed`: its outputs), whose card
    declares `uri`. StepFailed otherwise, naming the agent, the extension and `fix`; `hosted_refusal`: why an agent
    the gateway hosts cannot take it (None: it can)."""
    name = deployed.get("name") or step
    if not deployed or not deployed.get("url"):
        raise StepFailed(f"step {step!r} deployed no agent reachable over A2A (a trainer plays it, or it failed)")
    hosted = bool(deployed.get("hosted"))
    if hosted and hosted_refusal is not None:
        raise StepFailed(f"agent {name!r} is hosted by the gateway: {hosted_refusal}")
    try:
        client = await agent_client(ctx.settings, deployed["url"], hosted=hosted).extensions()
    except Exception as e:  # noqa: BLE001 - the agent may be restarting: retried
        raise StepFailed(f"agent {name!r} did not answer with its card ({e})", retryable=True) from None
    if not client.has(uri):
        raise StepFailed(f"agent {name!r} declares no {uri} on its card — {fix}")
    return client


async def deploy_extras(
    client: ExtensionClient, name: str, peers: dict[str, JsonObject], card_of: CardOf
) -> JsonObject:
    """deploy_agent's part: the peers sent (when the card declares peer-agents/v1), the install declaration read.
    Returns what the step's outputs add."""
    out: JsonObject = {}
    if peers and not client.has(PEER_AGENTS):
        raise StepFailed(
            f"agent {name!r} was given peers ({', '.join(peers)}), but its card declares no {PEER_AGENTS} — "
            "serve the extension (our SDK: `peer_agents = True`), or remove `peers`"
        )
    if client.has(PEER_AGENTS):
        table = [await _peer(step, deployed, card_of) for step, deployed in peers.items()]
        try:
            await set_peers(client, table)
        except ExtensionRefused as e:
            raise StepFailed(f"agent {name!r}: {e}") from None
        out["peers"] = [p.name for p in table]
    try:
        install = declaration(client, INSTALL, InstallDeclaration)
    except ExtensionRefused as e:
        raise StepFailed(f"agent {name!r}: {e}") from None
    if install is not None:
        out["install"] = install.summary()
    return out


async def _peer(step: str, deployed: JsonObject, card_of: CardOf) -> PeerAgent:
    if not deployed or not deployed.get("url"):
        raise StepFailed(f"peer {step!r} deployed no agent reachable over A2A (a trainer plays it, or it failed)")
    if deployed.get("hosted"):
        raise StepFailed(
            f"peer {step!r} ({deployed['name']}) is hosted by the gateway, which answers only the run — a peer "
            "must answer the agent itself: deploy it as an `a2a` agent (at a URL or in a sandbox)"
        )
    card = _card_json(await card_of(deployed["url"]))
    kept = card if len(json.dumps(card)) <= MAX_PEER_CARD_BYTES else {}
    return PeerAgent(name=deployed["name"], url=deployed["url"], card=kept, description=card["description"] or None)


def _card_json(card: Any) -> JsonObject:
    """What a peer's routing entry tells of its card (an A2A card as the client read it), in the card's JSON names:
    its `url` is where it takes JSON-RPC (the reference's peer tools send there), its skills what it does."""
    interfaces = [i.url for i in card.supported_interfaces]
    return {
        "name": card.name,
        "description": card.description,
        "version": card.version,
        **({"url": interfaces[0]} if interfaces else {}),
        "skills": [{"id": s.id, "name": s.name, "description": s.description} for s in card.skills],
        "defaultInputModes": list(card.default_input_modes),
        "defaultOutputModes": list(card.default_output_modes),
    }


# -- prompt_agent's part --


async def partner_decision(
    client: ExtensionClient, name: str, *, turn: int, said: str, context_id: str
) -> Decision | None:
    """What the partner's triggers say before it is asked (None: it does not declare triggers/v1)."""
    if not client.has(TRIGGERS):
        return None
    request = DecideRequest(turn=turn, solver_message=said[:200_000], context_id=context_id[:256])
    try:
        return await decide(client, request)
    except ExtensionRefused as e:
        raise StepFailed(f"{name}: {e}") from None
