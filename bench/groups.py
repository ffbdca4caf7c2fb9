"""Groups of rollouts: 8 rollouts from one start state (the env deployed and loaded once, forked per rollout)
vs 8 independent episodes of the same task, with the same trainer actions.

Each rollout: next_turn, 10 tool calls (REST), end, result; the 8 run at once either way. The task's env
loads a data file of notes (500, then 5,000), so loading is real work that a fork replaces with a SQLite backup.
Figures per rollout: wall (the batch's wall time / 8) and CPU, summed over every process involved (this one,
the worker, the gateway, the Temporal server: each process whose environment carries this bench's
AGENT_ENV_HOME), from utime + stime in /proc/<pid>/stat before and after. Rounds alternate the two shapes;
medians are reported.
"""

from __future__ import annotations

import asyncio
import copy
import json
import os
import subprocess
import time
from pathlib import Path

import episodes as episode_bench
from common import AGENT_ENV, isolated_env, row, summarize, temp_dir

SIZE = 8
CALLS = 10
NOTE_COUNTS = (500, 5000)  # the data file's size: a few hundred notes, and a bigger world
ROUNDS = 7
TICK = os.sysconf("SC_CLK_TCK")


def task(notes: int) -> dict:
    """The episodes benchmark's task on the env `pad`, which loads `notes` notes first."""
    spec = copy.deepcopy(episode_bench.NOTES)
    spec["id"] = "bench-group"
    spec["steps"][0]["config"]["env_id"] = "pad"
    spec["steps"][3]["config"]["checks"][0] |= {"name": "ten more", "equals": notes + CALLS}
    return spec


def bundle(notes: int) -> Path:
    """A bundle whose env `pad` loads `notes` notes from its data file."""
    root = temp_dir("agentenv-bench-groups-")
    env = root / "envs" / "pad"
    env.mkdir(parents=True)
    (env / "env.toml").write_text(
        'name = "pad"\nversion = "1"\ndescription = "notes, seeded"\ndata = ["data.json"]\n\n'
        '[[apps]]\napp = "notes"\n\n[roles.agent]\ntools = ["*"]\n'
    )
    rows = [
        {"key": f"seed-{n:04}", "text": f"note {n}: " + "lorem ipsum " * 8, "updated_at": "2026-01-01T00:00:00Z"}
        for n in range(notes)
    ]
    (env / "data.json").write_text(json.dumps({"notes": {"notes": rows}}))
    return root


def cpu_seconds(home: str) -> dict[str, float]:
    """utime + stime of this process and of every process whose environment names this bench's state dir, by
    what it is (trainer, worker, gateway, temporal)."""
    marker = f"AGENT_ENV_HOME={home}".encode()
    totals = dict.fromkeys(("trainer", "worker", "gateway", "temporal", "other"), 0.0)
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            if int(entry.name) != os.getpid():
                with open(f"/proc/{entry.name}/environ", "rb") as f:
                    if marker not in f.read().split(b"\0"):
                        continue
            with open(f"/proc/{entry.name}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{entry.name}/cmdline", "rb") as f:
                command = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue  # gone meanwhile, or not ours to read
        totals[_kind(int(entry.name), command)] += (int(fields[11]) + int(fields[12])) / TICK  # utime, stime
    return totals


def _kind(pid: int, command: str) -> str:
    if pid == os.getpid():
        return "trainer"
    if "agent_env.gateway" in command:
        return "gateway"
    if "temporal" in command.split(" ", 1)[0] or "server start-dev" in command:
        return "temporal"
    return "worker" if "worker" in command else "other"


async def rollout(episode) -> dict[str, float]:
    turn = await episode.next_turn()
    async with turn.tools() as tools:
        for n in range(CALLS):
            await tools.call("write_note", {"key": f"mine-{n}", "text": "x"})
    await turn.end("done")
    return await episode.result()


async def independent(episodes, spec) -> None:
    async def one() -> dict[str, float]:
        return await rollout(await spec.start(episodes))

    results = await asyncio.gather(*(one() for _ in range(SIZE)))
    assert all(r == {"check": 1.0} for r in results), results


