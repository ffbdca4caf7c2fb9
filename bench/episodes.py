"""Trainer episodes beside OpenEnv, measured in the same run: latency, CPU, throughput.

- Rounds (7, order alternated each round, medians of the rounds' p50s): ours, 20 episodes one after another,
  each start + one turn of 10 tool calls (REST, the trainer's default) + end + result; OpenEnv (bench/peers.py),
  20 episodes of reset + 10 MCP tool calls on its own env server. Goals: episode p50 <= 2x OpenEnv's; one
  tool call in an episode <= 1.1x OpenEnv's call; CPU per episode <= 60 ms across all our processes (Temporal
  server, gateway, worker, trainer: utime+stime from /proc around the round).
- The floor (bench/bare_temporal_episode.py, rounds interleaved with ours): the same episode as one bare
  Temporal workflow, its activities returning at once, on our server; what one workflow per episode costs.
  And the same episode as two updates of one long-lived workflow: what episodes not each a workflow would cost.
- Throughput: 20 episodes at once, each played back to back, on one worker. Goal >= 30 episodes/s.
- Per-episode overhead (excluding start and the calls) and the direct-call baseline, as before.
- Concurrency ladder: N episodes at once, each a 5-turn conversation with a hosted scripted partner; turn
  latency = from end_turn to the next turn being offered. N grows until p99 doubles its N=1 value.

Temporal dev server, gateway and one `agent-env worker` run as their own processes; the trainer here.
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import subprocess
import time

from bare_temporal_episode import Floor
from common import AGENT_ENV, isolated_env, row, summarize
from peers import OpenEnvPeer

EPISODES = 20
CALLS = 10
LADDER = (1, 5, 10, 20, 40, 80)
ROUNDS = 7
CONCURRENT = 20  # episodes at once for the throughput figure
PER_PLAYER = 5  # episodes each of them plays back to back
SAMPLES = 80  # turn latencies per step of the ladder, at least

NOTES = {
    "id": "bench-episode",
    "steps": [
        {"id": "pad", "type": "deploy_env", "config": {"env_id": "notes"}},
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


async def one_episode(episodes, spec, call_samples: list[float] | None = None) -> dict[str, float]:
    t0 = time.perf_counter()
    episode = await spec.start(episodes)
    t1 = time.perf_counter()
    turn = await episode.next_turn()
    calls = 0.0
    async with turn.tools() as tools:
        for n in range(CALLS):
            c = time.perf_counter()
            await tools.call("write_note", {"key": f"n{n}", "text": "x"})
            took = time.perf_counter() - c
            calls += took
            if call_samples is not None:
                call_samples.append(took)
    await turn.end("done")
    assert await episode.next_turn() is None
    scores = await episode.result()
    assert scores == {"check": 1.0}, scores
    end = time.perf_counter()
    return {"start": t1 - t0, "total": end - t0, "calls": calls, "overhead": end - t1 - calls}


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process so far (its threads included)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def our_pids(settings, worker_pid: int) -> dict[str, int]:
    """The processes an episode runs in: the daemons' from their pidfiles, the worker, this trainer."""
    pids = {"worker": worker_pid, "trainer": os.getpid()}
    for name, pidfile in (("server", "temporal/server.json"), ("gateway", "gateway/gateway.json")):
        pids[name] = json.loads((settings.state_dir / pidfile).read_text())["pid"]
    return pids


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


