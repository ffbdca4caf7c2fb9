"""A proxy agent (`urn:agentenv:proxy/v1`) served by our SDK: an agent with no model, whose turns a driver outside
its sandbox answers.

    from agent_env.agents.proxy_agent import ProxyAgent
    from agent_env.agents.sdk import serve
    serve(ProxyAgent(work_dir="/home/agent"), host="127.0.0.1", port=9000)

Each A2A message is an open turn until the driver replies. The driver claims the proxy once (its token is compared
in constant time on every later call; `claim_token=` fixes which token may claim it), reads the open turns, lists a
turn's tools (each env MCP server registered through mcp-config/v1, or the one the turn came with, and `bash`), has
the proxy run actions (a tool call on a registered server, or a command run with bash as this process's user in
`work_dir`) and replies. Every action is recorded in the turn's trajectory (trajectory/v1). A turn its sender cancels
closes without a reply, stopping its running actions (a command's whole process group).

Bounded: request bodies (1 MB), each command's output (`MAX_OUTPUT_BYTES` a stream, the rest dropped and counted),
each action's time (`MAX_ACTION_SECONDS`), a turn's actions (`MAX_ACTIONS_PER_TURN`) and its recorded events; what a
turn ran is forgotten when it closes.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from agent_env import guard
from agent_env.agents import proxy_actions
from agent_env.agents.extensions import Configured, McpServer
from agent_env.agents.proxy_wire import (
    ENDPOINT,
    PROXY,
    ProxyAct,
    ProxyActionState,
    ProxyBashAction,
    ProxyBashResult,
    ProxyClaim,
    ProxyNext,
    ProxyOpenTurn,
    ProxyRecord,
    ProxyReply,
    ProxyResultAsked,
    ProxyText,
    ProxyToolList,
    ProxyToolListed,
    ProxyToolResult,
    ProxyToolsAsked,
    ProxyTurns,
    card_methods,
    path,
)
from agent_env.agents.sdk import Agent, Answer, Turn
from agent_env.gateway_client.wire import JsonObject

MAX_BODY_BYTES = 1_000_000
LONG_POLL_SECONDS = 25.0
MAX_ACTIONS_PER_TURN = 2_000
MAX_EVENTS_PER_TURN = 4_000  # recorded model calls and actions; past it, actions still run but go unrecorded
MAX_RECORDED_CHARS = 16_000  # of one recorded model message or action output
BASH = "bash"
TURN_SERVER = "env"  # the name of the env server a turn came with (our runs send its MCP URL in the message)
Result = ProxyBashResult | ProxyToolResult


class _Refused(Exception):
    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status, self.detail = status, detail


@dataclass
class _OpenTurn:
    turn: Turn
    servers: dict[str, McpServer]
    reply: asyncio.Future[ProxyReply]
    actions: dict[str, asyncio.Task[Result]] = field(default_factory=dict)
    tools: list[ProxyToolListed] | None = None
    listing: asyncio.Lock = field(default_factory=asyncio.Lock)

    def listed(self) -> ProxyOpenTurn:
        return ProxyOpenTurn(
            task_id=self.turn.task_id,
            context_id=self.turn.context_id,
            parts=[ProxyText(text=self.turn.prompt)],
            system_prompt=self.turn.system_prompt or None,
        )

    def keep(self, event: JsonObject) -> None:
        if len(self.turn.trajectory) < MAX_EVENTS_PER_TURN:
            self.turn.trajectory.append(event)


class ProxyAgent(Agent):
    """`shell=False`: a proxy for an agent that works in no sandbox (no `bash`). `claim_token`: the only token that
    may claim it (default: the first claimant's)."""

    name = "agentenv-proxy"
    description = "An agent played from outside agent-env: a driver answers its turns."
    shutdown_grace_seconds = 5  # its open turns wait on a driver that may never reply: stopping ends them

    def __init__(
        self,
        *,
        work_dir: str | Path | None = None,
        shell: bool = True,
        claim_token: str | None = None,
        long_poll_seconds: float = LONG_POLL_SECONDS,
    ) -> None:
        self.work_dir = Path(work_dir or Path.cwd())
        self.shell = shell
        self.program = BASH if shutil.which(BASH) else "sh"
        self.long_poll_seconds = long_poll_seconds
        self._expected = claim_token
        self._token: str | None = None
        self._configured = Configured()
        self._turns: dict[str, _OpenTurn] = {}
        self._actions: dict[str, tuple[_OpenTurn, asyncio.Task[Result]]] = {}
        self._version = 0
        self._changed: asyncio.Event = asyncio.Event()

    # -- the agent's side: each message is a turn the driver answers --

    async def answer(self, turn: Turn) -> Answer:
        servers = dict(self._configured.mcp_servers)
        if turn.mcp_url and not any(s.url == turn.mcp_url for s in servers.values()):
            headers = {"authorization": f"Bearer {turn.token}"} if turn.token else None
            servers[TURN_SERVER] = McpServer(url=turn.mcp_url, headers=headers)
        future: asyncio.Future[ProxyReply] = asyncio.get_running_loop().create_future()
        opened = _OpenTurn(turn, servers, future)
        self._turns[turn.task_id] = opened
        self._bump()
        try:
            reply = await future
        finally:  # a reply, or the sender's cancel: what the turn still runs stops with it
            del self._turns[turn.task_id]
            self._bump()
            await self._close(opened)
        if reply.error is not None:
            return Answer(text=reply.error, failed=True)
        return Answer(text="\n".join(part.text for part in reply.parts or ()))

    def extension_declarations(self) -> list[Any]:
        from a2a.types import AgentExtension  # the A2A SDK's types: loaded with the card

        return [
            AgentExtension(
                uri=PROXY,
                description="Hand the agent's turns to a driver outside its sandbox, and run the driver's actions "
                "where the agent works.",
                params={"endpoint": ENDPOINT, "methods": card_methods()},
            )
        ]

    def extension_routes(self, configured: Configured) -> list[Route]:
        self._configured = configured  # the env servers the run registered (mcp-config/v1) are each turn's
        handlers: dict[str, tuple[type[BaseModel], Callable[[Any], Awaitable[BaseModel | None]]]] = {
            "claim": (ProxyClaim, self._claim),
            "next": (ProxyNext, self._next),
            "tools": (ProxyToolsAsked, self._tools),
            "act": (ProxyAct, self._act),
            "result": (ProxyResultAsked, self._result),
            "record": (ProxyRecord, self._record),
            "reply": (ProxyReply, self._reply),
        }
        return [Route(path(name), _answering(*handler), methods=["POST"]) for name, handler in handlers.items()]

    # -- the driver's operations --

    async def _claim(self, request: ProxyClaim) -> None:
        if self._expected is not None and not guard.tokens_equal(request.token, self._expected):
            raise _Refused(401, "this proxy takes only the claim token it was started with")
        if self._token is None:
            self._token = request.token
        elif not guard.tokens_equal(request.token, self._token):
            raise _Refused(409, "this proxy is already claimed by another driver")

    async def _next(self, request: ProxyNext) -> ProxyTurns:
        self._check(request.token)
        if self._version <= request.after:
            changed = self._changed
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(changed.wait(), self.long_poll_seconds)
        open_turns = [t.listed() for t in self._turns.values() if not t.reply.done()]
        return ProxyTurns(version=self._version, turns=open_turns)

    async def _tools(self, request: ProxyToolsAsked) -> ProxyToolList:
        return ProxyToolList(tools=await self._listing(self._open_turn(request.token, request.task_id)))

    async def _act(self, request: ProxyAct) -> ProxyActionState:
        self._check(request.token)
        if (known := self._actions.get(request.action_id)) is not None:  # a driver's retry: the same action
            if known[0].turn.task_id != request.task_id:
                raise _Refused(409, f"action {request.action_id!r} is another turn's")
            return await self._state(request.action_id, known[1])
        turn = self._open_turn(request.token, request.task_id)
        if isinstance(request.action, ProxyBashAction) and not self.shell:
            raise _Refused(409, "this proxy works in no sandbox, so it runs no commands")
        if len(turn.actions) >= MAX_ACTIONS_PER_TURN:
            raise _Refused(409, f"a turn runs at most {MAX_ACTIONS_PER_TURN} actions; reply to end it")
        task = asyncio.create_task(self._perform(turn, request.action))
        turn.actions[request.action_id] = task
        self._actions[request.action_id] = (turn, task)
        return await self._state(request.action_id, task)

    async def _result(self, request: ProxyResultAsked) -> ProxyActionState:
        self._check(request.token)
        if (known := self._actions.get(request.action_id)) is None:
            raise _Refused(404, f"no action {request.action_id!r} (its turn may be over)")
        return await self._state(request.action_id, known[1])

    async def _record(self, request: ProxyRecord) -> None:
        turn = self._open_turn(request.token, request.task_id)
        message = request.message if isinstance(request.message, str) else json.dumps(request.message)
        event: JsonObject = {"event": "model", "message": message[:MAX_RECORDED_CHARS]}
        if request.model:
            event["model"] = request.model[:200]
        if request.usage:
            event["usage"] = {k: v for k, v in list(request.usage.items())[:16] if isinstance(v, int | float)}
        turn.keep(event)

    async def _reply(self, request: ProxyReply) -> None:
        self._open_turn(request.token, request.task_id).reply.set_result(request)

    # -- what they share --

    def _check(self, token: str) -> None:
        if self._token is None or not guard.tokens_equal(token, self._token):
            raise _Refused(401, "the driver's token is missing or wrong: claim the proxy first")

    def _open_turn(self, token: str, task_id: str) -> _OpenTurn:
        self._check(token)
        turn = self._turns.get(task_id)
        if turn is None or turn.reply.done():
            raise _Refused(404, f"no open turn {task_id!r}")
        return turn

    async def _listing(self, turn: _OpenTurn) -> list[ProxyToolListed]:
        async with turn.listing:
            if turn.tools is None:
                tools = [proxy_actions.BASH_TOOL] if self.shell else []
                for name, server in turn.servers.items():
                    try:
                        listed = await proxy_actions.list_tools(name, server)
                    except proxy_actions.ServerFailed as e:
                        raise _Refused(502, str(e)) from None
                    clash = {t.name for t in tools} & {t.name for t in listed}
                    if clash:
                        raise _Refused(409, f"tools {sorted(clash)} are offered twice (env server {name!r})")
                    tools += listed
                turn.tools = tools
            return turn.tools

    async def _perform(self, turn: _OpenTurn, action: ProxyBashAction | Any) -> Result:
        result: Result
        if isinstance(action, ProxyBashAction):
            result = await proxy_actions.run_bash(self.program, action, self.work_dir)
            output = f"error: timed out after {action.timeout_seconds}s" if result.timed_out else result.stdout
            turn.keep(
                {
                    "event": "tool",
                    "tool": BASH,
                    "arguments": {"command": action.command[:MAX_RECORDED_CHARS]},
                    "exit_code": result.exit_code,
                    "result": (output + result.stderr)[:MAX_RECORDED_CHARS],
                }
            )
            return result
        result = await proxy_actions.call_tool(turn.servers.get(action.server), action)
        text = "".join(str(block.get("text", "")) for block in result.content)[:MAX_RECORDED_CHARS]
        turn.keep(
            {
                "event": "tool",
                "tool": action.name,
                "server": action.server,
                "arguments": action.arguments,
                "error" if result.is_error else "result": text,
            }
        )
        return result

    async def _state(self, action_id: str, task: asyncio.Task[Result]) -> ProxyActionState:
        await asyncio.wait((task,), timeout=self.long_poll_seconds)
        if not task.done():
            return ProxyActionState(done=False)
        if task.cancelled():
            raise _Refused(404, f"action {action_id!r} was stopped: its turn is over")
        return ProxyActionState(done=True, result=task.result())

    async def _close(self, turn: _OpenTurn) -> None:
        for action_id, task in turn.actions.items():
            task.cancel()
            self._actions.pop(action_id, None)
        await asyncio.gather(*turn.actions.values(), return_exceptions=True)

    def _bump(self) -> None:
        self._version += 1
        self._changed.set()
        self._changed = asyncio.Event()


def _answering(
    model: type[BaseModel], handler: Callable[[Any], Awaitable[BaseModel | None]]
) -> Callable[[Request], Awaitable[Response]]:
    """The body read within its limit and validated (a 400 naming the field), the handler's refusal as
    `{"detail": ...}` with its status, as the reference answers."""

    async def route(request: Request) -> Response:
        try:
            raw = await guard.read_body(request, MAX_BODY_BYTES)
            answer = await handler(model.model_validate_json(raw or b"{}"))
        except guard.BodyTooLarge:
            return JSONResponse({"detail": f"the body is over {MAX_BODY_BYTES} bytes"}, status_code=413)
        except ValidationError as e:
            return JSONResponse({"detail": str(e)[:2000]}, status_code=400)
        except _Refused as e:
            return JSONResponse({"detail": e.detail}, status_code=e.status)
        body = {} if answer is None else answer.model_dump(mode="json", exclude_none=True)
        return JSONResponse(body)

    return route
