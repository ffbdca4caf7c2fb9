"""World dynamics: `workplace` event-driven and paced at 86,400x, trigger hit -> effect latency (with
and without a barrier), and trigger matching on the gateway's hot path.

Goals: workplace event-driven <= 3 s wall including the run's start; paced at 86,400 <= 3.5 s for the
3 virtual days (the floor is 3.0 s), every event at its exact virtual time; hit -> effect p50 <= 150 ms;
matching a call that matches nothing with 100 triggers registered <= 50 us. Baseline in the same run:
`agent-env run hello` (a run's fixed cost).
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
import tomllib
from pathlib import Path

from common import AGENT_ENV, exit_now, isolated_env, row, summarize, temp_dir, timed

RUNS = 5
HITS = 30
ROOT = Path(__file__).parent.parent


def run_json(env: dict, target: str) -> tuple[float, dict]:
    start = time.perf_counter()
    done = subprocess.run([AGENT_ENV, "run", target, "--json"], env=env, capture_output=True, text=True, timeout=120)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{target} failed: {done.stdout[-2000:]}{done.stderr[-2000:]}")
    return wall, json.loads(done.stdout)


def fired(state: dict) -> list[tuple[str, str]]:
    return [(e["trigger"], e["virtual_time"]) for e in state["world"]["events"] if e["kind"] == "fired"]


def paced_copy() -> Path:
    text = (ROOT / "agent_env/bundles/workplace/tasks/workplace.toml").read_text()
    text = text.replace('mode = "event_driven"', 'mode = "paced"\nrate = 86400')
    folder = temp_dir("agentenv-bench-world-") / "tasks"
    folder.mkdir()
    (folder / "workplace_paced.toml").write_text(text)
    return folder / "workplace_paced.toml"


def world_span(state: dict) -> float:
    """Real seconds from the world's start (trigger registration) to the end of its three days."""
    from datetime import datetime

    start = datetime.fromisoformat(state["steps"]["rules"]["started_at"])
    end = datetime.fromisoformat(state["steps"]["three_days"]["finished_at"])
    return (end - start).total_seconds()


HIT_TASK = """
id = "hits"
[clock]
start = "2026-05-01T09:00:00Z"
mode = "frozen"
[[triggers]]
id = "barrier"
when = { type = "tool_call", env = "pad", tool = "write_note", where = [{ path = "arguments.key", equals = "ping" }], barrier = "5s" }
actions = [{ type = "call_tool", env = "pad", tool = "write_note", arguments = { key = "pong", text = "${match.arguments.text}" } }]
repeat = true
[[triggers]]
id = "plain"
when = { type = "tool_call", env = "pad", tool = "write_note", where = [{ path = "arguments.key", equals = "tick" }] }
actions = [{ type = "call_tool", env = "pad", tool = "write_note", arguments = { key = "tock", text = "${match.arguments.text}" } }]
repeat = true
[[steps]]
id = "pad"
type = "deploy_env"
config = { env_id = "notes" }
[[steps]]
id = "rules"
type = "register_env_triggers"
depends_on = ["pad"]
[[steps]]
id = "hold"
type = "sleep"
depends_on = ["rules"]
config = { seconds = 600 }
"""


async def _note(mcp, key: str) -> str | None:
    return ((await mcp.call_tool("read_note", {"key": key})).structured_content or {}).get("text")


async def hit_latency(env: dict) -> dict:
    """An agent's call provokes a trigger; how soon is the action's effect visible?"""
    sys.path.insert(0, str(ROOT / "tests"))
    from gateway_util import mcp_client  # (importing the tests' conftest points AGENT_ENV_HOME at a test home)

    os.environ.update(env)  # after it: the daemons this starts are the isolated ones measure() stops

    from agent_env.config import load_settings
    from agent_env.gateway.embedded import connect as gateway_connect
    from agent_env.planning.tasks import parse_task
    from agent_env.temporal import launch
    from agent_env.temporal.worker import create_worker
    from agent_env.temporal_client.client import connect

    settings = load_settings()
    client = await connect(settings)
    # Shut down, not cancelled, at the end: a cancelled worker leaves its activity mid-cancel (a traceback on
    # stderr) and stays in the runtime's heartbeats after the server stops (a retry warning every second).
    async with create_worker(client, settings):
        handle = await launch.start_run(client, settings, parse_task(tomllib.loads(HIT_TASK), "hits"))
        while (state := await launch.query_state(handle)).steps["hold"].status != "running":
            await asyncio.sleep(0.05)
        instance = state.steps["pad"].outputs["instance"]
        async with gateway_connect(settings) as gateway:
            token = await gateway.token(instance, "agent")
            base = gateway.base_url
        plain, barrier, effect = [], [], []
        async with mcp_client(base, instance, token) as mcp:
            for i in range(HITS + 3):
                t = time.perf_counter()
                await mcp.call_tool("write_note", {"key": "other", "text": str(i)})
                plain.append(time.perf_counter() - t)
                t = time.perf_counter()
                await mcp.call_tool("write_note", {"key": "ping", "text": str(i)})
                barrier.append(time.perf_counter() - t)
                t = time.perf_counter()
                await mcp.call_tool("write_note", {"key": "tick", "text": str(i)})
                while await _note(mcp, "tock") != str(i):
                    await asyncio.sleep(0.002)
                effect.append(time.perf_counter() - t)
        await handle.cancel()
        await launch.wait_result(handle)  # its cancelled step settles before the worker stops
    ms = lambda xs: statistics.median(xs[3:]) * 1000  # noqa: E731 - the first calls warm connections
    return {
        "plain_call_ms": ms(plain),
        "barrier_call_ms": ms(barrier),
        "hit_to_effect_ms": ms(effect),
        "hit_to_effect_p90_ms": sorted(effect[3:])[int(len(effect[3:]) * 0.9)] * 1000,
    }