async def measure_async(peer: OpenEnvPeer | None, worker_pid: int, rounds: int = ROUNDS) -> dict:
    """`peer` None: only ours beside the floor (`--floor`): the rounds, the CPU and the floor's line."""
    from agent_env.config import load_settings
    from agent_env.episodes import Episodes, EpisodeSpec
    from agent_env.planning.tasks import parse_task

    settings = load_settings()
    episodes = await Episodes.connect(settings, worker=False)
    try:
        spec = EpisodeSpec.from_task(parse_task(NOTES, "bench"), ["writer"], turn_timeout=120)
        for _ in range(5):
            await one_episode(episodes, spec)  # warm up: imports, connections, caches
        pids = our_pids(settings, worker_pid)
        baseline = await direct_calls(episodes, spec)

        ours, theirs, runs, call_samples = [], [], [], []
        cpu_by_process: dict[str, list[float]] = {name: [] for name in pids}
        floor_ms, floor_cpu_ms, lane_ms, lane_cpu_ms = [], [], [], []
        floor_by_process: dict[str, list[float]] = {"server": [], "trainer": []}  # the floor's rounds
        floor = await Floor(episodes.client).__aenter__()

        async def our_round() -> None:
            before = {name: cpu_seconds(pid) for name, pid in pids.items()}
            done = [await one_episode(episodes, spec, call_samples) for _ in range(EPISODES)]
            for name, pid in pids.items():
                cpu_by_process[name].append((cpu_seconds(pid) - before[name]) / EPISODES * 1000)
            runs.extend(done)
            ours.append(summarize([r["total"] for r in done])["median"] * 1000)

        async def their_round() -> None:
            theirs.append(await asyncio.to_thread(peer.round))  # blocking pipe I/O: keep the loop free

        async def bare_round(play, latencies: list[float], cpus: list[float]) -> None:
            # A bare Temporal episode: its worker and client are this process, its server is ours.
            measured = ("server", "trainer")
            before = {name: cpu_seconds(pids[name]) for name in measured}
            took = [await play() for _ in range(EPISODES)]
            spent = {n: (cpu_seconds(pids[n]) - before[n]) / EPISODES * 1000 for n in measured}
            cpus.append(sum(spent.values()))
            latencies.append(summarize(took)["median"] * 1000)
            if cpus is floor_cpu_ms:
                for n in measured:
                    floor_by_process[n].append(spent[n])

        async def floor_round() -> None:
            await bare_round(floor.episode, floor_ms, floor_cpu_ms)
            await bare_round(floor.lane_episode, lane_ms, lane_cpu_ms)

        for r in range(rounds):
            order = (our_round, their_round, floor_round) if r % 2 == 0 else (floor_round, their_round, our_round)
            for play in order:
                if play is not their_round or peer is not None:
                    await play()
        await floor.__aexit__(None, None, None)
        if peer is None:
            return floor_only(ours, cpu_by_process, floor_ms, floor_cpu_ms, floor_by_process)

        episode_p50 = statistics.median(ours)
        peer_p50 = statistics.median(statistics.median(t["episode_ms"]) for t in theirs)
        peer_call = statistics.median(statistics.median(t["call_ms"]) for t in theirs)
        peer_cpu = statistics.median(t["cpu_ms_per_episode"] for t in theirs)
        call_p50 = summarize(call_samples)["median"] * 1000
        cpu = {name: statistics.median(samples) for name, samples in cpu_by_process.items()}
        cpu_total = sum(cpu.values())
        start = summarize([r["start"] for r in runs])
        overhead = summarize([r["overhead"] for r in runs])
        row(
            "episode p50 (start + 10 calls + end + result)",
            f"{episode_p50:.1f} ms",
            f"OpenEnv (reset + 10 calls) {peer_p50:.1f} ms: {episode_p50 / peer_p50:.2f}x; goal <= 2x",
        )
        row(
            "one tool call in an episode p50",
            f"{call_p50:.2f} ms",
            f"OpenEnv's call {peer_call:.2f} ms: {call_p50 / peer_call:.2f}x; goal <= 1.1x",
        )
        row(
            "CPU per episode, all processes",
            f"{cpu_total:.1f} ms",
            ", ".join(f"{n} {v:.1f}" for n, v in cpu.items()) + f"; OpenEnv {peer_cpu:.1f} ms; goal <= 60 ms",
        )
        floor_p50, floor_cpu = statistics.median(floor_ms), statistics.median(floor_cpu_ms)
        row(
            "bare Temporal episode (the floor) p50",
            f"{floor_p50:.1f} ms",
            f"CPU {floor_cpu:.1f} ms (server + client/worker); ours {episode_p50 / floor_p50:.2f}x its latency, "
            f"{cpu_total / floor_cpu:.2f}x its CPU; it alone is {floor_p50 / peer_p50:.2f}x OpenEnv",
        )
        lane_p50, lane_cpu = statistics.median(lane_ms), statistics.median(lane_cpu_ms)
        row(
            "  the same as two updates of one long-lived workflow",
            f"{lane_p50:.1f} ms",
            f"CPU {lane_cpu:.1f} ms: {lane_p50 / floor_p50:.2f}x the floor's latency, {lane_cpu / floor_cpu:.2f}x its CPU",
        )
        row("workflow start p50", f"{start['median'] * 1000:.1f} ms", f"p90 {start['p90'] * 1000:.1f} ms")
        row(
            "per-episode overhead p50 (excl. start, calls)",
            f"{overhead['median'] * 1000:.1f} ms",
            f"p90 {overhead['p90'] * 1000:.1f} ms; 10 calls made directly: {baseline * 1000:.1f} ms",
        )

        async def player(done: list[float]) -> None:
            for _ in range(PER_PLAYER):
                await one_episode(episodes, spec)
                done.append(time.perf_counter())

        finished: list[float] = []
        t0 = time.perf_counter()
        await asyncio.gather(*(player(finished) for _ in range(CONCURRENT)))
        throughput = len(finished) / (time.perf_counter() - t0)
        row(
            f"episodes per second, {CONCURRENT} at once",
            f"{throughput:.1f}/s",
            f"{len(finished)} episodes on one worker (2 cores); goal >= 30/s",
        )

        chat = EpisodeSpec.from_task(parse_task(conversation_task(), "bench"), ["writer"], turn_timeout=120)
        # Warm up: the gateway loads the A2A SDK when it serves its first hosted agent (here, the partner).
        await conversation(episodes, chat, [])
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
            "episode_p50_ms": episode_p50,
            "openenv_episode_p50_ms": peer_p50,
            "episode_vs_openenv": episode_p50 / peer_p50,
            "call_p50_ms": call_p50,
            "openenv_call_p50_ms": peer_call,
            "call_vs_openenv": call_p50 / peer_call,
            "cpu_ms_per_episode": cpu_total,
            "cpu_ms_per_episode_by_process": cpu,
            "bare_temporal_episode_p50_ms": floor_p50,
            "bare_temporal_episode_cpu_ms": floor_cpu,
            "bare_temporal_lane_episode_p50_ms": lane_p50,
            "bare_temporal_lane_episode_cpu_ms": lane_cpu,
            "openenv_cpu_ms_per_episode": peer_cpu,
            "episodes_per_second_at_20": throughput,
            "start_p50_ms": start["median"] * 1000,
            "overhead_p50_ms": overhead["median"] * 1000,
            "direct_calls_ms": baseline * 1000,
            "turn_p99_ms_by_concurrency": {n: p * 1000 for n, p in ladder.items()},
            "concurrent_before_p99_doubles": max(within),
        }
    finally:
        await episodes.close()


