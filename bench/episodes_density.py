"""A thousand at once: N trainer episodes in flight on one worker and one gateway, the trainer "thinking" 2-10 s
per turn (a sleep, as a model would), 5 turns each; beside it the same shape as bare Temporal workflows, and
OpenEnv holding N sessions (bench/peers/openenv_notes.py --density).

Each N (default 50, as run_all.py runs it; `--ladder` 100, 300, 1000; `--n` any list) runs three phases, one after the other:
- ours: N episodes of a tiny task (the notes env, a `trainer` agent prompted 5 times, a check), started at most
  START_AT_ONCE at a time; each holds its first turn until all N are waiting (the plateau: RSS of every process
  is read there), then plays 5 turns, each a sleep of 2-10 s (seeded) and `turn.end(...)`.
- bare: N bare workflows (BareTurns below) on the same server, a worker in this process: an update-with-start
  and three local activities, then 5 turns as updates with the same sleeps between, three local activities.
- OpenEnv: N WebSocket sessions on its env server, each a reset, then 5 turns of the same sleeps and one tool
  call (the cheapest a turn can be there: OpenEnv has no turn of its own).

Figures per phase: completed (none lost, none timed out: the turn deadline, TURN_TIMEOUT, is far above the
sleeps), turn overhead p50/p99 (from `turn.end(...)` to the next `next_turn()` returning: the framework's own
cost, the sleep excluded), CPU per turn over every process (Temporal server, gateway, worker, this process:
utime+stime from /proc, from the first start to the last result, divided by N x 5), MiB per waiting episode
(the RSS of every process at the plateau minus before the phase, / N). Saturation: the N where p99 or failures
jump. The machine's load average is printed with each N.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import subprocess
import sys
import time
import uuid
from datetime import timedelta
from pathlib import Path

from common import AGENT_ENV, exit_now, isolated_env, row
from temporalio import activity, workflow

TURNS = 5
THINK = (2.0, 10.0)  # seconds a turn's "model" takes
TURN_TIMEOUT = 900  # s: far above THINK (and the first turn waits for all N to start), so a timed-out turn is ours
START_AT_ONCE = 25  # episodes starting at a time (a trainer ramps up; a start deploys an env)
DEFAULT_N = (50,)  # run_all's: a few minutes
LADDER = (100, 300, 1000)
OURS = ("temporal", "gateway", "worker", "bench", "other")
BARE = ("temporal", "bench")
PAGE = os.sysconf("SC_PAGE_SIZE")
TICK = os.sysconf("SC_CLK_TCK")


def task() -> dict:
    """Notes env, a trainer agent prompted TURNS times one after another, a check that it wrote nothing."""
    steps: list[dict] = [
        {"id": "pad", "type": "deploy_env", "config": {"env_id": "notes"}},
        {
            "id": "player",
            "type": "deploy_agent",
            "depends_on": ["pad"],
            "config": {"env": "pad", "role": "agent", "record": {"name": "player", "type": "trainer"}},
        },
    ]
    before = "player"
    for n in range(TURNS):
        steps.append(
            {
                "id": f"p{n}",
                "type": "prompt_agent",
                "depends_on": [before],
                "config": {"agent": "player", "prompt": f"Turn {n}."},
            }
        )
        before = f"p{n}"
    steps.append(
        {
            "id": "check",
            "type": "check_state",
            "depends_on": [before],
            "config": {
                "env": "pad",
                "checks": [{"name": "nothing written", "tool": "list_notes", "path": "count", "equals": 0}],
            },
        }
    )
    return {"id": "bench-density", "steps": steps}


def thinks(n: int, think: tuple[float, float] = THINK) -> list[list[float]]:
    """Each episode's think times (the same for every phase of one N)."""
    rng = random.Random(n)
    return [[rng.uniform(*think) for _ in range(TURNS)] for _ in range(n)]


# -- the processes: CPU and RSS of every one whose environment names this bench's state dir, and this one --------


def processes(home: str) -> dict[int, str]:
    marker = f"AGENT_ENV_HOME={home}".encode()
    found = {os.getpid(): "bench"}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry.name}/environ", "rb") as f:
                if marker not in f.read().split(b"\0"):
                    continue
            with open(f"/proc/{entry.name}/cmdline", "rb") as f:
                command = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if "agent_env.gateway" in command:
            kind = "gateway"
        elif "temporal" in command.split(" ", 1)[0] or "server start-dev" in command:
            kind = "temporal"
        elif "worker" in command:
            kind = "worker"
        else:
            kind = "other"
        found[int(entry.name)] = kind
    return found


