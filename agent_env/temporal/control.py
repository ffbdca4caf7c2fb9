"""The background worker's control socket: how its starters know it is up, and how `agent-env run` runs fast.

A Unix socket in the worker's private folder (mode 0600: this user only), one JSON request per line, bounded
in size, answered with JSON lines.

- `ping` answers the worker's pid, so a starter never mistakes a draining predecessor for it.
- `run` (and `validate`: `env validate`, `a2a-agent validate`, through `validation`) plans a task, starts the run
  and follows it, streaming what `agent-env run` would print, rendered for
  the caller's terminal. The worker has Temporal's client, the planner and the step types loaded and
  connected already, so the command needs none of them (`control_client`): it sends the options it parsed
  and prints what arrives. When the worker cannot serve it as the command itself would (another fingerprint,
  an unexpected failure before the run started), it answers `fallback` before printing anything, and the
  command does it all itself.

The command imports nothing of this module: it writes the request's JSON itself (`RunRequest` validates it).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import os
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field, field_validator
from rich.console import Console
from rich.markup import escape

from agent_env import json_depth
from agent_env.config import Settings
from agent_env.errors import AgentEnvError
from agent_env.spec.run import RunInput
from agent_env.temporal import launch, validation
from agent_env.temporal.background import unix_address
from agent_env.temporal.control_client import TERMINAL_ENV, RunOptions, ValidateOptions
from agent_env.temporal.follow import Terminal, plan_target, start_and_follow, start_gateway

if TYPE_CHECKING:
    from temporalio.client import Client

MAX_REQUEST = 64 * 1024  # bytes in one request line


class Stream(BaseModel):
    """One of the caller's output streams: a terminal (and how wide), or not (a pipe, a file)."""

    tty: bool = False
    width: int | None = Field(None, ge=20, le=10_000)


class _Request(BaseModel):
    """A command the worker serves: the caller's fingerprint and terminal."""

    fingerprint: str = Field(max_length=64)  # the caller's `background.fingerprint`: the same code and settings
    stdout: Stream = Stream()
    stderr: Stream = Stream()
    env: dict[str, str] = Field(default_factory=dict)  # the caller's terminal variables (TERMINAL_ENV)


class ValidateRequest(_Request):
    """`agent-env env validate` / `agent-env a2a-agent validate`: the options the command parsed."""

    op: str = "validate"
    options: ValidateOptions

    @field_validator("options")
    @classmethod
    def _bounded(cls, options: ValidateOptions) -> ValidateOptions:
        if options.kind not in ("env", "a2a-agent"):
            raise ValueError("options.kind is env or a2a-agent")
        if len(options.target) > 4096 or len(options.bundle or "") > 4096 or not 0 < options.timeout_s <= 3600:
            raise ValueError("options.target and .bundle are at most 4096 characters, .timeout_s in (0, 3600]")
        return options


class RunRequest(_Request):
    """`agent-env run TARGET [--task T] [--json] [--detach]`: the options the command parsed, and its terminal."""

    op: str = "run"
    options: RunOptions

    @field_validator("options")
    @classmethod
    def _bounded(cls, options: RunOptions) -> RunOptions:
        if len(options.target) > 4096 or len(options.task or "") > 256:
            raise ValueError("options.target is at most 4096 characters, options.task at most 256")
        return options


@contextlib.asynccontextmanager
async def serve_control(path: Path, client: Client, settings: Settings, fingerprint: str) -> AsyncIterator[None]:
    """Answer on `path` while inside; leaving stops answering at once (a draining worker is no longer up)."""
    handle = functools.partial(_handle, client=client, settings=settings, fingerprint=fingerprint)
    path.unlink(missing_ok=True)  # a predecessor's: it no longer answers there
    with unix_address(path) as address:
        server = await asyncio.start_unix_server(handle, path=address, limit=MAX_REQUEST)
    os.chmod(path, 0o600)
    try:
        yield
    finally:
        server.close()


