"""Talking to agents over A2A: one turn in, one answer out (with a deadline).

`ask_deployed` is how a run asks an agent it deployed (a prompt's turn, a trigger's instruction); a
worker keeps one `AgentClient` per agent URL (`agent_client`), so an agent's card is fetched once.
"""

from __future__ import annotations

import asyncio
import base64
import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import urljoin

import httpx
from a2a.client import A2ACardResolver, Client, ClientCallContext, ClientConfig, ClientFactory
from a2a.helpers import get_data_parts, get_message_text, new_data_part, new_raw_part, new_text_part, new_url_part
from a2a.types import AgentCard, Message, Part, Role, SendMessageRequest, TaskState
from a2a.utils.constants import AGENT_CARD_WELL_KNOWN_PATH as CARD_WELL_KNOWN_PATH
from a2a.utils.errors import A2AError

from agent_env import telemetry, tls
from agent_env.agents.extensions import ExtensionClient, declared
from agent_env.agents.proxy_wire import PROXY
from agent_env.agents.sdk import KEY, new_message_id
from agent_env.config import url_origin
from agent_env.gateway_client.configured import admin_token, base_url
from agent_env.gateway_client.wire import JsonObject

if TYPE_CHECKING:
    from agent_env.config import Settings
    from agent_env.gateway_client import GatewayClient


class AgentUnreachable(Exception):
    pass


class AgentTimedOut(Exception):
    pass


class AgentReplyInvalid(Exception):
    """The agent answered something that is not a usable A2A reply."""


@dataclass
class AgentReply:
    text: str
    data: dict[str, Any] = field(default_factory=dict)
    failed: bool = False
    state: str = "TASK_STATE_COMPLETED"
    seconds: float = 0.0
    task_id: str = ""  # the A2A task that answered (an agent's trajectory/v1 is read by it)


class OriginBearer(httpx.Auth):
    """`Authorization: Bearer TOKEN` on requests to its origins only (a pool's gateways share a token). Unlike a
    default header, a card or a redirect that names another origin gets nothing: a credential goes only where
    it belongs."""

    def __init__(self, token: str, *origin_urls: str) -> None:
        self.token = token
        self.origins = {origin for url in origin_urls if (origin := url_origin(url)) is not None}

    def auth_flow(self, request: httpx.Request):
        if self.token and url_origin(str(request.url)) in self.origins:
            request.headers["authorization"] = f"Bearer {self.token}"
        else:
            request.headers.pop("authorization", None)
        yield request