async def grouped(episodes, spec) -> None:
    group = await spec.start_group(SIZE, episodes)
    results = await asyncio.gather(*(rollout(e) for e in group.episodes))
    await group.close()
    assert all(r == {"check": 1.0} for r in results), results


async def measure_async(home: str) -> dict:
    from agent_env.config import load_settings
    from agent_env.episodes import Episodes, EpisodeSpec
    from agent_env.planning.tasks import parse_task

    settings = load_settings()
    episodes = await Episodes.connect(settings, worker=False)
    try:
        figures = {}
        for notes in NOTE_COUNTS:
            spec = EpisodeSpec.from_task(parse_task(task(notes), "bench", bundle(notes)), ["writer"], turn_timeout=120)
            figures[f"notes_{notes}"] = await compare(episodes, spec, home, notes)
        return {**figures, "size": SIZE, "calls": CALLS, "rounds": ROUNDS}
    finally:
        await episodes.close()


async def compare(episodes, spec, home: str, notes: int) -> dict[str, dict[str, float]]:
    """Rounds of a group and as many independent episodes, alternating which goes first; medians."""
    await independent(episodes, spec)  # warm up: imports, connections, caches
    await grouped(episodes, spec)
    walls: dict[str, list[float]] = {"group": [], "independent": []}
    cpus: dict[str, list[dict[str, float]]] = {"group": [], "independent": []}
    for n in range(ROUNDS):
        shapes = [("group", grouped), ("independent", independent)]
        for name, shape in shapes if n % 2 == 0 else shapes[::-1]:
            before, wall = cpu_seconds(home), time.perf_counter()
            await shape(episodes, spec)
            walls[name].append((time.perf_counter() - wall) / SIZE)
            after = cpu_seconds(home)
            cpus[name].append({k: (after[k] - before[k]) / SIZE for k in after})
    figures: dict[str, dict[str, float]] = {}
    for name in ("group", "independent"):
        per_process = {k: summarize([c[k] for c in cpus[name]])["median"] * 1000 for k in cpus[name][0]}
        figures[name] = {
            "wall_per_rollout_ms": summarize(walls[name])["median"] * 1000,
            "cpu_per_rollout_ms": summarize([sum(c.values()) for c in cpus[name]])["median"] * 1000,
            **{f"cpu_{k}_ms": v for k, v in per_process.items() if k != "other" or v},
        }
    g, i = figures["group"], figures["independent"]
    print(f"  env data: {notes} notes")
    for label, key in (("wall", "wall_per_rollout_ms"), ("CPU (all processes)", "cpu_per_rollout_ms")):
        row(
            f"group of {SIZE}: {label} per rollout",
            f"{g[key]:.1f} ms",
            f"independent: {i[key]:.1f} ms ({g[key] / i[key]:.2f}x)",
        )
    for kind in ("trainer", "worker", "gateway", "temporal"):
        key = f"cpu_{kind}_ms"
        row(f"  CPU per rollout: {kind}", f"{g[key]:.1f} ms", f"independent: {i[key]:.1f} ms")
    return figures


def measure() -> dict:
    print(f"groups ({SIZE} rollouts from one start state vs {SIZE} independent episodes, {CALLS} tool calls each)")
    env = isolated_env()
    saved = dict(os.environ)
    os.environ.update(env)
    subprocess.run([AGENT_ENV, "server", "start"], env=env, capture_output=True, check=True, timeout=120)
    worker = subprocess.Popen([AGENT_ENV, "worker"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        return asyncio.run(measure_async(env["AGENT_ENV_HOME"]))
    finally:
        worker.terminate()
        worker.wait(30)
        for what in ("gateway", "server"):
            subprocess.run([AGENT_ENV, what, "stop"], env=env, capture_output=True, timeout=60)
        os.environ.clear()
        os.environ.update(saved)


if __name__ == "__main__":
    measure()
