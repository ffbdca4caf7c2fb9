"""The driver's end of `urn:agentenv:proxy/v1`: claim a proxy agent, read its open turns, list a turn's tools, have
the proxy run actions where the agent works, record the model's calls, reply.

    driver = ProxyDriver(http, agent_url, await AgentClient(agent_url, http).card())
    await driver.claim()
    turns = await driver.next(after=0)
    for turn in turns.turns:
        tools = await driver.tools(turn.task_id)
        result = await driver.act(turn.task_id, ProxyBashAction(kind="bash", command="ls"))
        await driver.reply(turn.task_id, text="done")

Its token (random, made here) goes only to the agent's own origin: operations a card names elsewhere are refused.
Answers are read within a size limit and leniently (a newer proxy may add fields). A call that did not reach the
proxy is tried again, except `record`'s, which is not idempotent; `act` carries an action id, so its retry returns
the action already started.
"""

from __future__ import annotations

import asyncio
import json
import secrets
from typing import Any, TypeVar
from urllib.parse import urljoin

import httpx
from pydantic import BaseModel

from agent_env.agents.extensions import declared, operation
from agent_env.agents.proxy_wire import (
    OPERATIONS,
    PROXY,
    ProxyActionState,
    ProxyBashAction,
    ProxyBashResult,
    ProxyToolAction,
    ProxyToolList,
    ProxyToolListed,
    ProxyToolResult,
    ProxyTurns,
    path,
)
from agent_env.config import url_origin
from agent_env.gateway_client.wire import JsonObject

MAX_ANSWER_BYTES = 16_000_000  # a command's two streams, each clipped by the proxy, JSON-escaped
CALL_SECONDS = 90.0  # above the proxy's long polls (25 s by the protocol's reference)
LISTING_SECONDS = 900.0  # a turn's tools: every env server listed by the proxy
ATTEMPTS = 3
RETRY_SECONDS = 1.0
_Answer = TypeVar("_Answer", bound=BaseModel)


class ProxyRefused(Exception):
    """The proxy refused a call: its status and why (401: a wrong token; 404: no such open turn or action)."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(f"the proxy refused ({status}): {detail}")
        self.status, self.detail = status, detail


def _extensions(card: Any) -> dict[str, JsonObject]:
    """The card's extensions by URI with their params: a protobuf card (`AgentClient.card()`) or its JSON."""
    if isinstance(card, dict):
        listed = (card.get("capabilities") or {}).get("extensions") or []
        return {e["uri"]: e.get("params") or {} for e in listed if isinstance(e, dict) and "uri" in e}
    return declared(card)


class ProxyDriver:
    def __init__(self, http: httpx.AsyncClient, agent_url: str, card: Any, *, token: str | None = None) -> None:
        params = _extensions(card).get(PROXY)
        if params is None:
            raise ValueError(f"the agent at {agent_url} is no proxy: its card declares no {PROXY}")
        self.http, self.agent_url = http, agent_url
        self.token = token or secrets.token_urlsafe(24)
        self.endpoints: dict[str, str] = {}
        for name in OPERATIONS:
            url = urljoin(agent_url, operation(params, name, "POST", path(name))[1])
            if url_origin(url) != url_origin(agent_url):
                raise ValueError(
                    f"the agent at {agent_url} names {PROXY} {name} at {url}: another origin, refused (the driver's "
                    "token goes only to the agent) — serve the extension on the agent's own origin"
                )
            self.endpoints[name] = url

    async def claim(self) -> None:
        await self._call("claim", {})

    async def next(self, after: int = 0) -> ProxyTurns:
        """The open turns, once the proxy's version is past `after` (a long poll: perhaps the same ones)."""
        return _read(ProxyTurns, await self._call("next", {"after": after}))

    async def tools(self, task_id: str) -> list[ProxyToolListed]:
        answer = await self._call("tools", {"task_id": task_id}, seconds=LISTING_SECONDS)
        return _read(ProxyToolList, answer).tools

    async def act(
        self, task_id: str, action: ProxyToolAction | ProxyBashAction, *, action_id: str | None = None
    ) -> ProxyBashResult | ProxyToolResult:
        """The action's result once it ran in the turn (asked again while the proxy says it is not done)."""
        action_id = action_id or secrets.token_hex(16)
        body = {"task_id": task_id, "action_id": action_id, "action": action.model_dump(mode="json", exclude_none=True)}
        state = _read(ProxyActionState, await self._call("act", body))
        while not state.done:
            state = _read(ProxyActionState, await self._call("result", {"action_id": action_id}))
        if state.result is None:
            raise ProxyRefused(502, f"action {action_id!r} is done but the proxy gave no result")
        return state.result

    async def record(
        self, task_id: str, message: str | JsonObject, *, model: str | None = None, usage: JsonObject | None = None
    ) -> None:
        body = {"task_id": task_id, "message": message, "model": model, "usage": usage}
        await self._call("record", {k: v for k, v in body.items() if v is not None}, attempts=1)

    async def reply(self, task_id: str, *, text: str | None = None, error: str | None = None) -> bool:
        """Reply to the turn (its text, or its error): whether an open turn took it (False: it was over)."""
        body: JsonObject = {"task_id": task_id}
        if error is not None:
            body["error"] = error
        else:
            body["parts"] = [{"kind": "text", "text": text or ""}]
        try:
            await self._call("reply", body)
        except ProxyRefused as e:
            if e.status == 404:
                return False
            raise
        return True

    async def _call(
        self, name: str, body: JsonObject, *, seconds: float = CALL_SECONDS, attempts: int = ATTEMPTS
    ) -> JsonObject:
        for attempt in range(1, attempts + 1):
            try:
                return await self._post(name, {"token": self.token, **body}, seconds)
            except httpx.TransportError:
                if attempt == attempts:
                    raise
                await asyncio.sleep(RETRY_SECONDS)
        raise AssertionError("unreachable")

    async def _post(self, name: str, body: JsonObject, seconds: float) -> JsonObject:
        request = self.http.build_request("POST", self.endpoints[name], json=body, timeout=seconds)
        response = await self.http.send(request, stream=True)
        try:  # a proxy is another program: read at most one chunk past the limit, never its whole answer
            content = bytearray()
            async for chunk in response.aiter_bytes():
                content += chunk
                if len(content) > MAX_ANSWER_BYTES:
                    raise ProxyRefused(502, f"its answer to {name} is over {MAX_ANSWER_BYTES} bytes")
        finally:
            await response.aclose()
        try:
            answer = json.loads(content or b"{}")
        except ValueError:
            answer = None
        if not response.is_success:
            detail = answer.get("detail") if isinstance(answer, dict) else None
            raise ProxyRefused(response.status_code, str(detail or bytes(content[:500]).decode(errors="replace")))
        if not isinstance(answer, dict):
            raise ProxyRefused(502, f"its answer to {name} is not a JSON object")
        return answer


def _read(model: type[_Answer], answer: JsonObject) -> _Answer:
    return model.model_validate(answer)
