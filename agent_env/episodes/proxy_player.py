"""A trainer plays a deployed proxy agent (`urn:agentenv:proxy/v1`): its turns come from the proxy, and its tools run
where the agent lives (the env's tools as the agent, and `bash` in its sandbox), with the episode's turn interface:

    player = await ProxyPlayer.attach("http://127.0.0.1:9000/")   # claims the proxy: this player alone drives it
    while (turn := await player.next_turn()) is not None:
        async with turn.tools() as tools:
            listed = tools.list()                                  # the env servers' tools, and bash
            notes = await tools.call("list_notes", {})             # a tool's JSON result (ToolFailed: its error)
            files = await tools.call("bash", {"command": "ls"})    # the command's output (ToolFailed: exit code)
        await turn.end("Done.")                                    # the proxy's sender gets this reply

`next_turn(wait=...)` returns None once `wait` seconds pass with no new turn (default: waits on). The proxy records
each action in the turn's trajectory (trajectory/v1); `turn.record_model_call(message)` adds the model's calls.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx

from agent_env.agents.client import AgentClient
from agent_env.agents.proxy_driver import ProxyDriver, ProxyRefused
from agent_env.agents.proxy_wire import ProxyBashAction, ProxyOpenTurn, ProxyToolAction, ProxyToolListed
from agent_env.agents.sdk import ToolFailed
from agent_env.episodes.tools import Arguments, ToolCall, ToolInfo, TurnTools
from agent_env.gateway_client.wire import JsonObject


class ProxyPlayer:
    def __init__(self, driver: ProxyDriver, http: httpx.AsyncClient | None = None) -> None:
        self.driver = driver
        self._own_http = http
        self._version = 0
        self._handed: set[str] = set()  # open turns already handed out (those the proxy closed are dropped)

    @classmethod
    async def attach(cls, url: str, *, http: httpx.AsyncClient | None = None, token: str | None = None) -> ProxyPlayer:
        """Claim the proxy agent at `url` (its card must declare proxy/v1)."""
        own = http is None
        http = http or httpx.AsyncClient()
        card = await AgentClient(url, http).card()
        player = cls(ProxyDriver(http, url, card, token=token), http if own else None)
        await player.driver.claim()
        return player

    async def next_turn(self, *, wait: float | None = None) -> ProxiedTurn | None:
        """The next open turn not handed out yet; None when `wait` seconds passed without one."""
        deadline = None if wait is None else time.monotonic() + wait
        while True:
            answer = await self.driver.next(self._version)
            self._version = answer.version
            open_ids = {t.task_id for t in answer.turns}
            self._handed &= open_ids
            for listed in answer.turns:
                if listed.task_id not in self._handed:
                    self._handed.add(listed.task_id)
                    return ProxiedTurn(self.driver, listed)
            if deadline is not None and time.monotonic() >= deadline:
                return None

    async def close(self) -> None:
        if self._own_http is not None:
            await self._own_http.aclose()


class ProxiedTurn:
    def __init__(self, driver: ProxyDriver, listed: ProxyOpenTurn) -> None:
        self._driver, self.listed = driver, listed

    @property
    def id(self) -> str:
        return self.listed.task_id

    @property
    def context_id(self) -> str:
        return self.listed.context_id

    @property
    def prompt(self) -> str:
        return "\n".join(part.text for part in self.listed.parts)

    @property
    def system_prompt(self) -> str | None:
        return self.listed.system_prompt

    @contextlib.asynccontextmanager
    async def tools(self) -> AsyncIterator[TurnTools]:
        listed = await self._driver.tools(self.id)
        infos = [
            ToolInfo(name=t.name, description=t.description or "", inputSchema=t.input_schema or {}) for t in listed
        ]
        yield TurnTools(_ProxiedCalls(self._driver, self.id, listed), infos)

    async def record_model_call(
        self, message: str | JsonObject, *, model: str | None = None, usage: JsonObject | None = None
    ) -> None:
        await self._driver.record(self.id, message, model=model, usage=usage)

    async def end(self, response: str) -> bool:
        """Reply: whether the turn was still open (its sender may have cancelled it)."""
        return await self._driver.reply(self.id, text=response)

    async def fail(self, error: str) -> bool:
        return await self._driver.reply(self.id, error=error)


class _ProxiedCalls:
    """What `TurnTools` calls through: each call run by the proxy, as `RestTools` answers (a JSON result or
    ToolFailed with the error's text), and kept in `calls`."""

    def __init__(self, driver: ProxyDriver, task_id: str, listed: list[ProxyToolListed]) -> None:
        self._driver, self._task_id = driver, task_id
        self._servers = {t.name: t.server for t in listed}
        self.calls: list[ToolCall] = []

    async def call(self, name: str, arguments: Arguments | None = None) -> Any:
        arguments = arguments or {}
        if name not in self._servers:
            error = f"this turn offers no tool {name!r}; it offers {sorted(self._servers)}"
            self.calls.append({"tool": name, "arguments": arguments, "error": error})
            raise ToolFailed(error)
        server = self._servers[name]
        try:
            text, failed = await self._run(name, server, arguments)
        except ProxyRefused as e:
            text, failed = str(e), True
        if failed:
            self.calls.append({"tool": name, "arguments": arguments, "error": text})
            raise ToolFailed(text)
        result: Any = text
        if server is not None:
            with contextlib.suppress(ValueError):
                result = json.loads(text)
        self.calls.append({"tool": name, "arguments": arguments, "result": result})
        return result

    async def _run(self, name: str, server: str | None, arguments: Arguments) -> tuple[str, bool]:
        if server is None:  # the proxy's own bash
            command = arguments.get("command")
            if not isinstance(command, str):
                return f"tool {name!r} takes a command string, not {command!r}", True
            ran = await self._driver.act(self._task_id, ProxyBashAction(kind="bash", command=command))
            if ran.kind != "bash":
                return "the proxy answered a command with a tool's result", True
            if ran.timed_out:
                return ran.stdout + ran.stderr + "error: the command timed out", True
            text = ran.stdout + ran.stderr
            return (text if ran.exit_code == 0 else f"{text}exit code {ran.exit_code}"), ran.exit_code != 0
        action = ProxyToolAction(kind="tool", server=server, name=name, arguments=arguments)
        done = await self._driver.act(self._task_id, action)
        if done.kind != "tool":
            return "the proxy answered a tool call with a command's result", True
        return "".join(str(block.get("text", "")) for block in done.content), done.is_error