def sample(home: str) -> dict[str, dict[str, float]]:
    """{"cpu": {kind: s}, "rss": {kind: MiB}} over this bench's processes."""
    cpu: dict[str, float] = {}
    rss: dict[str, float] = {}
    for pid, kind in processes(home).items():
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        cpu[kind] = cpu.get(kind, 0.0) + (int(fields[11]) + int(fields[12])) / TICK
        rss[kind] = rss.get(kind, 0.0) + int(fields[21]) * PAGE / 2**20
    return {"cpu": cpu, "rss": rss}


def diff(after: dict[str, float], before: dict[str, float]) -> dict[str, float]:
    return {k: after.get(k, 0.0) - before.get(k, 0.0) for k in set(after) | set(before)}


def pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))] if ordered else float("nan")


class Phase:
    """What one phase of one N gathers."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.overheads: list[float] = []  # s, turn.end -> next turn
        self.completed = 0
        self.failures: list[str] = []
        self.waiting = 0
        self.all_waiting = asyncio.Event()
        self.late_turns = 0  # turns whose think + overhead came near the deadline (none expected)

    def arrived(self) -> None:
        self.waiting += 1
        if self.waiting == self.n:
            self.all_waiting.set()

    def figures(self, before: dict, plateau: dict, after: dict, wall: float, kinds: tuple[str, ...]) -> dict:
        cpu = {k: v for k, v in diff(after["cpu"], before["cpu"]).items() if k in kinds}
        rss = {k: v for k, v in diff(plateau["rss"], before["rss"]).items() if k in kinds}
        turns = self.n * TURNS
        return {
            "n": self.n,
            "completed": self.completed,
            "failures": len(self.failures),
            "failure_examples": sorted(set(self.failures))[:5],
            "overhead_p50_ms": pct(self.overheads, 0.5) * 1000,
            "overhead_p99_ms": pct(self.overheads, 0.99) * 1000,
            "cpu_ms_per_turn": sum(cpu.values()) / turns * 1000,
            "cpu_ms_per_turn_by_process": {k: v / turns * 1000 for k, v in sorted(cpu.items())},
            # The same CPU split: the starts (up to the plateau) per episode, and the turns with the endings after
            "cpu_ms_per_start": sum(v for k, v in diff(plateau["cpu"], before["cpu"]).items() if k in kinds)
            / self.n
            * 1000,
            "cpu_ms_per_turn_after_start": sum(v for k, v in diff(after["cpu"], plateau["cpu"]).items() if k in kinds)
            / turns
            * 1000,
            "mib_per_waiting_episode": sum(rss.values()) / self.n,
            "mib_per_waiting_episode_by_process": {k: v / self.n for k, v in sorted(rss.items())},
            "wall_s": wall,
        }


async def run_phase(n: int, home: str, play, think: tuple[float, float] = THINK, kinds: tuple[str, ...] = OURS) -> dict:
    """Start n players (START_AT_ONCE at a time), read RSS once all wait at their first turn, let them go.
    `kinds`: the processes the phase runs in (bare Temporal's are the server and this one)."""
    phase = Phase(n)
    gate = asyncio.Semaphore(START_AT_ONCE)
    release = asyncio.Event()
    before = sample(home)
    t0 = time.perf_counter()

    async def guarded(i: int, think: list[float]) -> None:
        try:
            await play(phase, gate, release, think)
            phase.completed += 1
        except Exception as e:  # a lost episode: counted and named, the others go on
            phase.failures.append(f"{type(e).__name__}: {str(e)[:200]}")
            if not release.is_set():
                phase.arrived()

    players = [asyncio.create_task(guarded(i, t)) for i, t in enumerate(thinks(n, think))]
    await phase.all_waiting.wait()
    await asyncio.sleep(2)  # let the last starts' work settle
    plateau = sample(home)
    release.set()
    await asyncio.gather(*players)
    after = sample(home)
    return phase.figures(before, plateau, after, time.perf_counter() - t0, kinds)


# -- ours ---------------------------------------------------------------------------------------------------------


def our_player(episodes, spec):
    async def play(phase: Phase, gate: asyncio.Semaphore, release: asyncio.Event, think: list[float]) -> None:
        async with gate:
            episode = await spec.start(episodes)
            turn = await episode.next_turn()
        phase.arrived()
        await release.wait()
        for n in range(TURNS):
            assert turn is not None, f"turn {n} never came"
            await asyncio.sleep(think[n])
            t = time.perf_counter()
            await turn.end("ok")
            turn = await episode.next_turn()
            if n < TURNS - 1:  # the last answer ends the episode: no next turn to time
                phase.overheads.append(time.perf_counter() - t)
            if think[n] + time.perf_counter() - t > TURN_TIMEOUT * 0.9:
                phase.late_turns += 1
        assert turn is None, "a sixth turn"
        scores = await episode.result()
        assert scores == {"check": 1.0}, f"scores {scores}, status {episode.state and episode.state.status}"

    return play


# -- bare Temporal ------------------------------------------------------------------------------------------------


STEPS = {"start_to_close_timeout": timedelta(seconds=30)}


@activity.defn(name="bare_density_step")
async def step(name: str) -> str:
    return name


@workflow.defn(sandboxed=False)
class BareTurns:
    """TURNS turns as updates: `next_turn` waits for one; `answer` takes it and waits for the next (one update
    per turn, as ours: an answer also asks for the next turn)."""

    def __init__(self) -> None:
        self.offered = -1
        self.answered = -1
        self.done = False

    @workflow.run
    async def run(self) -> str:
        for name in ("deploy_env", "deploy_agent", "marks"):
            await workflow.execute_local_activity(step, name, **STEPS)
        for n in range(TURNS):
            self.offered = n
            await workflow.wait_condition(lambda n=n: self.answered >= n)
        for name in ("finish", "grade", "record"):
            await workflow.execute_local_activity(step, name, **STEPS)
        self.done = True
        return "passed"

    @workflow.update
    async def next_turn(self) -> int:
        await workflow.wait_condition(lambda: self.offered > self.answered)
        return self.offered

    @workflow.update
    async def answer(self, turn: int) -> int:
        self.answered = max(self.answered, turn)
        await workflow.wait_condition(lambda: self.offered > turn or self.done)
        return -1 if self.offered <= turn else self.offered


def bare_player(client, queue: str, workflow_type=BareTurns):
    from temporalio.client import WithStartWorkflowOperation, WorkflowUpdateStage
    from temporalio.common import WorkflowIDConflictPolicy

    async def play(phase: Phase, gate: asyncio.Semaphore, release: asyncio.Event, think: list[float]) -> None:
        async with gate:
            start = WithStartWorkflowOperation(
                workflow_type.run,
                id=f"{queue}-{uuid.uuid4().hex[:8]}",
                task_queue=queue,
                id_conflict_policy=WorkflowIDConflictPolicy.FAIL,
            )
            first = await client.start_update_with_start_workflow(
                workflow_type.next_turn, start_workflow_operation=start, wait_for_stage=WorkflowUpdateStage.COMPLETED
            )
            turn = await first.result()
            handle = await start.workflow_handle()
        phase.arrived()
        await release.wait()
        for n in range(TURNS):
            assert turn == n, f"turn {turn}, expected {n}"
            await asyncio.sleep(think[n])
            t = time.perf_counter()
            turn = await handle.execute_update(workflow_type.answer, n)
            if n < TURNS - 1:
                phase.overheads.append(time.perf_counter() - t)
        assert await handle.result() == "passed"

    return play


# -- OpenEnv ------------------------------------------------------------------------------------------------------


def openenv_phase(n: int) -> dict:
    """OpenEnv holding n sessions (its own process and server; see bench/peers/openenv_notes.py --density)."""
    from peers import OPENENV_CORE, OPENENV_NOTES, PeerSetupError, peer_python

    try:
        python = peer_python(OPENENV_CORE.split("==")[0], [OPENENV_CORE])
    except PeerSetupError as e:
        return {"n": n, "error": f"OpenEnv could not be installed: {str(e).splitlines()[0]}"}
    argv = [str(python), str(OPENENV_NOTES), "--density", str(n), "--turns", str(TURNS)]
    argv += ["--think", f"{THINK[0]},{THINK[1]}", "--at-once", str(START_AT_ONCE)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=1800)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        return {"n": n, "error": f"exit {done.returncode}: {(done.stderr or done.stdout)[-600:]}"}
    return {"n": n, **json.loads(lines[-1])}


# -- the run ------------------------------------------------------------------------------------------------------


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def report(label: str, f: dict, base: dict | None) -> None:
    if "error" in f:
        row(f"  {label}", "-", f["error"][:300])
        return
    vs = ""
    if base and "error" not in base:
        vs = f"; {f['cpu_ms_per_turn'] / base['cpu_ms_per_turn']:.2f}x bare's"
    row(
        f"  {label}: completed",
        f"{f['completed']}/{f['n']}",
        f"{f['failures']} failed{': ' + f['failure_examples'][0] if f['failures'] else ''}",
    )
    row(f"  {label}: turn overhead p50 / p99", f"{f['overhead_p50_ms']:.0f}/{f['overhead_p99_ms']:.0f} ms", "")
    by = ", ".join(f"{k} {v:.1f}" for k, v in f.get("cpu_ms_per_turn_by_process", {}).items())
    row(f"  {label}: CPU per turn, all processes", f"{f['cpu_ms_per_turn']:.1f} ms", f"{by}{vs}")
    if "cpu_ms_per_start" in f:
        row(
            f"  {label}:   split: per start / per turn after",
            f"{f['cpu_ms_per_start']:.1f}/{f['cpu_ms_per_turn_after_start']:.1f} ms",
            "the starts up to the plateau, per episode; the turns and endings after it, per turn",
        )
    by = ", ".join(f"{k} {v:.3f}" for k, v in f.get("mib_per_waiting_episode_by_process", {}).items())
    row(f"  {label}: MiB per waiting episode", f"{f['mib_per_waiting_episode']:.3f}", by)


async def measure_async(ns: list[int], home: str, openenv: bool) -> dict:
    from temporalio.worker import Worker

    from agent_env.config import load_settings
    from agent_env.episodes import Episodes, EpisodeSpec
    from agent_env.planning.tasks import parse_task

    settings = load_settings()
    episodes = await Episodes.connect(settings, worker=False)
    workflow_type = BareTurns
    queue = f"bare-density-{uuid.uuid4().hex[:6]}"
    # The bare worker's slots: as many as ours has by default (the SDK's defaults), so neither side is limited
    # differently.
    bare_worker = Worker(episodes.client, task_queue=queue, workflows=[workflow_type], activities=[step])
    await bare_worker.__aenter__()
    results: dict = {"turns": TURNS, "think_s": list(THINK), "by_n": {}}
    try:
        spec = EpisodeSpec.from_task(parse_task(task(), "bench"), ["player"], turn_timeout=TURN_TIMEOUT)
        ours, bare = our_player(episodes, spec), bare_player(episodes.client, queue, workflow_type)
        # Warm up: imports, connections, the gateway's first env, caches (short thinks).
        await run_phase(3, home, ours, (0.01, 0.02))
        await run_phase(3, home, bare, (0.01, 0.02), BARE)
        previous = None
        for n in ns:
            print(f"  N = {n} (load average {load()})", flush=True)
            figures = {"load_before": load()}
            figures["bare"] = await run_phase(n, home, bare, kinds=BARE)
            figures["ours"] = await run_phase(n, home, ours)
            if openenv:
                figures["openenv"] = await asyncio.to_thread(openenv_phase, n)
            figures["load_after"] = load()
            o, b = figures["ours"], figures["bare"]
            figures["cpu_vs_bare"] = o["cpu_ms_per_turn"] / b["cpu_ms_per_turn"]
            report("ours", o, b)
            report("bare Temporal", b, None)
            if openenv:
                report("OpenEnv", figures["openenv"], None)
            row(
                "  ours: CPU per turn vs bare",
                f"{figures['cpu_vs_bare']:.2f}x",
                f"goal <= 1.3x; MiB per waiting episode goal <= 0.5 ({o['mib_per_waiting_episode']:.3f})",
            )
            if previous is not None:
                p = previous["ours"]
                jump = o["overhead_p99_ms"] > 2 * p["overhead_p99_ms"] or o["failures"] > p["failures"]
                figures["saturated_here"] = jump
                if jump:
                    row("  saturation", f"N = {n}", f"p99 or failures jumped from N = {previous['ours']['n']}")
            results["by_n"][n] = figures
            previous = figures
        return results
    finally:
        await bare_worker.__aexit__(None, None, None)
        await episodes.close()


def measure(ns: list[int] | None = None, openenv: bool = True) -> dict:
    ns = list(ns or DEFAULT_N)
    print(
        f"episode density: N episodes at once, {TURNS} turns, think {THINK[0]:.0f}-{THINK[1]:.0f} s; one worker, one gateway"
    )
    env = isolated_env()
    saved = dict(os.environ)
    os.environ.update(env)
    subprocess.run([AGENT_ENV, "server", "start"], env=env, capture_output=True, check=True, timeout=120)
    log = open(Path(env["AGENT_ENV_HOME"]) / "bench-worker.log", "w")  # noqa: SIM115 (closed below)
    worker = subprocess.Popen([AGENT_ENV, "worker"], env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        return asyncio.run(measure_async(ns, env["AGENT_ENV_HOME"], openenv))
    finally:
        worker.terminate()
        worker.wait(60)
        log.close()
        for what in ("gateway", "server"):
            subprocess.run([AGENT_ENV, what, "stop"], env=env, capture_output=True, timeout=60)
        os.environ.clear()
        os.environ.update(saved)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ladder", action="store_true", help=f"N = {', '.join(map(str, LADDER))}")
    parser.add_argument("--n", type=int, nargs="*", help="the Ns to run (default: 50)")
    parser.add_argument("--no-openenv", action="store_true", help="leave OpenEnv out")
    parser.add_argument("--json", type=Path, help="write the figures here too")
    args = parser.parse_args()
    ns = args.n or (list(LADDER) if args.ladder else list(DEFAULT_N))
    figures = measure(ns, openenv=not args.no_openenv)
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).parent))
    main()
    exit_now()
