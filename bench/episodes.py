"""Trainer episodes: per-episode overhead, workflow start latency, and concurrency per worker.

- 20 episodes, one after another, each: start + one turn of 10 tool calls (MCP, one session) + end + result.
  Per-episode overhead = the episode's wall time minus its workflow start and minus the 10 tool calls
  (what the framework adds: deploying the env and the agent, offering the turn, taking the answer,
  grading, recording). Goal <= 50 ms (a peer framework takes ~88 ms for the same shape over WebSocket).
  Baseline in the same run: the same 10 calls made directly (the tool calls themselves).
- Concurrency: N episodes at once, each a 5-turn conversation with a hosted scripted partner; turn
  latency = from end_turn to the next turn being offered. N grows until p99 doubles its N=1 value.

Temporal dev server, gateway and one `agent-env worker` run as their own processes; the trainer here.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import time

from common import AGENT_ENV, isolated_env, row, summarize

EPISODES = 20
CALLS = 10
LADDER = (1, 5, 10, 20, 40, 80)
SAMPLES = 80  # turn latencies per step of the ladder, at least

NOTES = {
    "id": "bench-episode",
    "steps": [
        {"id": "pad", "type": "deploy_env", "config": {"env": "notes"}},
        {
            "id": "writer",
            "type": "deploy_agent",
            "depends_on": ["pad"],
            "config": {
                "env": "pad",
                "record": {
                    "name": "writer",
                    "type": "scripted",
                    "role": "agent",
                    "config": {"turns": [[{"say": "unused"}]]},
                },
            },
        },
        {
            "id": "write",
            "type": "prompt_agent",
            "depends_on": ["writer"],
            "config": {"agent": "writer", "prompt": "Write ten notes."},
        },
        {
            "id": "check",
            "type": "check_state",
            "depends_on": ["write"],
            "config": {
                "env": "pad",
                "checks": [{"name": "ten notes", "tool": "list_notes", "path": "count", "equals": CALLS}],
            },
        },
    ],
}


def conversation_task() -> dict:
    import copy

    task = copy.deepcopy(NOTES)
    task["steps"].insert(
        2,
        {
            "id": "boss",
            "type": "deploy_agent",
            "config": {
                "record": {"name": "boss", "type": "scripted", "config": {"turns": [[{"say": "And another."}]]}}
            },
        },
    )
    task["steps"][3]["depends_on"] = ["writer", "boss"]
    task["steps"][3]["config"]["conversation"] = {"partner": "boss", "max_turns": 5}
    task["steps"][4]["config"]["checks"][0]["equals"] = 0  # the conversation writes nothing
    return task


async def one_episode(episodes, spec) -> dict[str, float]:
    t0 = time.perf_counter()
    episode = await spec.start(episodes)
    t1 = time.perf_counter()
    turn = await episode.next_turn()
    calls = 0.0
    async with turn.tools() as tools:
        for n in range(CALLS):
            c = time.perf_counter()
            await tools.call("write_note", {"key": f"n{n}", "text": "x"})
            calls += time.perf_counter() - c
    await turn.end("done")
    assert await episode.next_turn() is None
    scores = await episode.result()
    assert scores == {"check": 1.0}, scores
    end = time.perf_counter()
    return {"start": t1 - t0, "total": end - t0, "calls": calls, "overhead": end - t1 - calls}


async def direct_calls(episodes, spec) -> float:
    """The baseline: the same 10 calls on a deployed instance, straight to the gateway."""
    episode = await spec.start(episodes)
    turn = await episode.next_turn()
    async with turn.tools() as tools:
        samples = []
        for _ in range(5):
            c = time.perf_counter()
            for n in range(CALLS):
                await tools.call("write_note", {"key": f"n{n}", "text": "x"})
            samples.append(time.perf_counter() - c)
    await turn.end("done")
    await episode.result()
    return summarize(samples)["median"]


async def conversation(episodes, spec, latencies: list[float]) -> None:
    episode = await spec.start(episodes)
    turn = await episode.next_turn()
    while turn is not None:
        t = time.perf_counter()
        await turn.end("ok")
        turn = await episode.next_turn()
        if turn is not None:
            latencies.append(time.perf_counter() - t)
    await episode.result()


async def measure_async() -> dict:
    from agentenv.config import load_settings
    from agentenv.episodes import Episodes, EpisodeSpec
    from agentenv.planning.tasks import parse_task

    settings = load_settings()
    episodes = await Episodes.connect(settings, worker=False)
    try:
        spec = EpisodeSpec.from_task(parse_task(NOTES, "bench"), ["writer"], turn_timeout=120)
        for _ in range(3):
            await one_episode(episodes, spec)  # warm up: imports, connections, caches
        baseline = await direct_calls(episodes, spec)
        runs = [await one_episode(episodes, spec) for _ in range(EPISODES)]
        start = summarize([r["start"] for r in runs])
        overhead = summarize([r["overhead"] for r in runs])
        total = summarize([r["total"] for r in runs])
        calls = summarize([r["calls"] for r in runs])
        row("workflow start p50", f"{start['median'] * 1000:.1f} ms", f"p90 {start['p90'] * 1000:.1f} ms")
        row(
            f"{CALLS} tool calls in an episode p50",
            f"{calls['median'] * 1000:.1f} ms",
            f"baseline (direct): {baseline * 1000:.1f} ms",
        )
        row(
            "per-episode overhead p50 (excl. start, calls)",
            f"{overhead['median'] * 1000:.1f} ms",
            f"p90 {overhead['p90'] * 1000:.1f} ms; goal <= 50 ms (peer ~88 ms)",
        )
        row("whole episode p50", f"{total['median'] * 1000:.1f} ms", f"{EPISODES} episodes, one after another")

        chat = EpisodeSpec.from_task(parse_task(conversation_task(), "bench"), ["writer"], turn_timeout=120)
        ladder: dict[int, float] = {}
        for n in LADDER:
            latencies: list[float] = []
            for _ in range(-(-SAMPLES // (4 * n))):  # rounds of n at once, until there are enough samples
                await asyncio.gather(*(conversation(episodes, chat, latencies) for _ in range(n)))
            ordered = sorted(latencies)
            p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
            ladder[n] = p99
            row(
                f"turn latency p99 with {n} concurrent episodes",
                f"{p99 * 1000:.1f} ms",
                f"p50 {summarize(latencies)['median'] * 1000:.1f} ms; {p99 / ladder[LADDER[0]]:.2f}x N=1",
            )
            if p99 > 2 * ladder[LADDER[0]]:
                break
        within = [n for n, p in ladder.items() if p <= 2 * ladder[LADDER[0]]]
        row(
            "concurrent episodes per worker before p99 doubles",
            f">= {max(within)}",
            "(the next step of the ladder doubled it)" if len(within) < len(ladder) else "(never doubled up to here)",
        )
        return {
            "start_p50_ms": start["median"] * 1000,
            "overhead_p50_ms": overhead["median"] * 1000,
            "calls_p50_ms": calls["median"] * 1000,
            "direct_calls_ms": baseline * 1000,
            "episode_p50_ms": total["median"] * 1000,
            "turn_p99_ms_by_concurrency": {n: p * 1000 for n, p in ladder.items()},
            "concurrent_before_p99_doubles": max(within),
        }
    finally:
        await episodes.close()


def measure() -> dict:
    print("episodes (a trainer playing an agent; server, gateway and one worker in their own processes)")
    env = isolated_env()
    saved = dict(os.environ)
    os.environ.update(env)
    subprocess.run([AGENT_ENV, "server", "start"], env=env, capture_output=True, check=True, timeout=120)
    worker = subprocess.Popen([AGENT_ENV, "worker"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        return asyncio.run(measure_async())
    finally:
        worker.terminate()
        worker.wait(30)
        for what in ("gateway", "server"):
            subprocess.run([AGENT_ENV, what, "stop"], env=env, capture_output=True, timeout=60)
        os.environ.clear()
        os.environ.update(saved)


if __name__ == "__main__":
    measure()
