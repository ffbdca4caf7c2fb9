"""`agent-env run` and `agent-env worker`.

`run` starts its run and follows it; it never hosts a worker (one would execute every run on the shared task
queue and print their errors). With the embedded server, a background worker (`agent_env.temporal.background`)
runs beside it, so an interrupted `run` leaves its run going; with a cluster, workers are `agent-env worker`
processes run elsewhere.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from agent_env.cli import aio
from agent_env.cli.output import Progress, console, not_running_line, notice, summary_line
from agent_env.config import Settings, load_settings
from agent_env.spec.run import RunInput, RunStatus

if TYPE_CHECKING:
    from rich.console import Console
    from temporalio.client import Client


def run_command(
    target: str | None,
    task: str | None,
    *,
    detach: bool,
    json_out: bool,
    models: Sequence[str] = (),
    urls: Sequence[str] = (),
) -> int:
    """`models`/`urls`: `--model`/`--model-url` overrides of the model endpoints, for this run only."""
    settings = load_settings()
    install = settings  # what the background worker runs with: the overrides are pinned in this run's plan only
    if models or urls:
        from agent_env.cli.models_cmd import apply_overrides, parse_overrides

        install = settings.model_copy(deep=True)
        apply_overrides(settings, parse_overrides(list(models), list(urls)))
    if target is None:
        return _list_runnables()
    from agent_env.runner import new_run_id, plan
    from agent_env.task_lookup import resolve_target

    spec = resolve_target(target, task)
    inp = plan(spec, new_run_id(spec.id), settings)
    return aio.run(_run(settings, inp, detach=detach, json_out=json_out, install=install))


def rerun_command(run_id: str, *, detach: bool, json_out: bool) -> int:
    """A new run of exactly the plan `run_id` pinned (its records, data, images and model endpoints)."""
    from agent_env.runner import replan

    settings = load_settings()
    inp = replan(settings, run_id)
    if not json_out:
        notice(f"rerun of {inp.pins['rerun_of']}: plan {inp.pins['plan'][:19]}…, task {inp.pins.get('task')}")
    return aio.run(_run(settings, inp, detach=detach, json_out=json_out, install=settings))


def _who_executes(settings: Settings) -> str:
    if settings.embedded:
        return "the background worker (`agent-env worker status`)"
    return f"a worker on task queue '{settings.temporal.task_queue}' (`agent-env worker` if none runs)"


async def _workers_polling(client: Client, settings: Settings) -> bool:
    from agent_env.temporal.worker import workers_polling

    return await workers_polling(client, settings)


def _start_gateway(embedded, settings: Settings) -> None:
    info, started = embedded.start(settings, on_notice=notice)
    if started:
        notice(
            f"started the embedded gateway at http://{info.address}; it keeps running in the background "
            "(stop it with `agent-env gateway stop`)"
        )


def _list_runnables() -> int:
    from agent_env.bundles import runnables

    rows = runnables()
    out = console()
    out.print("What can run (agent-env run NAME):")
    for r in rows:
        where = "built-in" if r.builtin else str(r.path)
        tasks = f" [dim](tasks: {', '.join(r.tasks)})[/]" if len(r.tasks) > 1 else ""
        out.print(f"  [bold]{r.name}[/]  [dim]{where}[/]{tasks}")
    out.print("Or give the path of a task .toml file. Write your own: `agent-env schema task`.")
    return 0


async def _run(settings: Settings, inp: RunInput, *, detach: bool, json_out: bool, install: Settings) -> int:
    from agent_env import telemetry

    telemetry.setup(settings, "cli")
    with telemetry.span(f"agent-env run {inp.task_id}"):  # the trace's root (a null context when tracing is off)
        return await _start_and_follow(settings, inp, detach=detach, json_out=json_out, install=install)


@dataclass
class Terminal:
    """Where a run's progress and outcome go: this process's console, or, when the background worker starts and
    follows a run for `agent-env run` (`temporal/control.py`), consoles rendering for that command's terminal."""

    out: Console
    note: Callable[[str], None]
    write: Callable[[str], None]  # plain text to stdout (`--json`)
    started: Callable[[str], None] = lambda run_id: None  # the run's id, once it started

    @classmethod
    def local(cls) -> Terminal:
        return cls(console(), notice, print)


