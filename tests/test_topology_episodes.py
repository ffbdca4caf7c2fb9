"""A trainer's episode and the explorer on an env served by its own server (`env_provider_type = "server"`, a
local sandbox of the run): the trainer lists and calls the tools there, its reward is the task's score, and the
explorer shows the run's calls while it runs (read from that server) and once it is over; real runs on the
Temporal dev server, the explorer over real HTTP."""

from __future__ import annotations

import asyncio

import explorer_util
import httpx
import pytest

from agent_env.agents.sdk import ToolFailed
from agent_env.episodes import Episodes, EpisodeSpec
from agent_env.explorer.auth import Door
from agent_env.explorer.server import create_app
from agent_env.gateway.embedded import connect
from agent_env.gateway_client import GatewayRefused
from agent_env.gateway_client.env_servers import record_of
from agent_env.spec.run import RunStatus
from agent_env.stores import open_stores
from agent_env.task_lookup import resolve_target

ENV = """
name = "gauge"
env_provider_type = "server"
[[apps]]
app = "meter"
[roles.operator]
tools = ["*", "set_reading"]
[roles.viewer]
tools = ["read"]
"""

TASK = """
id = "metered-episode"
[[steps]]
id = "env"
type = "deploy_env"
config = {{ env_id = "gauge", agents = {{ vic = "viewer" }} }}
[[steps]]
id = "trainee"
type = "deploy_agent"
depends_on = ["env"]
[steps.config]
env = "env"
record = {{ name = "trainee", type = "scripted", role = "operator", config = {{ turns = [[{{ say = "unused" }}]] }} }}
[[steps]]
id = "ask"
type = "prompt_agent"
depends_on = ["trainee"]
config = {{ agent = "trainee", prompt = "Set the meter to 41, then bump it." }}
[[steps]]
id = "pause"
type = "wait_file"
depends_on = ["ask"]
config = {{ path = "{gate}" }}
[[steps]]
id = "reading"
type = "check_state"
depends_on = ["pause"]
[steps.config]
env = "env"
role = "viewer"
checks = [{{ name = "set, then bumped", tool = "read", path = "reading", equals = 42 }}]
"""


def spec_of(root, gate) -> EpisodeSpec:
    (root / "tasks").mkdir(parents=True)
    (root / "tasks" / "t.toml").write_text(TASK.format(gate=gate))
    (root / "envs" / "gauge").mkdir(parents=True)
    (root / "envs" / "gauge" / "env.toml").write_text(ENV)
    return EpisodeSpec.from_task(resolve_target(str(root / "tasks" / "t.toml")), ["trainee"], turn_timeout=120)


async def test_an_episode_and_the_explorer_reach_an_env_on_its_own_server(settings, client, worker, tmp_path):
    gate = tmp_path / "gate"
    episodes = Episodes(client, settings)  # the session's worker runs the rest of the run
    stores = open_stores(settings)
    door = Door()
    try:
        episode = await spec_of(tmp_path / "b", gate).start(episodes)
        instance = f"{episode.run_id}.env"
        turn = await episode.next_turn()
        assert turn is not None and turn.offer.env == instance
        record = await record_of(stores, instance)
        assert record is not None and record.topology == "server"
        assert turn.offer.mcp_url.startswith(record.url + "/"), "the turn points at the instance's own server"
        with pytest.raises(GatewayRefused):  # the install's gateway does not hold it: only routing reaches it
            await connect(settings).get_instance(instance)
        async with turn.tools() as tools:
            assert [t["name"] for t in tools.list()] == ["get_time", "read", "bump", "set_reading"]
            assert await tools.call("set_reading", {"value": 41}) == {"reading": 41}
            assert await tools.call("bump") == {"reading": 42}
            with pytest.raises(ToolFailed, match="nope"):
                await tools.call("nope")
        await turn.end("Done.")

        with explorer_util.serving(create_app(settings, door, temporal=client, stores=stores)) as base:
            async with httpx.AsyncClient(base_url=base, timeout=30) as http:
                await explorer_util.sign_in(http, door)
                live = (await http.get(f"/api/runs/{episode.run_id}/calls")).json()  # the run waits at `pause`
                assert live["unavailable"] == [], "the explorer read the trajectory from the instance's own server"
                assert [(c["agent"], c["tool"]) for c in live["calls"]] == [
                    ("trainee", "set_reading"),
                    ("trainee", "bump"),
                    ("trainee", "nope"),
                ]
                assert live["calls"][1]["result"] == {"reading": 42} and "nope" in live["calls"][2]["error"]
                router = episodes._gateway
                own = router._servers[instance] if router is not None else None
                assert own is not None and own.base_url == record.url and own._http._idle, "kept alive while it runs"
                gate.write_text("go")
                scores = await asyncio.wait_for(episode.result(), 120)
                assert episode.state.status is RunStatus.PASSED, episode.state
                assert scores == {"reading": 1.0} and episode.state.score == 1.0, "the reward is the task's score"
                await asyncio.sleep(0.1)  # (the forgotten client closes in a task of its own)
                assert own._http._idle == [], "what the connection forgot, it closed"
                assert not [i for i in router._servers if i.startswith(episode.run_id)], (
                    "the trainer's connection keeps nothing of a finished run"
                )
                kept = (await http.get(f"/api/runs/{episode.run_id}/calls")).json()  # its server stopped: kept copy
                assert [c["tool"] for c in kept["calls"]] == ["set_reading", "bump", "nope", "read"]
                detail = (await http.get(f"/api/runs/{episode.run_id}")).json()
                assert detail["status"] == "passed"
        assert await record_of(stores, instance) is None, "the run's end stopped its server"
    finally:
        gate.write_text("go")
        await episodes.close()


async def test_the_gymnasium_adapter_plays_an_env_on_its_own_server(settings, worker, tmp_path):
    from agent_env.episodes.gym import EpisodeEnv

    gate = tmp_path / "gate"
    env = EpisodeEnv(spec_of(tmp_path / "b", gate), settings=settings, worker=False)
    try:
        observation, info = await asyncio.to_thread(env.reset)
        assert [t["name"] for t in observation["tools"]] == ["get_time", "read", "bump", "set_reading"]
        for action in ({"tool": "set_reading", "arguments": {"value": 40}}, {"tool": "bump", "arguments": {"by": 2}}):
            observation, reward, terminated, _, _ = await asyncio.to_thread(env.step, action)
            assert "tool_result" in observation and not terminated
        assert observation["tool_result"] == {"reading": 42}
        gate.write_text("go")
        observation, reward, terminated, _, info = await asyncio.to_thread(env.step, {"response": "Done."})
        assert terminated and reward == 1.0 and info["scores"] == {"reading": 1.0}, info
    finally:
        gate.write_text("go")
        await asyncio.to_thread(env.close)
