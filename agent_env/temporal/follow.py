"""Run a task for a terminal: plan it, bring up what it needs (the embedded server's gateway and background
worker), start it and follow it, printing its progress and outcome (only its own). `agent-env run` does it in
its own process; the background worker does it for `agent-env run`'s fast path (`control`), rendering for the
command's terminal.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from agent_env.config import Settings
from agent_env.gateway import embedded
from agent_env.planning.agent_override import with_agent
from agent_env.spec.run import RunInput, RunState, RunStatus
from agent_env.task_lookup import resolve_target
from agent_env.temporal import bring_up, launch
from agent_env.temporal.run_view import Progress, interrupted_line, summary_line, who_executes
from agent_env.temporal_client.client import connect, workers_polling

if TYPE_CHECKING:
    from rich.console import Console
    from temporalio.client import Client, WorkflowHandle


@dataclass
class Terminal:
    """Where a run's progress and outcome go: the command's own console, or, when the background worker starts
    and follows a run for `agent-env run` (`control`), consoles rendering for that command's terminal."""

    out: Console
    note: Callable[[str], None]
    write: Callable[[str], None]  # plain text to stdout (`--json`)
    started: Callable[[str], None] = field(default=lambda run_id: None)  # the run's id, once it started


def plan_target(settings: Settings, target: str, task: str | None, agent: tuple[str, int] | None = None) -> RunInput:
    """The plan of a run of `target` (a bundle's name or folder, a task file), `task` of it if it has several;
    `agent` (a registry agent's name and version) replaces the agent of every deploy_agent step."""
    spec = resolve_target(target, task)
    if agent is not None:
        spec = with_agent(spec, *agent)
    return launch.plan(spec, launch.new_run_id(spec.id), settings)


def start_gateway(settings: Settings, inp: RunInput, note: Callable[[str], None]) -> None:
    """The embedded gateway, up before the first step that deploys an environment (not inside that step)."""
    if settings.gateway.urls() or not any(s.deploys_env for s in inp.steps):
        return
    embedded.ensure(settings, on_notice=note)


async def prepare(
    settings: Settings,
    inp: RunInput,
    *,
    install: Settings,
    note: Callable[[str], None],
    early: bring_up.BringUp | None = None,
) -> Client:
    """Bring up what the run needs (the embedded ones: server, gateway, background worker) and connect.
    `install`: the settings the background worker runs with (without this run's model overrides); `early`: the
    server's and worker's start-ups when the command began them before planning (`bring_up.begin`)."""
    # Cold, the three start-ups overlap (the worker waits for the server it connects to). In threads that don't
    # hold the process back: when the server fails, its error is the one to tell, at once.
    early = early or bring_up.begin(settings, install, note)
    gateway_up = asyncio.wrap_future(bring_up.aside(start_gateway, settings, inp, note))
    server_up, worker_up = (asyncio.wrap_future(f) if f is not None else None for f in (early.server, early.worker))
    try:
        if server_up is not None:
            await server_up  # (its error, if it failed, is the one to tell)
        client = await connect(settings, on_notice=note, start_server=server_up is None)
        if worker_up is not None:
            await worker_up
        elif not await workers_polling(client, settings):
            note(
                f"no worker polls task queue '{settings.temporal.task_queue}' at {settings.address}: the run "
                "waits (durably) until one does; start one with `agent-env worker`"
            )
        await gateway_up
    except BaseException:
        for up in (gateway_up, server_up, worker_up):
            if up is not None:
                up.add_done_callback(_retrieved)
        raise
    return client


def _retrieved(pending: asyncio.Future) -> None:
    """Reads a start-up's outcome nobody waits for, so asyncio does not report it as never retrieved."""
    if not pending.cancelled():
        pending.exception()


async def start_and_follow(
    client: Client,
    settings: Settings,
    inp: RunInput,
    *,
    detach: bool,
    json_out: bool,
    term: Terminal,
    wall_start: float,
) -> int:
    """Start the run and follow it, printing its progress and outcome (only its own) to `term`. The exit code."""
    out = term.out
    if detach:
        handle = await launch.start(client, settings, inp)
        term.started(handle.id)
        out.print(f"started run [bold]{handle.id}[/]")
        if url := settings.run_url(handle.id):
            out.print(f"  Temporal UI: {url}")
        out.print(f"  {who_executes(settings)} executes it; follow it with `agent-env runs show {handle.id}`")
        return 0

    handle = None  # type: ignore[assignment]  # None until the run starts (checked below)
    try:
        handle = await launch.start(client, settings, inp)
        term.started(handle.id)
        if not json_out:
            out.print(f"[bold]{inp.task_id}[/] v{inp.task_version} · run [bold]{handle.id}[/]")
            if url := settings.run_url(handle.id):
                out.print(f"  [dim]Temporal UI:[/] {url}")
        state = await _follow(handle, inp, quiet=json_out, out=out)
    except asyncio.CancelledError:
        if handle is not None:
            out.print(interrupted_line(settings, handle.id))
        return 130
    if json_out:
        term.write(json.dumps(state.model_dump(mode="json"), indent=2))
    else:
        out.print(summary_line(state, time.monotonic() - wall_start))
    return 0 if state.status is RunStatus.PASSED else 1


async def _follow(handle: WorkflowHandle, inp: RunInput, *, quiet: bool, out: Console) -> RunState:
    """Wait for the result, printing steps as they finish (from the run's query)."""
    result = asyncio.create_task(launch.wait_result(handle))
    progress = Progress(max(len(s.id) for s in inp.steps), max(len(s.type) for s in inp.steps), out=out)
    interval = 0.1
    while not result.done():
        await asyncio.wait({result}, timeout=interval)
        interval = min(interval * 1.5, 1.0)
        if quiet or result.done():
            continue
        # Progress is best effort and must never hold up the result: race the query against it.
        query = asyncio.create_task(launch.query_state(handle, timeout=5.0))
        await asyncio.wait({result, query}, return_when=asyncio.FIRST_COMPLETED)
        if query.done() and query.exception() is None:
            progress.update(query.result(), datetime.now(UTC))
        else:
            query.cancel()
    state = result.result()
    if not quiet:
        progress.update(state, datetime.now(UTC))
    return state