async def _start_and_follow(
    settings: Settings, inp: RunInput, *, detach: bool, json_out: bool, install: Settings | None = None
) -> int:
    """Ensure the services (the embedded ones: server, gateway, background worker), start the run, follow it.
    `install`: the settings the background worker runs with (without this run's model overrides)."""
    from agent_env.temporal.client import connect

    wall_start = time.monotonic()
    gateway_ready = None
    if not settings.gateway.urls() and any(s.deploys_env for s in inp.steps):
        # Start the embedded gateway beside the Temporal server instead of inside the first step.
        from agent_env.gateway import embedded

        gateway_ready = asyncio.create_task(asyncio.to_thread(_start_gateway, embedded, settings))
    client = await connect(settings, on_notice=notice)
    if settings.embedded:
        from agent_env.temporal import background

        await asyncio.to_thread(background.ensure, install or settings, on_notice=notice)
    elif not await _workers_polling(client, settings):
        notice(
            f"no worker polls task queue '{settings.temporal.task_queue}' at {settings.address}: the run waits "
            "(durably) until one does; start one with `agent-env worker`"
        )
    if gateway_ready is not None:
        await gateway_ready
    return await start_and_follow(
        client, settings, inp, detach=detach, json_out=json_out, term=Terminal.local(), wall_start=wall_start
    )


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
    from agent_env import runner

    out = term.out
    if detach:
        handle = await runner.start(client, settings, inp)
        term.started(handle.id)
        out.print(f"started run [bold]{handle.id}[/]")
        if url := settings.run_url(handle.id):
            out.print(f"  Temporal UI: {url}")
        out.print(f"  {_who_executes(settings)} executes it; follow it with `agent-env runs show {handle.id}`")
        return 0

    handle = None  # type: ignore[assignment]  # None until the run starts (checked below)
    try:
        handle = await runner.start(client, settings, inp)
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


def interrupted_line(settings: Settings, run_id: str) -> str:
    return (
        f"\n[yellow]interrupted:[/] run {run_id} goes on: {_who_executes(settings)} executes it. "
        f"Follow it with `agent-env runs show {run_id}`, cancel it with `agent-env runs cancel {run_id}`."
    )


async def _follow(handle, inp: RunInput, *, quiet: bool, out: Console):
    """Wait for the result, printing steps as they finish (from the run's query)."""
    from datetime import UTC, datetime

    from agent_env import runner

    result = asyncio.create_task(runner.wait_result(handle))
    progress = Progress(max(len(s.id) for s in inp.steps), max(len(s.type) for s in inp.steps), out=out)
    interval = 0.1
    while not result.done():
        await asyncio.wait({result}, timeout=interval)
        interval = min(interval * 1.5, 1.0)
        if quiet or result.done():
            continue
        # Progress is best effort and must never hold up the result: race the query against it.
        query = asyncio.create_task(runner.query_state(handle, timeout=5.0))
        await asyncio.wait({result, query}, return_when=asyncio.FIRST_COMPLETED)
        if query.done() and query.exception() is None:
            progress.update(query.result(), datetime.now(UTC))
        else:
            query.cancel()
    state = result.result()
    if not quiet:
        progress.update(state, datetime.now(UTC))
    return state


def worker_command(identity: str | None, health_port: int | None = None, health_host: str | None = None) -> int:
    settings = load_settings()
    if health_port is not None:
        settings.worker.health_port = health_port
    if health_host is not None:
        settings.worker.health_host = health_host
    return aio.run(run_worker(settings, identity))


