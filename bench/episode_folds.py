"""Two gateway requests an episode no longer makes, each measured folded beside the old way in the same run.

- A trainer's first turn: the role token and the tool list in one request (`token_and_tools`) against a token
  request then a tool list (`token`, `list_tools`), on an instance of a running episode.
- A run's end as its record keeps it (`release.end_run`): the end carrying the trajectories against the end then
  a trajectory read, on an ended episode's run (the end is idempotent: later ends close nothing more).

Rounds alternate their order (folded first, then the old way first); per round, CPU per operation of the gateway
and of the caller (this process: the trainer, or the worker's part), and the wall time. Reported: the median of the
rounds' differences (folded - old) and in how many rounds the folded way was cheaper. Server, gateway and one worker
run as their own processes, as in bench/episodes.py.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import subprocess
import time

from common import AGENT_ENV, isolated_env, row
from episodes import NOTES, cpu_seconds, one_episode, our_pids

ROUNDS = 16
TIMES = 100  # operations per round


class TwoRequests:
    """The gateway client as an older caller uses it: the end, then each trajectory read on its own."""

    def __init__(self, gateway) -> None:
        self.gateway = gateway

    async def end_run(self, run_id: str, *, trajectories: bool = False):
        return await self.gateway.end_run(run_id)

    async def trajectory(self, instance: str, after: int = 0):
        return await self.gateway.trajectory(instance, after)


async def paired(label: str, pids: dict[str, int], folded, old) -> dict[str, float]:
    measured = {"gateway": pids["gateway"], "caller": os.getpid()}
    spent: dict[str, dict[str, list[float]]] = {"folded": {}, "old": {}}
    for r in range(ROUNDS):
        for name, play in (("folded", folded), ("old", old)) if r % 2 == 0 else (("old", old), ("folded", folded)):
            before = {n: cpu_seconds(p) for n, p in measured.items()}
            t = time.perf_counter()
            for _ in range(TIMES):
                await play()
            took = {"wall": (time.perf_counter() - t) / TIMES * 1000}
            took |= {n: (cpu_seconds(p) - before[n]) / TIMES * 1000 for n, p in measured.items()}
            for n, v in took.items():
                spent[name].setdefault(n, []).append(v)
    result = {}
    for n in ("gateway", "caller", "wall"):
        diffs = [f - o for f, o in zip(spent["folded"][n], spent["old"][n], strict=True)]
        old_ms = statistics.median(spent["old"][n])
        result[n] = statistics.median(diffs)
        row(
            f"{label}: {n} {'CPU' if n != 'wall' else 'time'}",
            f"{result[n]:+.2f} ms",
            f"folded - old, median of {ROUNDS} rounds (old {old_ms:.2f} ms); folded cheaper in "
            f"{sum(d < 0 for d in diffs)}/{ROUNDS}",
        )
    return result


async def measure_async(worker_pid: int) -> dict:
    from agent_env.config import load_settings
    from agent_env.episodes import Episodes, EpisodeSpec
    from agent_env.gateway.release import end_run
    from agent_env.planning.tasks import parse_task

    settings = load_settings()
    episodes = await Episodes.connect(settings, worker=False)
    try:
        spec = EpisodeSpec.from_task(parse_task(NOTES, "bench"), ["writer"], turn_timeout=600)
        for _ in range(3):
            await one_episode(episodes, spec)  # warm up
        pids = our_pids(settings, worker_pid)
        gateway, stores = await episodes.gateway(), await episodes.stores()

        episode = await spec.start(episodes)
        turn = await episode.next_turn()
        assert turn is not None and turn.offer.env
        instance, agent = turn.offer.env, turn.offer.agent

        async def first_turn_folded() -> None:
            await gateway.token_and_tools(instance, agent)

        async def first_turn_old() -> None:
            await gateway.list_tools(instance, await gateway.token(instance, agent))

        first = await paired("first turn's token + tools", pids, first_turn_folded, first_turn_old)
        async with turn.tools() as tools:
            for n in range(10):
                await tools.call("write_note", {"key": f"n{n}", "text": "x"})
        await turn.end("done")
        await episode.next_turn()
        await episode.result()
        old_client = TwoRequests(gateway)

        async def end_folded() -> None:
            await end_run(gateway, stores, episode.run_id)

        async def end_old() -> None:
            await end_run(old_client, stores, episode.run_id)  # type: ignore[arg-type]

        end = await paired("run's end as recorded", pids, end_folded, end_old)
        row("load", f"{os.getloadavg()[0]:.1f}", "(1-minute average at the end)")
        return {"first_turn_ms": first, "run_end_ms": end}
    finally:
        await episodes.close()


def measure() -> dict:
    print("episode folds (each folded gateway request beside the old way, paired rounds)")
    env = isolated_env()
    saved = dict(os.environ)
    os.environ.update(env)
    subprocess.run([AGENT_ENV, "server", "start"], env=env, capture_output=True, check=True, timeout=120)
    worker = subprocess.Popen([AGENT_ENV, "worker"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        return asyncio.run(measure_async(worker.pid))
    finally:
        worker.terminate()
        worker.wait(30)
        for what in ("gateway", "server"):
            subprocess.run([AGENT_ENV, what, "stop"], env=env, capture_output=True, timeout=60)
        os.environ.clear()
        os.environ.update(saved)


if __name__ == "__main__":
    measure()
