"""Our `notes` env written in OpenEnv's own API, served and driven the way OpenEnv does it, in rounds on request.

Runs with the OpenEnv side venv's python (bench/peers.py makes it), never with ours. The env is an
`MCPEnvironment` with one FastMCP tool, `write_note(key, text)`, and a reset that clears the notes; it is
served by OpenEnv's `create_app` under uvicorn on 127.0.0.1 and driven by OpenEnv's `MCPToolClient`.

The server runs in a child process by default: our episodes cross processes too (trainer, gateway,
Temporal, worker), and OpenEnv deploys an env as its own server (a container or a Space), apart from the
trainer. `--in-process` serves from a thread of this process instead, the setup of earlier measurements.

Protocol (so the caller can interleave its own figures): after warming up it prints one JSON line
`{"ready": true, ...}`; then each line read on stdin (e.g. "round 3") runs one round and prints one JSON line:
  episode_ms   k episodes, each reset + 10 `call_tool("write_note")`, timed whole
  call_ms      single `call_tool` calls, each timed alone: the client's tool-calling path (HTTP /mcp in
               `openenv` 0.10, the WebSocket in `openenv-core` 0.3)
  ws_call_ms   single `step(CallToolAction)` calls over the env's WebSocket (the step path of both)
  cpu_ms_per_episode   CPU (user + system, this process and the server's) spent in the episodes, per episode
It exits on EOF.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from uuid import uuid4

from fastmcp import FastMCP
from openenv.core.env_server.mcp_environment import MCPEnvironment
from openenv.core.env_server.mcp_types import CallToolAction, CallToolObservation
from openenv.core.env_server.types import Observation, State

CALLS_PER_EPISODE = 10
WARMUP_EPISODES = 20
TICK_MS = 1000 / os.sysconf("SC_CLK_TCK")


class NotesEnvironment(MCPEnvironment):
    """The smallest equivalent of our `notes` app: notes by key, cleared by reset."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self) -> None:
        self._notes: dict[str, str] = {}
        mcp = FastMCP("notes")

        @mcp.tool
        def write_note(key: str, text: str) -> dict:
            """Store a note under a key."""
            self._notes[key] = text
            return {"key": key, "count": len(self._notes)}

        super().__init__(mcp)
        self._state = State(episode_id=str(uuid4()), step_count=0)

    def reset(self, seed=None, episode_id=None, **kwargs) -> Observation:
        self._notes.clear()
        self._state = State(episode_id=episode_id or str(uuid4()), step_count=0)
        return Observation(done=False, reward=0.0)

    def _step_impl(self, action, timeout_s=None, **kwargs) -> Observation:
        return Observation(done=False, reward=0.0, metadata={"error": f"no such action: {type(action).__name__}"})

    @property
    def state(self) -> State:
        return self._state


def make_app(sessions: int = 4):
    from openenv.core.env_server.http_server import create_app

    return create_app(
        NotesEnvironment,
        CallToolAction,
        CallToolObservation,
        env_name="notes",
        max_concurrent_envs=sessions,
    )


def serve(port: int, sessions: int = 4) -> None:
    """The env server alone (the child process): exits when its parent does."""
    import uvicorn

    parent = os.getppid()

    def follow_parent() -> None:
        while os.getppid() == parent:
            time.sleep(1)
        os._exit(0)

    threading.Thread(target=follow_parent, daemon=True).start()
    uvicorn.run(make_app(sessions), host="127.0.0.1", port=port, log_level="warning")


def serve_in_thread(port: int) -> None:
    import uvicorn

    # Quiet, as the child's log is (see main); a failing server shows as the client's error.
    server = uvicorn.Server(uvicorn.Config(make_app(), host="127.0.0.1", port=port, log_level="critical"))
    threading.Thread(target=server.run, daemon=True).start()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_ms(pids: list[int]) -> float:
    """User + system CPU of these processes so far (fields 14 and 15 of /proc/<pid>/stat)."""
    total = 0
    for pid in pids:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])
    return total * TICK_MS


async def connect(url: str, deadline: float):
    from openenv.core.mcp_client import MCPToolClient

    while True:
        client = MCPToolClient(base_url=url)
        try:
            await client.connect()
            return client
        except Exception:
            await client.close()
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.05)


async def episode(client) -> float:
    started = time.perf_counter()
    await client.reset()
    for i in range(CALLS_PER_EPISODE):
        await client.call_tool("write_note", key=f"note-{i}", text="a note")
    return (time.perf_counter() - started) * 1000


async def timed_calls(n: int, call) -> list[float]:
    samples = []
    for i in range(n):
        started = time.perf_counter()
        await call(i)
        samples.append((time.perf_counter() - started) * 1000)
    return samples


async def drive(url: str, pids: list[int], episodes: int, calls: int) -> None:
    client = await connect(url, time.monotonic() + 60)
    try:
        for _ in range(WARMUP_EPISODES):
            await episode(client)
        print(json.dumps({"ready": True, "pids": pids, "url": url}), flush=True)
        loop = asyncio.get_running_loop()
        while await loop.run_in_executor(None, sys.stdin.readline):
            cpu_before = cpu_ms(pids)
            episode_ms = [await episode(client) for _ in range(episodes)]
            cpu_per_episode = (cpu_ms(pids) - cpu_before) / episodes
            await client.reset()
            call_ms = await timed_calls(calls, lambda i: client.call_tool("write_note", key=f"k{i}", text="t"))
            ws_call_ms = await timed_calls(
                calls,
                lambda i: client.step(CallToolAction(tool_name="write_note", arguments={"key": f"w{i}", "text": "t"})),
            )
            round_ = {
                "episode_ms": episode_ms,
                "call_ms": call_ms,
                "ws_call_ms": ws_call_ms,
                "cpu_ms_per_episode": cpu_per_episode,
            }
            print(json.dumps(round_), flush=True)
    finally:
        await client.close()