def matching_cost() -> dict:
    from agent_env.gateway.watch import Watcher
    from agent_env.spec.world_state import Watch

    watches = [
        Watch(
            trigger=f"t{i}",
            kind="tool_call",
            spec={
                "env": "desk",
                "tool": "send_email",
                "where": [{"path": "arguments.to", "contains": f"person{i}@example.com"}],
            },
        )
        for i in range(100)
    ]
    watcher = Watcher(watches)
    unwatched = {"agent": "sam", "role": "support", "tool": "list_tickets", "arguments": {}, "result": {}}
    watched = {
        "agent": "sam",
        "role": "support",
        "tool": "send_email",
        "arguments": {"to": ["nobody@example.com"], "body": "hi"},
        "result": {"id": "MSG-1"},
    }
    out = {}
    for name, call in (("unwatched_tool_us", unwatched), ("watched_tool_no_match_us", watched)):
        n = 20_000 if name.startswith("unwatched") else 2_000
        t = time.perf_counter()
        for _ in range(n):
            assert not watcher.calls(call)
        out[name] = (time.perf_counter() - t) / n * 1e6
    return out


def measure() -> dict:
    env = isolated_env()
    timed([AGENT_ENV, "server", "start"], env)
    timed([AGENT_ENV, "gateway", "start"], env)
    run_json(env, "workplace")  # warm both daemons and this install's caches
    hello = summarize([timed([AGENT_ENV, "run", "hello"], env)[0] for _ in range(RUNS)])["median"]
    event_runs = [run_json(env, "workplace") for _ in range(RUNS)]
    paced = paced_copy()
    paced_runs = [run_json(env, str(paced)) for _ in range(3)]
    exact = all(fired(state) == fired(event_runs[0][1]) for _, state in paced_runs)
    hits = asyncio.run(hit_latency(env))
    subprocess.run([AGENT_ENV, "server", "stop"], env=env, capture_output=True)
    subprocess.run([AGENT_ENV, "gateway", "stop"], env=env, capture_output=True)
    result = {
        "hello_s": hello,
        "workplace_event_driven_s": summarize([w for w, _ in event_runs])["median"],
        "workplace_paced_s": summarize([w for w, _ in paced_runs])["median"],
        "workplace_paced_world_span_s": summarize([world_span(s) for _, s in paced_runs])["median"],
        "paced_events_exact": exact,
        "events": len(fired(event_runs[0][1])),
        **hits,
        **matching_cost(),
    }
    print("world")
    row("baseline: agent-env run hello (warm)", f"{hello:.2f} s")
    row(
        f"workplace, event-driven ({result['events']} firings)",
        f"{result['workplace_event_driven_s']:.2f} s",
        "goal <= 3 s including the run's start",
    )
    row(
        "workplace, paced at 86,400 (3 virtual days)",
        f"{result['workplace_paced_s']:.2f} s",
        f"goal <= 3.5 s; the world's own span {result['workplace_paced_world_span_s']:.2f} s (floor 3.0); "
        f"every event at its exact virtual time: {'yes' if exact else 'NO'}",
    )
    row(
        "tool-call trigger: hit -> effect visible, p50",
        f"{result['hit_to_effect_ms']:.0f} ms",
        f"goal <= 150 ms; p90 {result['hit_to_effect_p90_ms']:.0f} ms",
    )
    row(
        "barrier: call that provokes a trigger, p50",
        f"{result['barrier_call_ms']:.0f} ms",
        f"plain call {result['plain_call_ms']:.1f} ms; overhead {result['barrier_call_ms'] - result['plain_call_ms']:.0f} ms",
    )
    row("matching, 100 triggers, tool nobody watches", f"{result['unwatched_tool_us']:.2f} us", "goal <= 50 us")
    row(
        "matching, 100 triggers on the tool, none match",
        f"{result['watched_tool_no_match_us']:.1f} us",
        "goal <= 50 us",
    )
    return result


if __name__ == "__main__":
    measure()
    exit_now()
