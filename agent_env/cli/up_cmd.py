"""`agent-env up`: everything a local install needs, running, and the explorer in the foreground.

It starts what is not running (the embedded Temporal server, gateway and background worker, when none is
configured; with a cluster, a worker in this process when none polls the task queue), then serves the
explorer on 127.0.0.1 until Ctrl-C. The way in is a one-time link printed here (Enter prints a new one):
the page never sees the admin token.
"""

from __future__ import annotations

import asyncio
import socket
import sys
import threading
from typing import TYPE_CHECKING

from agent_env.cli import aio
from agent_env.cli.output import console, notice
from agent_env.config import Settings, load_settings
from agent_env.errors import BadInput
from agent_env.ports import listening_socket

if TYPE_CHECKING:
    from agent_env.explorer.auth import Door

HOST = "127.0.0.1"


def up_command(port: int, open_browser: bool) -> int:
    settings = load_settings()
    sock = _bind(port)
    return aio.run(_up(settings, sock, open_browser))


def _bind(port: int) -> socket.socket:
    """The explorer's socket, bound now so a taken port is said plainly before anything starts."""
    try:
        sock = listening_socket(HOST, port)
    except OSError as e:
        raise BadInput(
            f"cannot serve the explorer on {HOST}:{port} ({e.strerror})", "pick another with --port"
        ) from None
    sock.set_inheritable(True)
    return sock


async def _up(settings: Settings, sock: socket.socket, open_browser: bool) -> int:
    import uvicorn

    from agent_env.explorer.auth import Door
    from agent_env.explorer.server import create_app
    from agent_env.temporal.worker import create_worker
    from agent_env.temporal_client.client import connect, workers_polling

    client = await connect(settings, on_notice=notice)
    if not settings.gateway.urls():
        from agent_env.gateway import embedded

        info, started = await asyncio.to_thread(embedded.start, settings, on_notice=notice)
        console().print(f"gateway {'started' if started else 'running'} at http://{info.address}")
    worker_task = None
    if settings.embedded:  # the embedded server's background worker: it outlives this explorer
        from agent_env.temporal import background

        info, started = await asyncio.to_thread(background.start, settings, on_notice=notice)
        console().print(f"background worker {'started' if started else 'running'} (pid {info.pid})")
    elif await workers_polling(client, settings):
        console().print(f"a worker already polls task queue '{settings.temporal.task_queue}'")
    else:
        worker_task = asyncio.create_task(create_worker(client, settings).run())
        console().print(f"worker on task queue '{settings.temporal.task_queue}' in this process")
    door = Door()
    port = sock.getsockname()[1]
    base = f"http://{HOST}:{port}"
    if settings.ui_base:
        console().print(f"Temporal UI: {settings.ui_base}")
    _print_link(base, door)
    again = "Enter prints a new link; " if _new_links_on_enter(base, door) else ""
    console().print(f"[dim]{again}Ctrl-C stops the explorer (and a worker this process runs).[/]")
    if open_browser:
        import webbrowser

        # The one-time link (never the admin token); a headless machine simply opens nothing.
        threading.Thread(target=webbrowser.open, args=(f"{base}/login?code={door.new_code()}",), daemon=True).start()
    server = uvicorn.Server(
        uvicorn.Config(create_app(settings, door, temporal=client), log_level="warning", access_log=False)
    )
    try:
        await server.serve(sockets=[sock])
    except asyncio.CancelledError:
        pass
    finally:
        if worker_task is not None:
            worker_task.cancel()
    console().print("explorer stopped")
    return 0


def _print_link(base: str, door: Door) -> None:
    console().print(f"explorer: [bold]{base}/login?code={door.new_code()}[/]  (works once, for 5 minutes)")


def _new_links_on_enter(base: str, door: Door) -> bool:
    """A new one-time link each time Enter is pressed here (a terminal only: never from a pipe's end)."""
    if not sys.stdin or not sys.stdin.isatty():
        return False

    def read() -> None:
        for _ in sys.stdin:
            _print_link(base, door)

    threading.Thread(target=read, daemon=True, name="explorer-links").start()
    return True
