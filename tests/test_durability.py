"""SIGKILL the worker (and the server) mid-DAG: the run completes, every effect happens once, and the
result equals an uninterrupted run's. Real processes: `agent-env worker` and the embedded server."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from agentenv_teststeps.scratchpad import Scratchpad
from conftest import free_port

from agent_env.config import GatewaySettings, ServerSettings, Settings
from agent_env.planning.tasks import parse_task
from agent_env.spec.run import RunState, RunStatus
from agent_env.temporal import background, launch
from agent_env.temporal_client import server
from agent_env.temporal_client.client import connect

pytestmark = pytest.mark.durability

AGENT_ENV = str(Path(sys.executable).parent / "agent-env")

TASK = {
    "id": "durable",
    "steps": [
        {"id": "a", "type": "scratchpad_write", "config": {"key": "a", "text": "A"}},
        # In flight when the worker dies: it has written its note and is still running.
        {
            "id": "b",
            "type": "slow_write",
            "depends_on": ["a"],
            "config": {"key": "b", "text": "B", "seconds": 2.5, "write_first": True},
        },
        {"id": "c", "type": "scratchpad_write", "depends_on": ["a"], "config": {"key": "c", "text": "C"}},
        {"id": "d", "type": "scratchpad_write", "depends_on": ["b", "c"], "config": {"key": "d", "text": "D"}},
        {"id": "e", "type": "scratchpad_read", "depends_on": ["d"]},
        {
            "id": "v",
            "type": "check",
            "depends_on": ["e"],
            "config": {
                "checks": [
                    {"name": "four notes", "value": "${steps.e.outputs.count}", "equals": 4},
                    {"name": "b written", "value": "${steps.e.outputs.notes.b}", "equals": "B"},
                ]
            },
        },
    ],
}
WRITERS = ["a", "b", "c", "d"]


class Cluster:
    """An embedded server and worker processes on a state directory of their own."""

    def __init__(self, root: Path) -> None:
        self.settings = Settings(
            state_dir=root / "home",
            server=ServerSettings(port=free_port(), ui_port=free_port(), ui=False),
            gateway=GatewaySettings(port=free_port()),
        )
        self.env = {
            **os.environ,
            "AGENT_ENV_HOME": str(self.settings.state_dir),
            "AGENT_ENV_SERVER_PORT": str(self.settings.server.port),
            "AGENT_ENV_UI_PORT": str(self.settings.server.ui_port),
            "AGENT_ENV_GATEWAY_PORT": str(self.settings.gateway.port),
        }
        self.log = root / "workers.log"
        self.workers: list[subprocess.Popen] = []

    def start_server(self) -> None:
        done = subprocess.run([AGENT_ENV, "server", "start"], env=self.env, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr

    def start_worker(self) -> subprocess.Popen:
        with open(self.log, "a") as log:
            proc = subprocess.Popen([AGENT_ENV, "worker"], env=self.env, stdout=log, stderr=subprocess.STDOUT)
        self.workers.append(proc)
        return proc

    def kill_server(self) -> None:
        os.kill(server.status(self.settings).info.pid, signal.SIGKILL)

    def pad(self, run_id: str) -> Scratchpad:
        return Scratchpad.in_folder(self.settings.state_dir / "runs" / run_id)

    def close(self) -> None:
        for proc in self.workers:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
        background.stop_all(self.settings)
        server.stop(self.settings)
        subprocess.run([AGENT_ENV, "gateway", "stop"], env=self.env, capture_output=True, timeout=30)


@pytest.fixture
async def cluster(tmp_path):
    c = Cluster(tmp_path)
    c.start_server()
    c.start_worker()
    yield c
    c.close()


def comparable(state: RunState) -> dict:
    """What must not depend on crashes: each step's status, outputs and score."""
    return {sid: (s.status, s.outputs, s.score) for sid, s in state.steps.items()}


async def wait_until(predicate, timeout=30.0, what="condition"):
    deadline = asyncio.get_running_loop().time() + timeout
    while not await predicate():
        assert asyncio.get_running_loop().time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


