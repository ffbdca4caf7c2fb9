"""`agent-env run` and `agent-env worker`."""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import time
from collections.abc import Sequence

from agentenv.cli import aio
from agentenv.cli.output import Progress, console, notice, summary_line
from agentenv.config import Settings, load_settings
from agentenv.spec.run import RunInput, RunStatus


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
    if models or urls:
        from agentenv.cli.models_cmd import apply_overrides, parse_overrides

        apply_overrides(settings, parse_overrides(list(models), list(urls)))
    if target is None:
        return _list_runnables()
    from agentenv.bundles import resolve_target
    from agentenv.runner import new_run_id, plan

    spec = resolve_target(target, task)
    return aio.run(_run(settings, plan(spec, new_run_id(spec.id), settings), detach=detach, json_out=json_out))


def rerun_command(run_id: str, *, detach: bool, json_out: bool) -> int:
    """A new run of exactly the plan `run_id` pinned (its records, data, images and model endpoints)."""
    from agentenv.runner import replan

    settings = load_settings()
    inp = replan(settings, run_id)
    if not json_out:
        notice(f"rerun of {inp.pins['rerun_of']}: plan {inp.pins['plan'][:19]}…, task {inp.pins.get('task')}")
    return aio.run(_run(settings, inp, detach=detach, json_out=json_out))


def _start_gateway(embedded, settings: Settings) -> None:
    info, started = embedded.start(settings, on_notice=notice)
    if started:
        notice(
            f"started the embedded gateway at http://{info.address}; it keeps running in the background "
            "(stop it with `agent-env gateway stop`)"
        )


def _list_runnables() -> int:
    from agentenv.bundles import runnables

    rows = runnables()
    out = console()
    out.print("What can run (agent-env run NAME):")
    for r in rows:
        where = "built-in" if r.builtin else str(r.path)
        tasks = f" [dim](tasks: {', '.join(r.tasks)})[/]" if len(r.tasks) > 1 else ""
        out.print(f"  [bold]{r.name}[/]  [dim]{where}[/]{tasks}")
    out.print("Or give the path of a task .toml file. Write your own: `agent-env schema task`.")
    return 0


async def _run(settings: Settings, inp: RunInput, *, detach: bool, json_out: bool) -> int:
    from agentenv import telemetry

    telemetry.setup(settings, "cli")
    with telemetry.span(f"agent-env run {inp.task_id}"):  # the trace's root (a null context when tracing is off)
        return await _start_and_follow(settings, inp, detach=detach, json_out=json_out)


async def _start_and_follow(settings: Settings, inp: RunInput, *, detach: bool, json_out: bool) -> int:
    from agentenv import runner
    from agentenv.temporal.client import connect

    wall_start = time.monotonic()
    gateway_ready = None
    if not settings.gateway.urls() and any(s.deploys_env for s in inp.steps):
        # Start the embedded gateway beside the Temporal server instead of inside the first step.
        from agentenv.gateway import embedded

        gateway_ready = asyncio.create_task(asyncio.to_thread(_start_gateway, embedded, settings))
    client = await connect(settings, on_notice=notice)
    if gateway_ready is not None:
        await gateway_ready
    if detach:
        handle = await runner.start(client, settings, inp)
        console().print(f"started run [bold]{handle.id}[/]")
        if url := settings.run_url(handle.id):
            console().print(f"  Temporal UI: {url}")
        console().print(
            f"  a worker executes it: `agent-env worker` if none runs; follow it with `agent-env runs show {handle.id}`"
        )
        return 0

    from agentenv.temporal.worker import create_worker

    worker = create_worker(client, settings)
    worker_task = asyncio.create_task(worker.run())
    handle = None  # type: ignore[assignment]  # None until the run starts (checked below)
    try:
        handle = await runner.start(client, settings, inp)
        if not json_out:
            console().print(f"[bold]{inp.task_id}[/] v{inp.task_version} · run [bold]{handle.id}[/]")
            if url := settings.run_url(handle.id):
                console().print(f"  [dim]Temporal UI:[/] {url}")
        state = await _follow(handle, inp, quiet=json_out)
    except asyncio.CancelledError:
        if handle is not None:
            console().print(
                f"\n[yellow]interrupted:[/] run {handle.id} is paused, not lost. It resumes when a worker "
                "runs: `agent-env worker` (or the next `agent-env run`)."
            )
        return 130
    finally:
        # Finished: no need for a graceful shutdown; the process exits right after printing.
        worker_task.cancel()
    if json_out:
        print(json.dumps(state.model_dump(mode="json"), indent=2))
    else:
        console().print(summary_line(state, time.monotonic() - wall_start))
    return 0 if state.status is RunStatus.PASSED else 1


async def _follow(handle, inp: RunInput, *, quiet: bool):
    """Wait for the result, printing steps as they finish (from the run's query)."""
    from datetime import UTC, datetime

    from agentenv import runner

    result = asyncio.create_task(runner.wait_result(handle))
    progress = Progress(max(len(s.id) for s in inp.steps), max(len(s.type) for s in inp.steps))
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
    return aio.run(_worker(settings, identity))


async def _worker(settings: Settings, identity: str | None) -> int:
    from datetime import timedelta

    from agentenv import telemetry
    from agentenv.temporal.client import connect
    from agentenv.temporal.drain import Draining
    from agentenv.temporal.worker import create_worker

    telemetry.setup(settings, "worker")
    health = None  # the health port's server, when asked for: its metrics need the client's runtime
    if settings.worker.health_port:
        from agentenv.temporal.health import WorkerHealth

        health = WorkerHealth(settings.worker.health_host, settings.worker.health_port)
    client = await connect(settings, on_notice=notice, runtime=health.runtime if health else None)
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
        from agentenv.providers.reaper import reap_forever

        reaper = asyncio.create_task(reap_forever(settings, client, settings.sandboxes.reap_every, notice))
    try:
        probes = health.serving(client, worker, draining=stop.is_set) if health else contextlib.nullcontext()
        async with probes, worker:  # leaving it shuts the worker down: no new tasks, running activities get the grace
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