class AgentClient:
    """A client of one agent. Reuse it across turns: a fresh HTTP client costs ~16 ms (TLS setup).

    Turns go only to the origin the card was fetched from (the URL given here): a card naming another
    origin is refused, since turns carry role tokens and the client may carry credentials for this one."""

    def __init__(self, url: str, http: httpx.AsyncClient) -> None:
        self.url = url.rstrip("/") + "/"
        self.http = http
        self._client: Client | None = None

    @property
    def card_url(self) -> str:
        return self.url + CARD_WELL_KNOWN_PATH.lstrip("/")

    async def _connect(self) -> Client:
        if self._client is None:
            try:
                card = await A2ACardResolver(self.http, self.url.rstrip("/")).get_agent_card()
            except (A2AError, httpx.HTTPError) as e:
                raise AgentUnreachable(f"no A2A agent answers at {self.url} ({e})") from None
            card = self._same_origin(card)
            try:
                client = ClientFactory(ClientConfig(streaming=False, httpx_client=self.http)).create(card)
            except ValueError as e:  # no interface the client speaks
                raise AgentReplyInvalid(f"the agent at {self.url} has no usable interface in its card ({e})") from None
            self._card, self._client = card, client
        return self._client

    def _same_origin(self, card: AgentCard) -> AgentCard:
        """The card with its interfaces' URLs resolved against the card's own URL (a relative one is a path
        on the agent's origin); only those on the origin the card came from are kept. None left: refused."""
        origin = url_origin(self.url)
        advertised = [i.url for i in card.supported_interfaces]
        kept = []
        for interface in card.supported_interfaces:
            resolved = urljoin(self.card_url, interface.url)
            if url_origin(resolved) == origin:
                copy = type(interface)()
                copy.CopyFrom(interface)
                copy.url = resolved
                kept.append(copy)
        if not kept:
            raise AgentReplyInvalid(
                f"the agent at {self.url} answers, but its card advertises {', '.join(advertised) or 'no URL'}: "
                f"another origin than {origin}, refused (turns and credentials go only where the card was fetched) "
                "— serve the card with the URL it is reached at (agent_env.agents.sdk.serve(public_url=...) or "
                "$AGENT_ENV_PUBLIC_URL), or give the agent's URL as its card names it"
            )
        del card.supported_interfaces[:]
        card.supported_interfaces.extend(kept)
        return card

    async def card(self) -> AgentCard:
        """The agent's card (fetched once): AgentUnreachable if nothing answers as an A2A agent."""
        await self._connect()
        return self._card

    async def ask(
        self,
        prompt: str,
        context: dict[str, Any],
        *,
        context_id: str,
        deadline_s: float,
        message_id: str | None = None,
        attachments: Sequence[JsonObject] = (),
    ) -> AgentReply:
        """Send one turn; wait at most `deadline_s` for the answer. Resend a turn with its first message id.
        `attachments`: file and data parts beside the text (the framework's JSON shape, bounded by the step)."""
        client = await self._connect()
        # A proxy (proxy/v1) passes text parts only on to its driver: its env comes through mcp-config/v1.
        plain = PROXY in declared(self._card)
        message = Message(
            role=Role.ROLE_USER,
            message_id=message_id or new_message_id(),
            context_id=context_id,
            parts=[new_text_part(prompt)]
            + ([] if plain else [*map(a2a_part, attachments), new_data_part({KEY: context})]),
        )
        started = time.perf_counter()
        try:
            async with asyncio.timeout(deadline_s):
                task = None
                async for response in client.send_message(
                    SendMessageRequest(message=message), context=ClientCallContext(timeout=deadline_s + 5)
                ):
                    task = response.task if response.HasField("task") else task
        except TimeoutError:
            raise AgentTimedOut(f"the agent at {self.url} did not answer within {deadline_s:g}s") from None
        except A2AError as e:
            if "timeout" in type(e).__name__.lower():
                raise AgentTimedOut(f"the agent at {self.url} did not answer within {deadline_s:g}s") from None
            if _transient(e.__cause__):  # the connection broke or the server was restarting: ask again
                raise AgentUnreachable(f"the agent at {self.url} could not be reached ({e})") from None
            raise AgentReplyInvalid(f"the agent at {self.url} failed the turn: {getattr(e, 'message', e)}") from None
        except httpx.HTTPError as e:
            raise AgentUnreachable(f"the agent at {self.url} could not be reached ({e})") from None
        except (ValueError, TypeError, KeyError) as e:  # the SDK's reading of a reply that is not A2A
            raise AgentReplyInvalid(
                f"the agent at {self.url} answered something that is not an A2A reply: {e}"
            ) from None
        if task is None or not task.status.HasField("message"):
            raise AgentReplyInvalid(f"the agent at {self.url} answered without a message")
        state = TaskState.Name(task.status.state)
        reply = task.status.message
        data: Any = next((d[KEY] for d in get_data_parts(reply.parts) if isinstance(d, dict) and KEY in d), {})
        return AgentReply(
            text=get_message_text(reply),
            data=data or {},
            failed=state != "TASK_STATE_COMPLETED",
            state=state,
            seconds=time.perf_counter() - started,
            task_id=task.id,
        )

    async def extensions(self) -> ExtensionClient:
        """The agent's `urn:agentenv:*` extension operations, as its card declares them."""
        return ExtensionClient(self.http, self.url, await self.card())


def a2a_part(part: JsonObject) -> Part:
    """A file or data part of the framework's JSON shape (`{"kind": "file", "file": {"uri"|"bytes", ...}}`)."""
    if part["kind"] == "data":
        return new_data_part(part["data"])
    file = part["file"]
    name, media_type = file.get("name"), file.get("mimeType")
    if file.get("uri"):
        return new_url_part(file["uri"], media_type, name)
    return new_raw_part(base64.b64decode(file["bytes"]), media_type, name)