async def finish(cluster: Cluster, client, run_id: str, timeout: float = 180) -> RunState:
    """The run's result after a crash. Should it not come, fail with what the run was waiting for: its pending
    activities (attempts, last failure) and the tails of the workers' and the gateway's logs."""
    handle = client.get_workflow_handle(run_id, result_type=RunState)
    try:
        return await asyncio.wait_for(launch.wait_result(handle), timeout)
    except TimeoutError:
        described = await handle.describe()
        history = cluster.settings.state_dir.parent / "history.json"  # for tests/test_replay.py's replayer
        history.write_text((await handle.fetch_history()).to_json())
        pending = [
            f"{a.activity_type.name} attempt {a.attempt} state {a.state} last failure {a.last_failure.message!r}"
            for a in described.raw_description.pending_activities
        ]
        logs = {
            name: path.read_text(errors="replace")[-4000:] if path.exists() else "(none)"
            for name, path in (
                ("workers", cluster.log),
                ("gateway", cluster.settings.state_dir / "gateway" / "gateway.log"),
            )
        }
        raise AssertionError(
            f"run {run_id} not finished after {timeout:.0f} s (its history: {history}); status "
            f"{described.status and described.status.name}; pending {pending}; "
            + "; ".join(f"{name} log tail:\n{text}" for name, text in logs.items())
        ) from None


async def run_interrupted(cluster: Cluster, kill_server: bool) -> RunState:
    client = await connect(cluster.settings)
    baseline = await launch.wait_result(await launch.start_run(client, cluster.settings, parse_task(TASK, "t")))
    assert baseline.status is RunStatus.PASSED, baseline

    handle = await launch.start_run(client, cluster.settings, parse_task(TASK, "t"))
    run_id = handle.id

    async def b_wrote_and_still_runs():
        if not (cluster.settings.state_dir / "runs" / run_id / "scratchpad.sqlite").exists():
            return False
        state = await launch.query_state(handle)
        return (
            state.steps["b"].status == "running"
            and state.steps["c"].status == "succeeded"
            and f"{run_id}/b" in cluster.pad(run_id).effects()
        )

    await wait_until(b_wrote_and_still_runs, what="step b to write and keep running (and c to finish)")
    cluster.workers[-1].send_signal(signal.SIGKILL)
    cluster.workers[-1].wait()
    if kill_server:
        cluster.kill_server()
        cluster.start_server()
        client = await connect(cluster.settings)
    cluster.start_worker()
    final = await finish(cluster, client, run_id)

    assert final.status is RunStatus.PASSED, final
    assert comparable(final) == comparable(baseline), "the result equals an uninterrupted run's"
    pad = cluster.pad(run_id)
    assert pad.effects() == sorted(f"{run_id}/{s}" for s in WRITERS), "every effect happened exactly once"
    attempts = pad.attempts()
    assert attempts.count(f"{run_id}/b") == 2, "b ran again after the crash, and its retry changed nothing"
    assert final.steps["b"].attempts == 2
    for sid in ("a", "c"):
        assert attempts.count(f"{run_id}/{sid}") == 1, f"{sid} finished before the crash and never ran again"
    return final


async def test_worker_sigkill_mid_dag(cluster):
    await run_interrupted(cluster, kill_server=False)


async def test_worker_and_server_sigkill_mid_dag(cluster):
    await run_interrupted(cluster, kill_server=True)


PACED_WORLD = """
id = "paced_world"
[clock]
start = "2026-06-01T00:00:00Z"
mode = "paced"
rate = 7200

[[triggers]]
id = "tick"
when = { type = "time", at = "+1h", every = "1h", count = 8 }
actions = [{ type = "call_tool", env = "pad", tool = "write_note", arguments = { key = "tick${trigger.fires}", text = "${clock.now}" } }]

[[steps]]
id = "pad"
type = "deploy_env"
config = { env_id = "notes" }

[[steps]]
id = "rules"
type = "register_env_triggers"
depends_on = ["pad"]

[[steps]]
id = "day"
type = "wait_clock"
depends_on = ["rules"]
config = { until = "+9h" }
"""