def floor_only(ours, cpu_by_process, floor_ms, floor_cpu_ms, floor_by_process) -> dict:
    """The floor's line alone (`--floor`), each round's latencies (ours, the floor's), the floor's CPU by process,
    and the ratios of each round to the floor's round beside it (median and range: the load moves both)."""
    episode_p50, floor_p50 = statistics.median(ours), statistics.median(floor_ms)
    cpu = {name: statistics.median(samples) for name, samples in cpu_by_process.items()}
    cpu_total, floor_cpu = sum(cpu.values()), statistics.median(floor_cpu_ms)
    rounds = ", ".join(f"{o:.0f}/{f:.0f}" for o, f in zip(ours, floor_ms, strict=True))
    ours_cpu = [sum(samples) for samples in zip(*cpu_by_process.values(), strict=True)]
    cpu_ratios = sorted(o / f for o, f in zip(ours_cpu, floor_cpu_ms, strict=True))
    latency_ratios = sorted(o / f for o, f in zip(ours, floor_ms, strict=True))
    row("episode p50 (start + 10 calls + end + result)", f"{episode_p50:.1f} ms", f"rounds (ours/floor ms): {rounds}")
    row("CPU per episode, all processes", f"{cpu_total:.1f} ms", ", ".join(f"{n} {v:.1f}" for n, v in cpu.items()))
    split = ", ".join(f"{n} {statistics.median(v):.1f}" for n, v in floor_by_process.items())
    row(
        "bare Temporal episode (the floor) p50",
        f"{floor_p50:.1f} ms",
        f"CPU {floor_cpu:.1f} ms ({split}: its worker and client are the trainer); ours {episode_p50 / floor_p50:.2f}x "
        f"its latency, {cpu_total / floor_cpu:.2f}x its CPU",
    )
    row(
        "  round by round (ours / the floor's beside it)",
        f"{statistics.median(cpu_ratios):.2f}x CPU",
        f"CPU {cpu_ratios[0]:.2f}-{cpu_ratios[-1]:.2f}x; latency {statistics.median(latency_ratios):.2f}x "
        f"({latency_ratios[0]:.2f}-{latency_ratios[-1]:.2f}x); load {os.getloadavg()[0]:.1f}",
    )
    return {
        "episode_p50_ms": episode_p50,
        "cpu_ms_per_episode": cpu_total,
        "cpu_ms_per_episode_by_process": cpu,
        "bare_temporal_episode_p50_ms": floor_p50,
        "bare_temporal_episode_cpu_ms": floor_cpu,
        "latency_vs_floor": episode_p50 / floor_p50,
        "cpu_vs_floor": cpu_total / floor_cpu,
        "cpu_vs_floor_by_round": cpu_ratios,
        "latency_vs_floor_by_round": latency_ratios,
        "bare_temporal_episode_cpu_ms_by_process": {n: statistics.median(v) for n, v in floor_by_process.items()},
    }


def measure(floor: bool = False, rounds: int = ROUNDS) -> dict:
    """`floor`: only ours beside the bare Temporal episode (no OpenEnv, throughput or ladder)."""
    print("episodes (a trainer playing an agent; server, gateway and one worker in their own processes) beside OpenEnv")
    env = isolated_env()
    saved = dict(os.environ)
    os.environ.update(env)
    subprocess.run([AGENT_ENV, "server", "start"], env=env, capture_output=True, check=True, timeout=120)
    worker = subprocess.Popen([AGENT_ENV, "worker"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        if floor:
            return asyncio.run(measure_async(None, worker.pid, rounds))
        with OpenEnvPeer(episodes=EPISODES) as peer:
            return asyncio.run(measure_async(peer, worker.pid, rounds))
    finally:
        worker.terminate()
        worker.wait(30)
        for what in ("gateway", "server"):
            subprocess.run([AGENT_ENV, what, "stop"], env=env, capture_output=True, timeout=60)
        os.environ.clear()
        os.environ.update(saved)


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--floor", action="store_true", help="only ours beside the bare Temporal episode")
    parser.add_argument("--rounds", type=int, default=ROUNDS, help=f"rounds of each (default {ROUNDS})")
    args = parser.parse_args()
    measure(floor=args.floor, rounds=args.rounds)