def _transient(cause: BaseException | None) -> bool:
    """A transport failure or a 5xx answer: the turn may not have been answered, and resending it (with the
    same message id, which hosted agents answer once) is safe."""
    if isinstance(cause, httpx.HTTPStatusError):
        return cause.response.status_code >= 500
    return isinstance(cause, httpx.RequestError)


# -- the worker's clients, and asking a deployed agent --

# One A2A client per agent URL (its card cached), the most recently used ones: a hosted agent's URL names its run, so
# a long-lived worker would otherwise keep one per run it ever served. One dropped is made again when asked for.
MAX_CLIENTS = 256
_CLIENTS: OrderedDict[tuple[str, bool], AgentClient] = OrderedDict()
_HTTP: dict[tuple[bool, tuple[str, ...]], httpx.AsyncClient] = {}


def agent_client(settings: Settings, url: str, *, hosted: bool) -> AgentClient:
    """Hosted agents take the gateway's admin token, on requests to the gateway's origin only (never as a
    default header: a card or redirect naming another origin gets none); your own agents get no credentials
    of ours. Redirects are not followed."""
    key = (url, hosted)
    client = _CLIENTS.get(key)
    if client is None:
        client = _CLIENTS[key] = AgentClient(url, _http(settings, hosted))
        if len(_CLIENTS) > MAX_CLIENTS:
            _CLIENTS.popitem(last=False)
    else:
        _CLIENTS.move_to_end(key)
    return client


def forget_agent(url: str, *, hosted: bool = False) -> None:
    """Drop the client (and the card it holds) for `url`: the next `agent_client` fetches the card again."""
    _CLIENTS.pop((url, hosted), None)


def _http(settings: Settings, hosted: bool) -> httpx.AsyncClient:
    gateways = tuple(settings.gateway.urls() or [base_url(settings)]) if hosted else ()
    http = _HTTP.get((hosted, gateways))
    if http is None:
        auth = OriginBearer(admin_token(settings), *gateways) if hosted else None
        http = _HTTP[(hosted, gateways)] = httpx.AsyncClient(
            auth=auth,
            follow_redirects=False,
            verify=tls.context(),
            timeout=httpx.Timeout(30.0, read=None),
            event_hooks=telemetry.HTTP_HOOKS,  # a turn continues the run's trace (traceparent: no credential)
        )
    return http


async def ask_deployed(
    settings: Settings,
    gateway: GatewayClient,
    who: dict[str, Any],
    prompt: str,
    /,  # (so a turn's context may hold `settings`: a prompt's, not these)
    *,
    run_id: str,
    turn: int,
    deadline_s: float,
    context_id: str,
    message_id: str,
    attachments: Sequence[JsonObject] = (),
    prompt_settings: JsonObject | None = None,
    **context: Any,
) -> AgentReply:
    """One turn of an agent a run deployed (`who`: its deploy_agent step's outputs), answered once per
    `message_id`. The turn tells it who it is and its deadline (and `context`: a system prompt, the
    conversation, ...); in an environment, also where the tools are and its role token, minted now (tokens
    never enter run history). Raises AgentUnreachable, AgentReplyInvalid or AgentTimedOut."""
    context = {
        "run_id": run_id,
        "agent": who["name"],
        "role": who.get("role"),
        "deadline_s": deadline_s,
        "turn": turn,
        **context,
        **({"settings": prompt_settings} if prompt_settings else {}),  # the prompt's own (Turn.settings)
    }
    if who.get("env"):
        context.update(mcp_url=who["mcp_url"], token=await gateway.token(who["env"], who["name"]))

    with telemetry.span(f"agent turn {who['name']}", agent=who["name"], turn=turn, hosted=bool(who["hosted"])):
        return await agent_client(settings, who["url"], hosted=who["hosted"]).ask(
            prompt,
            context,
            context_id=context_id,
            message_id=message_id,
            deadline_s=deadline_s,
            attachments=attachments,
        )
