"""Groups of rollouts from one start state: one prototype deployed and loaded, forked per rollout (independent
forks, each rollout's scores its own), released at the group's end or by its TTL; the gateway's fork route."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from datetime import UTC, datetime, timedelta

import httpx2 as httpx
import pytest
from gateway_util import running_gateway, support_data, support_spec

from agent_env.episodes import EpisodeGroup, Episodes, EpisodeSpec
from agent_env.errors import BadInput
from agent_env.gateway_client import GatewayRefused
from agent_env.planning.tasks import parse_task

SEEDED = 300  # notes the environment's data file loads


def pad_task(seeded: int = SEEDED) -> dict:
    return {
        "id": "pad-group",
        "steps": [
            {"id": "pad", "type": "deploy_env", "config": {"env_id": "pad"}},
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
                "config": {"agent": "writer", "prompt": "Write two notes."},
            },
            {
                "id": "check",
                "type": "check_state",
                "depends_on": ["write"],
                "config": {
                    "env": "pad",
                    "checks": [
                        {"name": "count", "tool": "list_notes", "path": "count", "equals": seeded + 2},
                        {
                            "name": "seeded",
                            "tool": "read_note",
                            "arguments": {"key": "seed-000"},
                            "path": "text",
                            "equals": "seed 0",
                        },
                    ],
                },
            },
        ],
    }


def toml(value) -> str:
    """A JSON value as TOML (inline tables: enough for a task file)."""
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(k)} = {toml(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(toml(v) for v in value) + "]"
    return json.dumps(value)


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    """A bundle whose env loads a data file of SEEDED notes (the start state every rollout must see)."""
    root = tmp_path_factory.mktemp("pad-bundle")
    env = root / "envs" / "pad"
    env.mkdir(parents=True)
    (env / "env.toml").write_text(
        'name = "pad"\nversion = "1"\ndescription = "notes, seeded"\ndata = ["data.json"]\n\n'
        '[[apps]]\napp = "notes"\n\n[roles.agent]\ntools = ["*"]\n'
    )
    rows = [{"key": f"seed-{n:03}", "text": f"seed {n}", "updated_at": "2026-01-01T00:00:00Z"} for n in range(SEEDED)]
    (env / "data.json").write_text(json.dumps({"notes": {"notes": rows}}))
    (root / "tasks").mkdir()
    task = pad_task()
    steps = "".join("\n[[steps]]\n" + "".join(f"{k} = {toml(v)}\n" for k, v in step.items()) for step in task["steps"])
    (root / "tasks" / "pad-group.toml").write_text(f"id = {toml(task['id'])}\n{steps}")
    return root


@pytest.fixture
async def episodes(client, settings, worker):
    yield Episodes(client, settings)  # the session's worker runs the rest of each run


@pytest.fixture
async def admin(settings):
    from agent_env.gateway.embedded import connect

    gateway = connect(settings)
    yield gateway
    await gateway.aclose()


def load_keys(settings, instance: str) -> set[str]:
    """The data loads an instance's notes database took (their idempotency keys), read from the gateway's files."""
    path = settings.state_dir / "gateway" / "instances" / instance / "apps" / "notes" / "app.sqlite"
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return {key for (key,) in db.execute("SELECT key FROM _agentenv_calls")}
    finally:
        db.close()


async def write_notes(episode, count: int, tag: str) -> None:
    while (turn := await episode.next_turn()) is not None:
        async with turn.tools() as tools:
            for n in range(count):
                await tools.call("write_note", {"key": f"{tag}-{n}", "text": "mine"})
        await turn.end("written")


async def test_a_group_forks_one_prototype_and_each_rollout_scores_its_own_writes(episodes, admin, settings, bundle):
    spec = EpisodeSpec.from_task(parse_task(pad_task(), "t", bundle), ["writer"], turn_timeout=60, seed=5)
    group = await spec.start_group(4, episodes)
    assert isinstance(group, EpisodeGroup) and len(group.episodes) == 4
    prototypes = [i for i in await admin.list_instances() if i["run_id"] == group.id]
    assert [p["id"] for p in prototypes] == [f"{group.id}.pad"], "the env is deployed once, as the prototype"
    assert datetime.fromisoformat(prototypes[0]["expires_at"]) > datetime.now(UTC) + timedelta(hours=5)

    await asyncio.gather(*(write_notes(e, n, f"r{n}") for n, e in enumerate(group.episodes)))
    results = await group.results()

    assert results == [{"check": 0.5}, {"check": 0.5}, {"check": 1.0}, {"check": 0.5}], results
    for n, episode in enumerate(group.episodes):
        values = episode.state.steps["check"].outputs["values"]
        assert values == {"count": SEEDED + n, "seeded": "seed 0"}, "its own writes only, on the loaded data"
        assert episode.state.pins["seed"] == 5
        keys = load_keys(settings, f"{episode.run_id}.pad")
        assert keys == {f"{group.id}/pad/0/notes"}, "the data was loaded once, into the prototype, then copied"
    remaining = {i["id"] for i in await admin.list_instances()}
    assert f"{group.id}.pad" not in remaining, "the prototype is released when the group ends"
    assert {f"{e.run_id}.pad" for e in group.episodes} <= remaining, "the rollouts' own instances stay theirs"


async def test_seeds_per_rollout_and_closing_a_group_early(episodes, admin, bundle):
    spec = EpisodeSpec.from_task(parse_task(pad_task(), "t", bundle), ["writer"], turn_timeout=60)
    async with await episodes.start_group(spec, 2, seeds=[1, 2]) as group:
        await asyncio.gather(*(write_notes(e, 2, "x") for e in group.episodes))
    assert not [i for i in await admin.list_instances() if i["run_id"] == group.id], "closed on leaving the block"
    assert await group.results() == [{"check": 1.0}, {"check": 1.0}]
    assert [e.state.pins["seed"] for e in group.episodes] == [1, 2]


async def test_a_deploy_whose_prototype_is_gone_loads_the_data_itself(client, worker, settings, bundle):
    from agent_env.spec.run import RunStatus
    from agent_env.temporal import launch

    task = pad_task()
    task["steps"][0]["config"]["fork_from"] = "gone.pad"  # a group that ended (or expired) before this deploy
    task["steps"][3]["config"]["checks"][0]["equals"] = SEEDED
    del task["steps"][1:3]
    task["steps"][1]["depends_on"] = ["pad"]
    handle = await launch.start_run(client, settings, parse_task(task, "t", bundle))
    state = await asyncio.wait_for(launch.wait_result(handle), 60)
    assert state.status is RunStatus.PASSED, state
    assert load_keys(settings, f"{handle.id}.pad") == {f"{handle.id}/pad/0/notes"}


async def test_group_sizes_are_bounded_by_name(episodes, bundle):
    spec = EpisodeSpec.from_task(parse_task(pad_task(), "t", bundle), ["writer"])
    for size in (0, 257):
        with pytest.raises(BadInput, match=rf"size: a group holds 1 to 256 rollouts, not {size}"):
            await episodes.start_group(spec, size)
    with pytest.raises(BadInput, match="seeds: 1 given for 2 rollouts"):
        await episodes.start_group(spec, 2, seeds=[1])


async def test_groups_over_http(settings, worker, admin, bundle):
    import uvicorn
    from conftest import free_port

    from agent_env.episodes.http import create_app
    from agent_env.gateway.embedded import admin_token

    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(create_app(settings, worker=False), host="127.0.0.1", port=port, log_level="warning")
    )
    serving = asyncio.create_task(server.serve())
    while not server.started:
        await asyncio.sleep(0.01)
    auth = {"authorization": f"Bearer {admin_token(settings)}"}
    body = {"task": str(bundle), "task_name": "pad-group", "trainer_agents": ["writer"], "turn_timeout": 60}
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", headers=auth, timeout=60) as http:
            for size in (0, 257):
                bad = await http.post("/episodes/groups", json={**body, "size": size})
                assert bad.status_code == 400 and "size" in bad.json()["error"], bad.text
            missing = await http.get("/episodes/groups/nope/result")
            assert missing.status_code == 404 and "no group 'nope'" in missing.json()["error"]
            started = await http.post("/episodes/groups", json={**body, "size": 3})
            assert started.status_code == 201, started.text
            group, ids = started.json()["group"], started.json()["episodes"]
            assert len(ids) == 3 and all(i.startswith(group) for i in ids)
            for n, episode in enumerate(ids):  # each rollout driven with the per-episode routes
                turn = (await http.post(f"/episodes/{episode}/next-turn", json={})).json()["turn"]
                for k in range(n + 1):
                    done = await http.post(
                        f"{turn['tools_url']}/write_note",
                        json={"key": f"h{k}", "text": "x"},
                        headers={"authorization": f"Bearer {turn['token']}"},
                    )
                    assert done.status_code == 200, done.text
                await http.post(f"/episodes/{episode}/turns/{turn['id']}/end", json={"response": "ok"})
            result = (await http.get(f"/episodes/groups/{group}/result")).json()
            assert result["group"] == group
            assert [r["scores"] for r in result["results"]] == [{"check": 0.5}, {"check": 1.0}, {"check": 0.5}]
            assert [r["status"] for r in result["results"]] == ["failed", "passed", "failed"]
            assert not [i for i in await admin.list_instances() if i["run_id"] == group]
            assert (await http.post(f"/episodes/groups/{group}/close")).json() == {"closed": group}
    finally:
        server.should_exit = True
        await serving


# -- the gateway's fork route (an in-process gateway) --


async def test_fork_copies_the_current_state_once_and_forks_are_independent(tmp_path):
    async with running_gateway(tmp_path / "gw") as (gateway, base, admin):
        await admin.put_instance(
            support_spec(
                "desk-1",
                apps=[{"app": "helpdesk"}, {"app": "notes"}],
                roles={"support": {"tools": ["*"]}, "billing_lead": {"tools": ["get_time"]}},
            )
        )
        await admin.load("desk-1", [{"kind": "data", "data": support_data(("helpdesk",))}])
        await admin.call_as("desk-1", "write_note", {"key": "a", "text": "before"})

        forked = await admin.fork("desk-1", {"id": "desk-2", "run_id": "run-2"})
        assert forked["forked_from"] == "desk-1" and forked["agents"] == {"sam": "support", "lee": "billing_lead"}
        assert forked["roles"] == (await admin.get_instance("desk-1"))["roles"]

        async def notes(instance: str) -> dict[str, str]:
            return (await admin.call_as(instance, "list_notes", {}))["result"]["notes"]

        ticket = await admin.call_as("desk-2", "get_ticket", {"ticket_id": "TCK-1004"})
        assert ticket["result"]["id"] == "TCK-1004", "the loaded data came along"
        assert await notes("desk-2") == {"a": "before"}, "and what was written since"
        await admin.call_as("desk-2", "write_note", {"key": "b", "text": "fork only"})
        assert await notes("desk-1") == {"a": "before"}, "forks are independent of their source"

        again = await admin.fork("desk-1", {"id": "desk-2", "run_id": "run-2"})  # a retried activity
        assert again["id"] == "desk-2" and await notes("desk-2") == {"a": "before", "b": "fork only"}, (
            "a retry copies nothing again"
        )
        assert await admin.token("desk-2", "sam") != await admin.token("desk-1", "sam")
        stored = {i["id"]: i for i in await admin.list_instances()}
        assert stored["desk-2"]["run_id"] == "run-2" and stored["desk-2"]["expires_at"] is None

        with pytest.raises(GatewayRefused, match="no environment instance 'nope'") as gone:
            await admin.fork("nope", {"id": "desk-3"})
        assert gone.value.status == 404
        with pytest.raises(GatewayRefused, match="a fork needs a new id") as same:
            await admin.fork("desk-1", {"id": "desk-1"})
        assert same.value.status == 400
        with pytest.raises(GatewayRefused, match="agent 'x' has role 'boss'"):
            await admin.fork("desk-1", {"id": "desk-4", "agents": {"x": "boss"}})
        assert "desk-4" not in {i["id"] for i in await admin.list_instances()}, "a refused fork leaves nothing"
        async with httpx.AsyncClient(base_url=base) as anonymous:
            refused = await anonymous.post("/admin/instances/desk-1/fork", json={"id": "desk-5"})
            assert refused.status_code == 401
            too_big = await anonymous.post(
                "/admin/instances/desk-1/fork",
                content=b"{" + b" " * (17 * 1024 * 1024) + b"}",
                headers={"authorization": f"Bearer {gateway.admin_token}", "content-type": "application/json"},
            )
            assert too_big.status_code == 413


async def test_fork_copies_apps_in_their_own_processes_through_the_data_plane(tmp_path):
    spec = {"id": "pad-1", "apps": [{"app": "notes", "run": "subprocess"}], "now": "2026-01-01T00:00:00Z"}
    async with running_gateway(tmp_path / "gw") as (gateway, base, admin):
        await admin.put_instance(spec)
        await admin.call_as("pad-1", "write_note", {"key": "a", "text": "from the source"})
        await admin.fork("pad-1", {"id": "pad-2"})
        read = await admin.call_as("pad-2", "read_note", {"key": "a"})
        assert read["result"]["text"] == "from the source"
        await admin.call_as("pad-2", "write_note", {"key": "b", "text": "fork only"})
        assert (await admin.call_as("pad-1", "list_notes", {}))["result"]["count"] == 1


async def test_the_gateway_deletes_instances_past_their_expiry(tmp_path):
    """What releases a group's prototype when its trainer died: the gateway's own sweep."""
    async with running_gateway(tmp_path / "gw", idle_close_s=1) as (gateway, base, admin):
        soon = (datetime.now(UTC) + timedelta(seconds=1)).isoformat()
        await admin.put_instance({"id": "proto", "apps": [{"app": "notes"}], "expires_at": soon})
        await admin.put_instance({"id": "kept", "apps": [{"app": "notes"}]})
        await admin.fork("proto", {"id": "fork"})
        for _ in range(50):
            if "proto" not in {i["id"] for i in await admin.list_instances()}:
                break
            await asyncio.sleep(0.1)
        assert {i["id"] for i in await admin.list_instances()} == {"kept", "fork"}
        assert not (tmp_path / "gw" / "instances" / "proto").exists()


async def test_the_expiry_sweep_reads_only_instances_that_expire(tmp_path, monkeypatch):
    """A gateway keeps every finished run's instances: the sweep pages through the few with an expiry (an
    index orders them first) and stops at the first without one, however many there are."""
    from agent_env.gateway import releasing

    monkeypatch.setattr(releasing, "EXPIRY_PAGE", 2)  # several pages of expiring instances
    async with running_gateway(tmp_path / "gw") as (gateway, base, admin):
        past = (datetime.now(UTC) - timedelta(minutes=1)).isoformat()
        future = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
        for n in range(3):
            await admin.put_instance({"id": f"old-{n}", "apps": [{"app": "notes"}], "expires_at": past})
            await admin.put_instance({"id": f"later-{n}", "apps": [{"app": "notes"}], "expires_at": future})
            await admin.put_instance({"id": f"kept-{n}", "apps": [{"app": "notes"}]})
        read: list[int] = []
        page = gateway.store.page
        monkeypatch.setattr(gateway.store, "page", lambda *a, **k: read.append(k["limit"]) or page(*a, **k))
        assert sorted(await gateway.delete_expired()) == ["old-0", "old-1", "old-2"]
        assert len(read) == 4  # 6 expiring instances in pages of 2, the last page reaching a kept one
        left = {i["id"] for i in await admin.list_instances()}
        assert left == {"later-0", "later-1", "later-2", "kept-0", "kept-1", "kept-2"}


async def test_a_pool_forks_on_the_gateway_holding_the_source(tmp_path):
    import os

    from agent_env.gateway_client.pool import GatewayPool
    from agent_env.gateway_client.single import SingleGateway

    key = os.urandom(32)
    async with (
        running_gateway(tmp_path / "a", key=key) as (_, base_a, _admin_a),
        running_gateway(tmp_path / "b", key=key) as (gateway_b, base_b, admin_b),
    ):
        await admin_b.put_instance({"id": "proto", "run_id": "g", "apps": [{"app": "notes"}]})
        await admin_b.call_as("proto", "write_note", {"key": "a", "text": "start state"})
        token = gateway_b.admin_token
        async with GatewayPool([SingleGateway(base_a, token), SingleGateway(base_b, token)]) as pool:
            await pool.fork("proto", {"id": "run-1.pad", "run_id": "run-1"})
            assert (await pool.owner("run-1.pad")).base_url == base_b
            read = await pool.call_as("run-1.pad", "read_note", {"key": "a"})
            assert read["result"]["text"] == "start state"
