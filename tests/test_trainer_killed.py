"""A trainer killed mid-episode (SIGKILL: no `finally`, no abandon) leaves nothing behind: the episode's turn
deadline ends its run, which releases what it held — its env's own server (a local sandbox), the role tokens, the
instance. What every training-library adapter relies on when its process dies. Real runs on the Temporal dev
server, a real trainer process."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile

import httpx

from agent_env.gateway_client.env_servers import record_of
from agent_env.spec.run import RunStatus
from agent_env.stores import open_stores
from agent_env.temporal import launch

ENV = """
name = "gauge"
env_provider_type = "server"
[[apps]]
app = "meter"
[roles.operator]
tools = ["*", "set_reading"]
"""

TASK = """
id = "killed-trainer"
[[steps]]
id = "env"
type = "deploy_env"
config = { env_id = "gauge" }
[[steps]]
id = "trainee"
type = "deploy_agent"
depends_on = ["env"]
[steps.config]
env = "env"
record = { name = "trainee", type = "scripted", role = "operator", config = { turns = [[{ say = "unused" }]] } }
[[steps]]
id = "ask"
type = "prompt_agent"
depends_on = ["trainee"]
config = { agent = "trainee", prompt = "Set the meter to 42." }
"""

# The trainer: starts an episode, makes one tool call, says what it holds, then hangs until it is killed.
TRAINER = """
import asyncio, json, sys
from pathlib import Path
from agent_env.config import load_settings
from agent_env.episodes import Episodes, EpisodeSpec
from agent_env.task_lookup import resolve_target

async def main():
    episodes = await Episodes.connect(load_settings(Path(sys.argv[2])), worker=False)
    spec = EpisodeSpec.from_task(resolve_target(sys.argv[1]), ["trainee"], turn_timeout=4)
    episode = await spec.start(episodes)
    turn = await episode.next_turn()
    async with turn.tools() as tools:
        await tools.call("set_reading", {"value": 41})
        held = {"run": episode.run_id, "instance": turn.offer.env, "mcp": turn.offer.mcp_url, "token": await turn.token()}
        print(json.dumps(held), flush=True)
        await asyncio.sleep(3600)

asyncio.run(main())
"""


async def test_a_killed_trainer_leaves_no_session_instance_or_sandbox(settings, client, worker, tmp_path):
    (tmp_path / "b" / "tasks").mkdir(parents=True)
    (tmp_path / "b" / "tasks" / "t.toml").write_text(TASK)
    (tmp_path / "b" / "envs" / "gauge").mkdir(parents=True)
    (tmp_path / "b" / "envs" / "gauge" / "env.toml").write_text(ENV)
    trainer = subprocess.Popen(
        [sys.executable, "-c", TRAINER, str(tmp_path / "b" / "tasks" / "t.toml"), tempfile.gettempdir()],
        stdout=subprocess.PIPE,
        text=True,
        env=os.environ,
    )
    try:
        line = await asyncio.wait_for(asyncio.to_thread(trainer.stdout.readline), 120)
        held = json.loads(line)
        stores = open_stores(settings)
        record = await record_of(stores, held["instance"])
        assert record is not None and record.topology == "server", "the env runs in a sandbox of its own"
        os.kill(trainer.pid, signal.SIGKILL)  # no finally, no abandon: gone
        trainer.wait(10)

        state = await asyncio.wait_for(launch.wait_result(client.get_workflow_handle(held["run"])), 60)
        assert state.status is RunStatus.ERROR and "did not answer within 4s" in state.steps["ask"].error, state
        assert await record_of(stores, held["instance"]) is None, "the run's end stopped the env's own server"
        async with httpx.AsyncClient(timeout=5) as http:
            try:
                answer = await http.get(record.url + "/health")
            except httpx.TransportError:
                answer = None  # nothing listens there any more: the sandbox is gone
            assert answer is None, f"the env's server still answers after its run ended: {answer}"
    finally:
        if trainer.poll() is None:
            trainer.kill()
            trainer.wait(10)