async def _handle(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    *,
    client: Client,
    settings: Settings,
    fingerprint: str,
) -> None:
    def send(message: dict[str, Any]) -> None:
        if not writer.is_closing():
            writer.write(json.dumps(message).encode() + b"\n")

    try:
        request = json_depth.loads(await reader.readline())  # (a deep line: a ValueError, like any bad one)
        if not isinstance(request, dict):
            send({"error": "unknown request"})
        elif request.get("op") == "ping":
            send({"pid": os.getpid()})
        elif request.get("op") in ("run", "validate"):
            run = (RunRequest if request["op"] == "run" else ValidateRequest).model_validate(request)
            if run.fingerprint != fingerprint:
                send({"fallback": "the background worker runs other code or settings"})
            else:
                await _serve_run(run, reader, send, client, settings)
        else:
            send({"error": "unknown request"})
        await writer.drain()
    except (ValueError, ConnectionError, asyncio.LimitOverrunError):
        pass  # a malformed or oversized request, or a caller gone: no answer
    finally:
        writer.close()


async def _serve_run(
    run: RunRequest | ValidateRequest,
    reader: asyncio.StreamReader,
    send: Callable[[dict[str, Any]], None],
    client: Client,
    settings: Settings,
) -> None:
    """Plan, start and follow one run (a task's, or a validation's) for the command at the other end; it going
    away (Ctrl-C) stops the following, never the run."""
    wall_start = time.monotonic()
    out, err = _console(run.stdout, "out", send, run.env), _console(run.stderr, "err", send, run.env)

    def note(message: str) -> None:
        err.print(f"[yellow]note:[/] {escape(message)}")

    started: list[str] = []

    def on_started(run_id: str) -> None:
        started.append(run_id)
        send({"run": run_id})  # the command says how to follow it if interrupted

    def emit(text: str) -> None:
        send({"out": text + "\n"})

    notes: list[str] = []
    try:
        if isinstance(run, RunRequest):
            inp = await asyncio.to_thread(plan_target, settings, run.options.target, run.options.task)
        else:
            inp, notes = await asyncio.to_thread(validation.plan, settings, run.options)
        await asyncio.to_thread(start_gateway, settings, inp, note)
    except AgentEnvError as e:  # bad input: said as the command says it
        err.print(f"[bold red]error:[/] {escape(e.problem)}")
        if e.fix:
            err.print(f"  [bold]fix:[/] {escape(e.fix)}")
        send({"exit": e.exit_code})
        return
    except Exception as e:  # noqa: BLE001 - nothing printed yet: the command does it all itself, as it would
        send({"fallback": f"{type(e).__name__}: {e}"})
        return
    if isinstance(run, RunRequest):
        term = Terminal(out, note, emit, started=on_started)
        options = run.options
        work = start_and_follow(
            client, settings, inp, detach=options.detach, json_out=options.json_out, term=term, wall_start=wall_start
        )
    else:
        for line in [] if run.options.json_out else notes:
            note(line)
        work = _validate(client, settings, inp, run.options, notes, out, emit, on_started, wall_start)
    follow = asyncio.create_task(work)
    gone = asyncio.create_task(reader.read(1))  # EOF: the command went away (Ctrl-C)
    await asyncio.wait({follow, gone}, return_when=asyncio.FIRST_COMPLETED)
    gone.cancel()
    if not follow.done():
        follow.cancel()  # stops following; the run goes on
        await asyncio.gather(follow, return_exceptions=True)
        return
    try:
        send({"exit": follow.result()})
    except Exception as e:  # noqa: BLE001
        if not started:
            send({"fallback": f"{type(e).__name__}: {e}"})
        else:
            err.print(f"[bold red]error:[/] {escape(str(e))}")
            send({"exit": 1})


async def _validate(
    client: Client,
    settings: Settings,
    inp: RunInput,
    options: ValidateOptions,
    notes: list[str],
    out: Console,
    emit: Callable[[str], None],
    on_started: Callable[[str], None],
    wall_start: float,
) -> int:
    handle = await launch.start(client, settings, inp)
    on_started(inp.run_id)
    state = await launch.wait_result(handle)
    return validation.report(options, state, notes, out, emit, time.monotonic() - wall_start)


def _console(stream: Stream, key: str, send: Callable[[dict[str, Any]], None], env: dict[str, str]) -> Console:
    """A rich console rendering as the command's own would on that stream (`cli/output.py`)."""

    class Sink:
        def write(self, text: str) -> int:
            send({key: text})
            return len(text)

        def flush(self) -> None:
            pass

    width = (stream.width if stream.tty else 200) if key == "out" else (stream.width if stream.tty else None)
    return Console(
        file=Sink(),  # type: ignore[arg-type]
        force_terminal=stream.tty,
        force_interactive=False,
        width=width,
        highlight=False,
        soft_wrap=True,
        _environ={k: v for k, v in env.items() if k in TERMINAL_ENV},
    )