def rss_mib(pids: list[int]) -> float:
    total = 0
    for pid in pids:
        with open(f"/proc/{pid}/statm") as statm:
            total += int(statm.read().split()[1])
    return total * os.sysconf("SC_PAGE_SIZE") / 2**20


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))] if ordered else float("nan")


async def density(url: str, pids: list[int], n: int, turns: int, think: tuple[float, float], at_once: int) -> dict:
    """n sessions at once (at most `at_once` connecting at a time), each a reset, held until all n are open (RSS
    read there), then `turns` turns: a sleep of `think` seconds and one tool call (the turn's overhead: OpenEnv
    has no turn of its own, so a turn costs it one call). The same seeded sleeps as the caller's."""
    import random

    warm = await connect(url, time.monotonic() + 60)
    await episode(warm)
    await warm.close()
    rng = random.Random(n)
    thinks = [[rng.uniform(*think) for _ in range(turns)] for _ in range(n)]
    gate, release, arrived = asyncio.Semaphore(at_once), asyncio.Event(), asyncio.Event()
    waiting, completed, failures, overheads = [0], [0], [], []
    rss_before, cpu_before = rss_mib(pids), cpu_ms(pids)

    def arrive() -> None:
        waiting[0] += 1
        if waiting[0] == n:
            arrived.set()

    async def session(times: list[float]) -> None:
        client = None
        try:
            async with gate:
                client = await connect(url, time.monotonic() + 120)
                await client.reset()
            arrive()
            await release.wait()
            for t in range(turns):
                await asyncio.sleep(times[t])
                started = time.perf_counter()
                await client.call_tool("write_note", key=f"turn-{t}", text="ok")
                overheads.append(time.perf_counter() - started)
            completed[0] += 1
        except Exception as e:
            failures.append(f"{type(e).__name__}: {str(e)[:200]}")
            if not release.is_set():
                arrive()
        finally:
            if client is not None:
                with contextlib.suppress(Exception):
                    await client.close()

    tasks = [asyncio.create_task(session(t)) for t in thinks]
    await arrived.wait()
    await asyncio.sleep(2)
    rss_plateau = rss_mib(pids)
    release.set()
    await asyncio.gather(*tasks)
    return {
        "completed": completed[0],
        "failures": len(failures),
        "failure_examples": sorted(set(failures))[:5],
        "overhead_p50_ms": percentile(overheads, 0.5) * 1000,
        "overhead_p99_ms": percentile(overheads, 0.99) * 1000,
        "cpu_ms_per_turn": (cpu_ms(pids) - cpu_before) / (n * turns),
        "mib_per_waiting_episode": (rss_plateau - rss_before) / n,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--serve", type=int, metavar="PORT", help="be the env server only (the child process)")
    parser.add_argument("--in-process", action="store_true", help="serve from a thread of this process")
    parser.add_argument("--episodes", type=int, default=20, help="episodes per round")
    parser.add_argument("--calls", type=int, default=20, help="single calls per round, per path")
    parser.add_argument("--density", type=int, metavar="N", help="hold N sessions at once instead (one JSON line)")
    parser.add_argument("--sessions", type=int, default=4, help="the server's max_concurrent_envs (--serve)")
    parser.add_argument("--turns", type=int, default=5, help="--density: turns per session")
    parser.add_argument("--think", default="2,10", help="--density: each turn's sleep, uniform in LOW,HIGH s")
    parser.add_argument("--at-once", type=int, default=25, help="--density: sessions connecting at a time")
    args = parser.parse_args()
    if args.serve:
        serve(args.serve, args.sessions)
        return
    port = free_port()
    server = None
    # The server's log is shown only if the run fails: openenv-core 0.3 logs a traceback for every client
    # that closes its WebSocket, which is how every run ends.
    server_log = tempfile.TemporaryFile("w+")
    if args.in_process:
        serve_in_thread(port)
        pids = [os.getpid()]
    else:
        sessions = str(max(4, (args.density or 0) + 1))
        server = subprocess.Popen(
            [sys.executable, __file__, "--serve", str(port), "--sessions", sessions], stderr=server_log
        )
        pids = [os.getpid(), server.pid]
    try:
        url = f"http://127.0.0.1:{port}"
        if args.density:
            low, high = (float(x) for x in args.think.split(","))
            figures = asyncio.run(density(url, pids, args.density, args.turns, (low, high), args.at_once))
            print(json.dumps(figures), flush=True)
        else:
            asyncio.run(drive(url, pids, args.episodes, args.calls))
    except BaseException:
        server_log.seek(0)
        sys.stderr.write("the OpenEnv server's log:\n" + server_log.read()[-4000:])
        raise
    finally:
        if server is not None:
            server.terminate()
            server.wait(timeout=10)


if __name__ == "__main__":
    main()