def background_command(action: str) -> int:
    """`agent-env worker start|stop|status`: the background worker of the embedded services."""
    from agent_env.errors import BadInput
    from agent_env.temporal import background

    settings = load_settings()
    queue = settings.temporal.task_queue
    if not settings.embedded:
        if action == "status":
            console().print(
                f"using the Temporal server at {settings.temporal.address}: no background worker; run "
                "`agent-env worker` (in the foreground, under your supervisor) where runs should execute"
            )
            return 0
        raise BadInput(
            "the background worker comes with the embedded Temporal server, and a Temporal address is configured",
            "run `agent-env worker` (in the foreground, under your supervisor) where runs should execute",
        )
    if action == "start":
        from agent_env.temporal import server

        server.start(settings, on_notice=notice)
        info, started = background.start(settings, on_notice=notice)
        verb = "started" if started else "already running"
        console().print(f"background worker {verb} (pid {info.pid}) on task queue '{queue}'\n  log: {info.log}")
        return 0
    if action == "stop":
        stopped = background.stop(settings)
        console().print(
            f"stopped the background worker (pid {stopped.pid}); runs in flight wait until a worker runs again"
            if stopped
            else "the background worker was not running"
        )
        return 0
    st = background.status(settings)
    if st.running and st.info:
        fresh = "" if st.current else " — out of date: the next `agent-env run` or `agent-env worker start` replaces it"
        console().print(f"running (pid {st.info.pid}) on task queue '{queue}'{fresh}\n  log: {st.info.log}")
        return 0
    console().print(not_running_line(st.stale_pidfile, "`agent-env worker start`, or just `agent-env run`"))
    return 1


async def run_worker(
    settings: Settings,
    identity: str | None,
    *,
    start_server: bool = True,
    serving: Callable[[Client], contextlib.AbstractAsyncContextManager] | None = None,
) -> int:
    """A worker until SIGTERM or Ctrl-C (which drain it). `serving`: what else to serve while it polls (the
    background worker's control socket); it stops first, when the drain begins."""
    from datetime import timedelta

    from agent_env import telemetry
    from agent_env.temporal.client import connect
    from agent_env.temporal.drain import Draining
    from agent_env.temporal.worker import create_worker

    telemetry.setup(settings, "worker")
    health = None  # the health port's server, when asked for: its metrics need the client's runtime
    if settings.worker.health_port:
        from agent_env.temporal.health import WorkerHealth

        health = WorkerHealth(settings.worker.health_host, settings.worker.health_port)
    client = await connect(
        settings, start_server=start_server, on_notice=notice, runtime=health.runtime if health else None
    )
    draining = Draining(timedelta(seconds=settings.worker.drain_timeout))
    worker = create_worker(client, settings, identity=identity, draining=draining)
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):  # replaces aio's Ctrl-C handler: the first one drains
        asyncio.get_running_loop().add_signal_handler(sig, _drain_or_exit, stop, sig)
    console().print(
        f"worker on task queue '{settings.temporal.task_queue}' at {settings.address} "
        f"(namespace {settings.temporal.namespace}); Ctrl-C or SIGTERM drains it, a second one stops it at once"
    )
    reaper = None
    if settings.sandboxes.reap_every > 0:
        from agent_env.providers.reaper import reap_forever

        reaper = asyncio.create_task(reap_forever(settings, client, settings.sandboxes.reap_every, notice))
    try:
        probes = health.serving(client, worker, draining=stop.is_set) if health else contextlib.nullcontext()
        # Leaving shuts the worker down: no new tasks, running activities get the grace.
        async with probes, worker, serving(client) if serving else contextlib.nullcontext():
            await stop.wait()
            console().print(draining.begin())
    finally:
        if reaper is not None:
            reaper.cancel()
    console().print(draining.outcome())
    console().print("worker stopped")
    return 0


def _drain_or_exit(stop: asyncio.Event, sig: int) -> None:
    """The first SIGTERM or Ctrl-C drains the worker; a second exits now. Activities still running then are
    retried on another worker once their heartbeat (or start-to-close) timeout notices."""
    if not stop.is_set():
        stop.set()
        return
    import os
    import sys

    console().print("stopping at once: activities still running go to other workers when their heartbeats lapse")
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(128 + sig)
