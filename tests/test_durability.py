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

from agentenv import runner
from agentenv.config import ServerSettings, Settings
from agentenv.spec.loader import parse_task
from agentenv.spec.run import RunState, RunStatus
from agentenv.temporal import server
from agentenv.temporal.client import connect

pytestmark = pytest.mark.durability

AGENT_ENV = str(Path(sys.executable).parent / "agent-env")

TASK = {
    "id": "durable",
    "steps": [
        {"id": "a", "type": "scratchpad_write", "config": {"key": "a", "text": "A"}},
        # In flight when the worker dies: it has written its note and is still running.
        {"id": "b", "type": "slow_write", "depends_on": ["a"],
         "config": {"key": "b", "text": "B", "seconds": 2.5, "write_first": True}},
        {"id": "c", "type": "scratchpad_write", "depends_on": ["a"], "config": {"key": "c", "text": "C"}},
        {"id": "d", "type": "scratchpad_write", "depends_on": ["b", "c"], "config": {"key": "d", "text": "D"}},
        {"id": "e", "type": "scratchpad_read", "depends_on": ["d"]},
        {"id": "v", "type": "check", "depends_on": ["e"], "config": {"checks": [
            {"name": "four notes", "value": "${steps.e.outputs.count}", "equals": 4},
            {"name": "b written", "value": "${steps.e.outputs.notes.b}", "equals": "B"},
        ]}},
    ],
}
WRITERS = ["a", "b", "c", "d"]


class Cluster:
    """An embedded server and worker processes on a state directory of their own."""

    def __init__(self, root: Path) -> None:
        self.settings = Settings(state_dir=root / "home",
                                 server=ServerSettings(port=free_port(), ui_port=free_port(), ui=False))
        self.env = {**os.environ, "AGENTENV_HOME": str(self.settings.state_dir),
                    "AGENTENV_SERVER_PORT": str(self.settings.server.port),
                    "AGENTENV_UI_PORT": str(self.settings.server.ui_port),
                    "AGENTENV_GATEWAY_PORT": str(free_port())}
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


async def run_interrupted(cluster: Cluster, kill_server: bool) -> RunState:
    client = await connect(cluster.settings)
    baseline = await runner.wait_result(await runner.start_run(client, cluster.settings, parse_task(TASK, "t")))
    assert baseline.status is RunStatus.PASSED, baseline

    handle = await runner.start_run(client, cluster.settings, parse_task(TASK, "t"))
    run_id = handle.id

    async def b_wrote_and_still_runs():
        if not (cluster.settings.state_dir / "runs" / run_id / "scratchpad.sqlite").exists():
            return False
        state = await runner.query_state(handle)
        return state.steps["b"].status == "running" and f"{run_id}/b" in cluster.pad(run_id).effects()

    await wait_until(b_wrote_and_still_runs, what="step b to write and keep running")
    cluster.workers[-1].send_signal(signal.SIGKILL)
    cluster.workers[-1].wait()
    if kill_server:
        cluster.kill_server()
        cluster.start_server()
        client = await connect(cluster.settings)
    cluster.start_worker()
    final = await asyncio.wait_for(runner.wait_result(client.get_workflow_handle(run_id, result_type=RunState)), 90)

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