async def test_world_survives_sigkill_of_worker_and_gateway(cluster):
    """A paced world (2 virtual hours per real second): kill the worker and the gateway after the second
    tick, keep them down for 5 s, restart. Same events, same stamps, same final state as an uninterrupted
    run; and the downtime was not spent as virtual time (the clock stopped at its lease)."""
    import time
    import tomllib

    from agent_env.gateway import embedded as embedded_gateway

    task = parse_task(tomllib.loads(PACED_WORLD), "t")
    client = await connect(cluster.settings)
    baseline = await launch.wait_result(await launch.start_run(client, cluster.settings, task))
    assert baseline.status is RunStatus.PASSED, baseline

    handle = await launch.start_run(client, cluster.settings, task)

    async def two_ticks():
        state = await launch.query_state(handle)
        return state.world is not None and sum(e.kind == "fired" for e in state.world.events) >= 2

    await wait_until(two_ticks, what="two ticks")
    killed_at = time.monotonic()
    cluster.workers[-1].send_signal(signal.SIGKILL)
    cluster.workers[-1].wait()
    os.kill(embedded_gateway.status(cluster.settings).info.pid, signal.SIGKILL)
    await asyncio.sleep(5)
    cluster.start_worker()  # its first environment call restarts the gateway
    final = await finish(cluster, client, handle.id)
    after_kill = time.monotonic() - killed_at

    assert final.status is RunStatus.PASSED, final

    def fired(state):
        return [(e.trigger, e.virtual_time, e.detail.get("n")) for e in state.world.events if e.kind == "fired"]

    assert fired(final) == fired(baseline), "the same events at the same virtual times"
    from agent_env.gateway.embedded import connect as gateway_connect

    async with gateway_connect(cluster.settings) as gateway:
        notes = [
            (await gateway.data(s.steps["pad"].outputs["instance"], "data/get"))["parts"][0]["data"]["notes"]
            for s in (baseline, final)
        ]
    assert [(n["key"], n["text"], n["updated_at"]) for n in notes[0]] == [
        (n["key"], n["text"], n["updated_at"]) for n in notes[1]
    ], "the same final state, stamped identically"
    # About 7 virtual hours were left at the kill (3.5 s at 7200x). Had the downtime counted, the run
    # would have finished almost at once after the restart; the lease lets at most 1.5 s slip.
    assert after_kill >= 5 + 3.5 - 1.5 - 0.5, f"virtual time jumped by the downtime ({after_kill:.1f} s after the kill)"


async def test_an_episode_survives_its_worker_being_killed(cluster):
    """SIGKILL the worker while the trainer is mid-turn: its next calls still work, the score is right."""
    from test_episodes import NOTES_TASK

    from agent_env.episodes import Episodes, EpisodeSpec

    episodes = await Episodes.connect(cluster.settings, worker=False)  # the rest of the run: `agent-env worker`
    try:
        spec = EpisodeSpec.from_task(parse_task(NOTES_TASK, "t"), ["writer"], turn_timeout=120)
        episode = await spec.start(episodes)
        turn = await episode.next_turn()
        async with turn.tools() as tools:
            await tools.call("write_note", {"key": "greeting", "text": "hello"})
        cluster.workers[-1].send_signal(signal.SIGKILL)
        cluster.workers[-1].wait()
        cluster.start_worker()
        await asyncio.wait_for(turn.end("written"), 60)
        assert await asyncio.wait_for(episode.next_turn(), 60) is None
        scores = await asyncio.wait_for(episode.result(), 60)
        assert scores == {"check": 1.0} and episode.state.status is RunStatus.PASSED, episode.state
        assert episode.state.steps["write"].outputs["tool_calls"] == 1
    finally:
        await episodes.close()
