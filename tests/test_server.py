"""The embedded Temporal dev server as a managed daemon, and its failure modes."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import threading
import time

import pytest
from conftest import free_port

from agent_env.config import ServerSettings, Settings
from agent_env.errors import ServerError
from agent_env.temporal import background
from agent_env.temporal_client import server
from agent_env.temporal_client.client import connect


@pytest.fixture
def own_settings(tmp_path):
    s = Settings(state_dir=tmp_path / "home", server=ServerSettings(port=free_port(), ui_port=free_port(), ui=False))
    yield s
    background.stop_all(s)
    server.stop(s)


def test_start_reuse_status_stop(own_settings):
    info = server.start(own_settings)
    assert server.status(own_settings).running
    with socket.create_connection((info.ip, info.port), timeout=2):
        pass
    again = server.start(own_settings)
    assert again.pid == info.pid, "a running server is reused, not started twice"
    stopped = server.stop(own_settings)
    assert stopped is not None and stopped.pid == info.pid
    st = server.status(own_settings)
    assert not st.running and not st.stale_pidfile
    assert server.stop(own_settings) is None


def test_port_taken_by_another_program(own_settings):
    with socket.socket() as other:
        other.bind(("127.0.0.1", own_settings.server.port))
        other.listen()
        with pytest.raises(ServerError) as e:
            server.start(own_settings)
    msg = str(e.value)
    assert f"127.0.0.1:{own_settings.server.port} is already in use" in msg
    program = __import__("pathlib").Path(f"/proc/{os.getpid()}/comm").read_text().strip()
    assert f"by pid {os.getpid()} ({program})" in msg  # names the program holding it (this test process)
    assert "AGENT_ENV_SERVER_PORT" in msg and "TEMPORAL_ADDRESS" in msg
    assert not server.status(own_settings).running
    assert not (own_settings.state_dir / "temporal" / "server.json").exists(), "nothing left behind"


def test_an_http_api_port_taken_between_pick_and_bind_is_picked_again(own_settings, monkeypatch):
    with socket.socket() as other:  # another process takes the port picked for the HTTP API before the server binds it
        other.bind(("127.0.0.1", 0))
        other.listen()
        taken = other.getsockname()[1]
        picks = iter([taken])
        monkeypatch.setattr(server, "free_port", lambda ip: next(picks, None) or free_port())
        notices: list[str] = []
        info = server.start(own_settings, on_notice=notices.append)
    assert server.status(own_settings).running and info.port == own_settings.server.port
    assert any(f"HTTP API port {taken} was taken" in n for n in notices), notices


def _dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


@pytest.mark.parametrize("pidfile", ["dead", "corrupt", "someone-else"])
def test_stale_pidfile_is_replaced(own_settings, pidfile):
    paths = server.Paths(own_settings)
    paths.dir.mkdir(parents=True)
    if pidfile == "corrupt":
        paths.pidfile.write_text("{not json")
    else:
        pid = _dead_pid() if pidfile == "dead" else 1  # pid 1 is alive but is not our server
        paths.pidfile.write_text(
            json.dumps(
                {
                    "pid": pid,
                    "ip": "127.0.0.1",
                    "port": own_settings.server.port,
                    "log": str(paths.log),
                    "started_at": 0,
                    "extra": {"ui_port": None, "db": str(paths.db)},
                }
            )
        )
    assert server.status(own_settings).stale_pidfile
    notices = []
    info = server.start(own_settings, on_notice=notices.append)
    assert notices and (
        "stale embedded Temporal server pidfile" in notices[0]
        or "unreadable embedded Temporal server pidfile" in notices[0]
    )
    assert server.status(own_settings).running and info.pid != 1


def test_server_exiting_at_start_shows_its_log(own_settings, monkeypatch, tmp_path):
    fake = tmp_path / "temporal"
    fake.write_text("#!/bin/sh\necho 'boom: cannot open database' >&2\nexit 3\n")
    fake.chmod(0o755)
    monkeypatch.setattr(server, "binary_path", lambda: fake)
    with pytest.raises(ServerError) as e:
        server.start(own_settings)
    assert "exited during start-up (exit code 3)" in str(e.value) and "boom: cannot open database" in str(e.value)
    assert not server.status(own_settings).stale_pidfile


async def test_runs_survive_a_server_restart(own_settings):
    """Histories live in the SQLite file: a workflow started before a stop is there after a start."""
    from agent_env.task_lookup import resolve_target
    from agent_env.temporal import launch
    from agent_env.temporal_client.client import connect

    server.start(own_settings)
    client = await connect(own_settings)
    handle = await launch.start_run(client, own_settings, resolve_target("hello"))
    server.stop(own_settings)
    server.start(own_settings)
    client = await connect(own_settings)
    desc = await client.get_workflow_handle(handle.id).describe()
    assert desc.status.name == "RUNNING"
    assert desc.search_attributes.get("AgentEnvTaskId") == ["hello"]


def test_the_server_keeps_a_thousand_waiting_episodes_cached(own_settings):
    """A run waiting for a turn (an update) that the server evicts from its mutable-state cache loses its pending
    updates ("workflow update was aborted"): at 1,024 entries, half of 1,000 episodes waiting at once were lost
    (bench/episodes_density.py --n 1000). The cache the running server got holds 1,000 of them (2 entries each)."""
    info = server.start(own_settings)
    with open(f"/proc/{info.pid}/cmdline", "rb") as f:
        argv = f.read().decode().split("\0")
    sizes = [int(a.split("=", 1)[1]) for a in argv if a.startswith("history.hostLevelCacheMaxSize=")]
    assert sizes == [server.CACHED_RUNS] and sizes[0] >= 2 * 1000, argv


async def test_a_worker_started_beside_the_server_waits_for_it(own_settings):
    """`agent-env run` starts the background worker and the server at once: the worker's connect waits while
    the server is being started, and connects once it is up."""
    waiting = asyncio.create_task(connect(own_settings, start_server=False, server_grace=30.0))
    await asyncio.sleep(0.3)
    assert not waiting.done(), "it waits while the start has not begun yet (a second's grace)"
    await asyncio.to_thread(server.start, own_settings)
    client = await asyncio.wait_for(waiting, 30)
    assert await client.service_client.check_health()


async def test_a_worker_waiting_for_a_server_nobody_starts_gives_up_at_once(own_settings):
    """A server start that failed (or never began) ends the worker's wait about a second later, not at the grace's
    end; while a process holds the server's lock (starting it), the worker keeps waiting."""
    began = time.monotonic()
    with pytest.raises(ServerError, match="not running"):
        await connect(own_settings, start_server=False, server_grace=30.0)
    assert time.monotonic() - began < 10, "nobody starts it: the wait ends long before its 30 s grace"

    held, release = threading.Event(), threading.Event()

    def starting() -> None:  # stands for a starter holding the lock: a server slow to start
        with server.Paths(own_settings).daemon.locked():
            held.set()
            release.wait(30)

    starter = threading.Thread(target=starting)
    starter.start()
    held.wait(10)
    try:
        waiting = asyncio.create_task(connect(own_settings, start_server=False, server_grace=30.0))
        await asyncio.sleep(2.5)
        assert not waiting.done(), "a server being started is waited for, past the one-second idle grace"
    finally:
        release.set()
        starter.join()
    with pytest.raises(ServerError, match="not running"):
        await asyncio.wait_for(waiting, 10)
