"""Workers: the task-run workflow and its activities on the orchestration task queue, and the loop a worker
process runs until it is told to drain (`agent-env worker`, the background worker)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING

from temporalio.worker import Worker

from agent_env import telemetry
from agent_env.activities import RunActivities
from agent_env.config import Settings
from agent_env.providers.reaper import reap_forever
from agent_env.temporal.drain import Draining
from agent_env.temporal.sealed_worker import SealedWorker
from agent_env.temporal_client import seals
from agent_env.temporal_client.client import connect
from agent_env.workflows.task_run import TaskRun

if TYPE_CHECKING:
    from temporalio.client import Client


def create_worker(
    client: Client, settings: Settings, *, identity: str | None = None, draining: Draining | None = None
) -> Worker:
    """`draining`: how long a shutdown lets running activities finish (`agent-env worker`'s is
    `[worker] drain_timeout`); without one, 5 s. Either way a shutdown hands back what is still running."""
    draining = draining or Draining(timedelta(seconds=5))
    activities = RunActivities(settings)
    return Worker(
        client,
        task_queue=settings.temporal.task_queue,
        workflows=[TaskRun],
        activities=[
            activities.named_activity,  # agentenv.step.<type>, agentenv.world.<verb>
            activities.run_step,
            activities.record_run,
            activities.world_action,
            activities.push_world,
            activities.pace,
            activities.prompt_marks,
            activities.agent_ask,
            activities.prompt_finish,
            activities.release_sandboxes,
        ],
        identity=identity,
        # After a worker dies, its cached workflows move to another worker this soon.
        sticky_queue_schedule_to_start_timeout=timedelta(seconds=5),
        graceful_shutdown_timeout=draining.grace,
        # Runs, updates and activities are checked against the install's plan key before anything acts.
        interceptors=[draining, SealedWorker(seals.load(settings))],
    )


def say(line: str) -> None:
    """What the worker tells its operator (its terminal, or the background worker's log)."""
    print(line, flush=True)


def note_to_stderr(message: str) -> None:
    print(f"note: {message}", file=sys.stderr, flush=True)


async def run_worker(
    settings: Settings,
    identity: str | None,
    *,
    start_server: bool = True,
    serving: Callable[[Client], contextlib.AbstractAsyncContextManager] | None = None,
    note: Callable[[str], None] = note_to_stderr,
    server_grace: float = 0.0,
) -> int:
    """A worker until SIGTERM or Ctrl-C (which drain it). `serving`: what else to serve while it polls (the
    background worker's control socket); it stops first, when the drain begins. `note`: where notices go.
    `server_grace`: how long the embedded server may take to appear (see `connect`)."""
    telemetry.setup(settings, "worker")
    health = None  # the health port's server, when asked for: its metrics need the client's runtime
    if settings.worker.health_port:
        from agent_env.temporal.health import WorkerHealth  # (its HTTP server's modules: only when asked for)

        health = WorkerHealth(settings.worker.health_host, settings.worker.health_port)
    client = await connect(
        settings,
        start_server=start_server,
        on_notice=note,
        runtime=health.runtime if health else None,
        server_grace=server_grace,
    )
    draining = Draining(timedelta(seconds=settings.worker.drain_timeout))
    worker = create_worker(client, settings, identity=identity, draining=draining)
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):  # replaces the CLI's Ctrl-C handler: the first one drains
        asyncio.get_running_loop().add_signal_handler(sig, _drain_or_exit, stop, sig)
    say(
        f"worker on task queue '{settings.temporal.task_queue}' at {settings.address} "
        f"(namespace {settings.temporal.namespace}); Ctrl-C or SIGTERM drains it, a second one stops it at once"
    )
    reaper = None
    if settings.sandboxes.reap_every > 0:
        reaper = asyncio.create_task(reap_forever(settings, client, settings.sandboxes.reap_every, note))
    try:
        probes = health.serving(client, worker, draining=stop.is_set) if health else contextlib.nullcontext()
        # Leaving shuts the worker down: no new tasks, running activities get the grace.
        async with probes, worker, serving(client) if serving else contextlib.nullcontext():
            await stop.wait()
            say(draining.begin())
    finally:
        if reaper is not None:
            reaper.cancel()
    say(draining.outcome())
    say("worker stopped")
    return 0


def _drain_or_exit(stop: asyncio.Event, sig: int) -> None:
    """The first SIGTERM or Ctrl-C drains the worker; a second exits now. Activities still running then are
    retried on another worker once their heartbeat (or start-to-close) timeout notices."""
    if not stop.is_set():
        stop.set()
        return
    say("stopping at once: activities still running go to other workers when their heartbeats lapse")
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(128 + sig)
