"""What a proxy agent runs for its driver, where the agent works: a command (with bash, as this process's user, in
its folder) or a call to an env's MCP server registered with it. Each is bounded in time and output.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from agent_env import telemetry, tls
from agent_env.agents.extensions import McpServer
from agent_env.agents.proxy_wire import (
    ProxyBashAction,
    ProxyBashResult,
    ProxyToolAction,
    ProxyToolListed,
    ProxyToolResult,
)

MAX_OUTPUT_BYTES = 1_000_000  # of each stream of a command; the rest is read, counted and dropped
DEFAULT_ACTION_SECONDS = 600.0
MAX_ACTION_SECONDS = 3600.0  # a driver's own timeout_seconds is held to this
OUTPUT_GRACE_SECONDS = 1.0  # how long output may still arrive once the shell exited (from what it left running)
EXIT_POLL_SECONDS = 0.05
LIST_SECONDS = 60.0
BASH_TOOL = ProxyToolListed(
    name="bash",
    description="Run a bash command where the agent works, as its user, in its folder; returns its stdout, then its "
    "stderr.",
    input_schema={
        "type": "object",
        "properties": {"command": {"type": "string", "description": "The command."}},
        "required": ["command"],
    },
)


class ServerFailed(Exception):
    """An env server did not list its tools."""


def _seconds(asked: float | None) -> float:
    return min(asked or DEFAULT_ACTION_SECONDS, MAX_ACTION_SECONDS)


class _Output:
    """One stream of a command: its first MAX_OUTPUT_BYTES, and how many bytes past them were dropped."""

    def __init__(self) -> None:
        self.kept = bytearray()
        self.dropped = 0

    async def read(self, stream: asyncio.StreamReader) -> None:
        while chunk := await stream.read(65536):
            room = MAX_OUTPUT_BYTES - len(self.kept)
            self.kept += chunk[:room]
            self.dropped += max(0, len(chunk) - room)

    def text(self) -> str:
        clipped = f"\n[{self.dropped} more bytes dropped: output is kept up to {MAX_OUTPUT_BYTES} bytes]\n"
        return self.kept.decode(errors="replace") + (clipped if self.dropped else "")


async def run_bash(program: str, action: ProxyBashAction, folder: Path) -> ProxyBashResult:
    """Run the command in a process group of its own. It is done when its shell exits (what it left running in the
    background keeps running; its output after a grace period is dropped). A command over its time, or whose turn
    is over (the caller cancelled), is stopped with everything it started."""
    timeout = _seconds(action.timeout_seconds)
    try:
        process = await asyncio.create_subprocess_exec(
            program,
            "-c",
            action.command,
            cwd=folder,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,
        )
    except OSError as e:  # as a shell reports a command it cannot run (126)
        return ProxyBashResult(exit_code=126, stdout="", stderr=f"error: the command could not start: {e}\n",
                               timed_out=False)  # fmt: skip
    assert process.stdout is not None and process.stderr is not None
    stdout, stderr = _Output(), _Output()
    readers = [asyncio.create_task(stdout.read(process.stdout)), asyncio.create_task(stderr.read(process.stderr))]
    try:
        async with asyncio.timeout(timeout):
            while process.returncode is None:  # (wait() would also wait for whatever still holds its pipes)
                await asyncio.sleep(EXIT_POLL_SECONDS)
        await asyncio.wait(readers, timeout=OUTPUT_GRACE_SECONDS)
    except BaseException as e:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)
        with contextlib.suppress(BaseException):
            await asyncio.shield(process.wait())
        if isinstance(e, TimeoutError):
            return ProxyBashResult(exit_code=None, stdout=stdout.text(), stderr=stderr.text(), timed_out=True)
        raise
    finally:
        for reader in readers:
            reader.cancel()
    return ProxyBashResult(exit_code=process.returncode, stdout=stdout.text(), stderr=stderr.text(), timed_out=False)


@contextlib.asynccontextmanager
async def _session(server: McpServer) -> AsyncIterator[Any]:
    """An MCP session with `server`, sending its registered headers (its role token) there only."""
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    async with (
        httpx2.AsyncClient(
            headers=server.headers or {}, timeout=120, verify=tls.context(), event_hooks=telemetry.HTTP_HOOKS
        ) as http,
        Client(streamable_http_client(server.url, http_client=http)) as client,
    ):
        yield client


async def list_tools(name: str, server: McpServer) -> list[ProxyToolListed]:
    try:
        async with asyncio.timeout(LIST_SECONDS):
            async with _session(server) as client:
                tools = (await client.list_tools()).tools
    except Exception as e:  # noqa: BLE001 - whatever the server did, the driver is told which and why
        raise ServerFailed(f"env server {name!r} did not list its tools: {_why(e)}") from None
    return [
        ProxyToolListed(name=t.name, description=t.description, input_schema=t.input_schema, server=name) for t in tools
    ]


def _why(error: BaseException) -> str:
    """What went wrong, out of the task groups the MCP client wraps it in."""
    while isinstance(error, BaseExceptionGroup) and len(error.exceptions) == 1:
        error = error.exceptions[0]
    return f"{type(error).__name__}: {error}"[:2000]


def tool_error(message: str) -> ProxyToolResult:
    return ProxyToolResult(content=[{"type": "text", "text": f"error: {message}"}], is_error=True)


async def call_tool(server: McpServer | None, action: ProxyToolAction) -> ProxyToolResult:
    """The tool's result, or an error result saying why there is none (the driver's model reads it)."""
    if server is None:
        return tool_error(f"no env server {action.server!r} is registered with this agent")
    timeout = _seconds(action.timeout_seconds)
    try:
        async with asyncio.timeout(timeout):
            async with _session(server) as client:
                result = await client.call_tool(action.name, action.arguments)
    except TimeoutError:
        return tool_error(f"the tool call timed out after {timeout:g}s")
    except Exception as e:  # noqa: BLE001 - an unreachable or failing server is the call's result
        return tool_error(_why(e))
    content = [block.model_dump(mode="json", by_alias=True, exclude_none=True) for block in result.content]
    return ProxyToolResult(content=content, is_error=bool(result.is_error))
