"""Env topologies: an env on a server of its own (`server`) or on a plugin's compute (`spare_host`, from the test
plugin package agentenv-testtopology in tests/plugins, which also adds the env type `meter`), in real runs on the
Temporal dev server; and the door of such a server, held to the gateway's rules by an outsider over HTTP."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from agent_env.errors import BadInput
from agent_env.gateway.embedded import connect
from agent_env.gateway_client import GatewayRefused, GatewayUnavailable
from agent_env.gateway_client.configured import admin_token
from agent_env.gateway_client.env_servers import (
    EnvServerRecord,
    EnvServers,
    record_of,
    server_client,
    server_key,
)
from agent_env.gateway_client.keys import admin_token as admin_token_of
from agent_env.providers import topologies
from agent_env.spec.run import RunStatus
from agent_env.stores import keys, open_stores
from agent_env.task_lookup import resolve_target
from agent_env.temporal import launch

METER_ENV = """
name = "gauge"
env_provider_type = "{topology}"
[[apps]]
app = "meter"
[roles.operator]
tools = ["*", "set_reading"]
[roles.viewer]
tools = ["read"]
"""

TASK = """
id = "metered"
[[steps]]
id = "env"
type = "deploy_env"
config = {{ env_id = "gauge", agents = {{ vic = "viewer", opal = "operator" }} }}
[[steps]]
id = "bump"
type = "call_tool"
depends_on = ["env"]
config = {{ env = "env", role = "operator", tool = "bump", arguments = {{ by = 3 }} }}
[[steps]]
id = "set"
type = "call_tool"
depends_on = ["bump"]
config = {{ env = "env", role = "operator", tool = "set_reading", arguments = {{ value = 41 }} }}
[[steps]]
id = "opal"
type = "deploy_agent"
depends_on = ["set"]
[steps.config]
env = "env"
record = {{ name = "opal", type = "scripted", config = {{ turns = [[{{ tool = "bump" }}, {{ say = "bumped" }}]] }} }}
[[steps]]
id = "ask"
type = "prompt_agent"
depends_on = ["opal"]
config = {{ agent = "opal", prompt = "Bump the meter." }}
[[steps]]
id = "viewer_cannot_bump"
type = "call_tool"
depends_on = ["ask"]
config = {{ env = "env", agent = "vic", tool = "bump", expect_error = true }}
[[steps]]
id = "pause"
type = "wait_file"
depends_on = ["viewer_cannot_bump"]
config = {{ path = "{gate}" }}
[[steps]]
id = "reading"
type = "check_state"
depends_on = ["pause"]
[steps.config]
env = "env"
role = "viewer"
checks = [{{ name = "set, then bumped by the agent", tool = "read", path = "reading", equals = 42 }}]
"""


def bundle(root: Path, topology: str, gate: Path) -> Path:
    (root / "tasks").mkdir(parents=True)
    (root / "tasks" / "t.toml").write_text(TASK.format(gate=gate))
    (root / "envs" / "gauge").mkdir(parents=True)
    (root / "envs" / "gauge" / "env.toml").write_text(METER_ENV.format(topology=topology))
    return root / "tasks" / "t.toml"


@pytest.mark.parametrize("topology", ["server", "spare_host"])
async def test_a_task_runs_on_an_env_served_by_its_own_server(client, settings, worker, tmp_path, topology):
    gate = tmp_path / "gate"
    started = await launch.start_run(client, settings, resolve_target(str(bundle(tmp_path / "b", topology, gate))))
    stores = open_stores(settings)
    instance = f"{started.id}.env"
    try:
        record = await deployed(settings, stores, instance)
        assert record.topology == topology
        install = connect(settings)
        assert record.url != install.base_url
        with pytest.raises(GatewayRefused) as held:  # the install's gateway never holds it
            await install.get_instance(instance)
        assert held.value.status == 404
        await outsider_meets_the_gateways_door(settings, record.url, instance)
    finally:
        gate.write_text("go")
    state = await launch.wait_result(started)
    assert state.status is RunStatus.PASSED, state
    env = state.steps["env"].outputs
    assert env["gateway"] == record.url and env["urls"]["mcp"].startswith(record.url + "/")
    assert env["agents"]["vic"] == {"role": "viewer", "token_ref": f"gateway-token:{instance}/vic"}
    assert state.steps["bump"].outputs["result"] == {"reading": 3}
    assert (state.steps["ask"].outputs["answer"], state.steps["ask"].outputs["tool_calls"]) == ("bumped", 1)
    assert "not available to role 'viewer'" in state.steps["viewer_cannot_bump"].outputs["error"]
    assert state.score == 1.0
    # The run's end kept its trajectory and stopped its server.
    trajectory = [json.loads(line) for line in stores.objects.get(keys.trajectory(state.run_id, instance)).splitlines()]
    assert [e["tool"] for e in trajectory if e["agent"] == "@operator"] == ["bump", "set_reading"]
    assert {e["tool"] for e in trajectory if e["agent"] == "vic"} == {"bump"}, "the step's and the outsider's"
    assert [e["tool"] for e in trajectory if e["agent"] == "opal"] == ["bump"], "the agent reached it directly"
    assert all(e["refused"] for e in trajectory if e["agent"] == "vic")
    assert await record_of(stores, instance) is None
    with pytest.raises(httpx.TransportError):
        httpx.get(record.url + "/healthz", timeout=2)


async def deployed(settings, stores, instance: str) -> EnvServerRecord:
    """The record of `instance`'s own server, once the deploy step has put the instance on it."""
    for _ in range(1200):
        if (record := await record_of(stores, instance)) is not None:
            async with server_client(settings, record) as own:
                try:
                    await own.get_instance(instance)
                    return record
                except (GatewayRefused, GatewayUnavailable):
                    pass
        await asyncio.sleep(0.1)
    raise AssertionError(f"{instance} was never deployed")


async def outsider_meets_the_gateways_door(settings, url: str, instance: str) -> None:
    """What reaches the server directly is held to what the gateway's door holds it to."""
    own = admin_token_of(server_key(settings, instance))
    async with httpx.AsyncClient(base_url=url, timeout=10) as http:
        viewer = (await http.get(f"/admin/instances/{instance}/tokens/vic", headers=bearer(own))).json()["token"]
        tools = (await http.get(f"/envs/{instance}/tools", headers=bearer(viewer))).json()["tools"]
        assert sorted(t["name"] for t in tools) == ["get_time", "read"], "a role sees its tools (and the clock) only"
        refused = await http.post(f"/envs/{instance}/tools/bump", json={}, headers=bearer(viewer))
        assert refused.status_code in (403, 404) and "bump" in refused.text
        assert (await http.get(f"/envs/{instance}/tools")).status_code == 401, "no token, no tools"
        for stranger in (admin_token(settings), admin_token_of(server_key(settings, instance + "x"))):
            # neither the install's admin token nor another instance's server's opens it
            assert (await http.get(f"/admin/instances/{instance}", headers=bearer(stranger))).status_code == 401
        forged = await http.get(f"/envs/{instance}/tools", headers={**bearer(viewer), "host": "evil.example"})
        assert forged.status_code in (400, 403, 421), "a forged Host is refused at the door"


def bearer(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


async def test_an_env_naming_a_topology_this_install_lacks_fails_when_the_run_is_planned(client, settings, tmp_path):
    task = bundle(tmp_path / "b", "gpu_cloud", tmp_path / "gate")
    with pytest.raises(BadInput) as refused:
        await launch.start_run(client, settings, resolve_target(str(task)))
    assert "env_provider_type 'gpu_cloud'" in refused.value.problem
    assert "gateway, server, spare_host" in refused.value.problem and "agent_env.env_providers" in refused.value.fix


async def test_the_server_topology_serves_one_instance_and_stops_without_a_trace(settings, tmp_path):
    stores = open_stores(settings)
    run_id, instance = "topo-run", "topo-run.env"
    server = topologies.env_server(settings, run_id=run_id, instance=instance, env_name="gauge", topology="server")
    assert server.env[topologies.SERVER_TOKEN_ENV] not in " ".join(server.command), "its key is not on its command line"
    own = await topologies.open_server(server, stores)
    assert own is not None
    try:
        spec = {"id": instance, "run_id": run_id, "env": "gauge", "apps": [{"app": "meter"}], "roles": {"a": {}}}
        assert (await own.put_instance(spec))["apps"] == ["meter"]
        assert (await own.call_as(instance, "bump", {"by": 2}, role="a"))["result"] == {"reading": 2}
        again = await topologies.open_server(server, stores)  # a retried deploy finds the same server
        assert again is not None and again.base_url == own.base_url
        await again.aclose()
        await routed_to_its_server(settings, stores, instance, own.base_url)
    finally:
        await own.aclose()
        assert await topologies.close_server(settings, stores, instance)
    assert await record_of(stores, instance) is None
    with pytest.raises(httpx.TransportError):
        httpx.get(own.base_url + "/healthz", timeout=2)
    assert not await topologies.close_server(settings, stores, instance), "stopping twice finds nothing to stop"


async def routed_to_its_server(settings, stores, instance: str, url: str) -> None:
    """What runs see (`EnvServers`): every request about the instance reaches its own server."""
    async with EnvServers(connect(settings), settings, stores) as router:
        assert await router.url_for(instance) == url
        assert (await router.get_instance(instance))["apps"] == ["meter"]
        card = await router.env_card(instance)
        assert [t["name"] for t in card["capabilities"]["tools"]] == ["get_time", "read", "bump", "set_reading"]
        before = await router.snapshot(instance)
        await router.call_as(instance, "bump", {"by": 5}, role="a")
        assert await router.last_seq(instance) == 2
        await router.restore(instance, before)
        assert (await router.call_as(instance, "read", {}, role="a"))["result"] == {"reading": 2}
        assert await router.set_role(instance, "a", ["read"]) == ["get_time", "read"]
        assert "error" in await router.call_as(instance, "bump", {}, role="a")
        exported = await router.data(instance, "data/get")
        assert exported["parts"][0]["data"] == {"meter": [{"id": 1, "reading": 2}]}
        assert [e["tool"] for e in await router.trajectory(instance)][:2] == ["bump", "bump"]
        assert await router.parked_hits("topo-run") == []
        assert instance in (await router.end_run("topo-run"))["instances"]


def test_unknown_and_broken_topologies_name_the_fix():
    with pytest.raises(BadInput, match="known: gateway, server, spare_host"):
        topologies.load("nowhere")
    assert isinstance(topologies.load("spare_host"), topologies.EnvironmentProvider)


@pytest.mark.processes
def test_plugin_list_shows_env_types_and_topologies():
    done = subprocess.run(
        [str(Path(sys.executable).parent / "agent-env"), "plugin", "list", "--json"],
        capture_output=True,
        text=True,
        env=dict(os.environ),
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    found = {(p["group"], p["name"]): p for p in json.loads(done.stdout)}
    assert found["agent_env.env_providers", "gateway"]["builtin"]
    assert found["agent_env.env_providers", "server"]["status"] == "ok"
    spare = found["agent_env.env_providers", "spare_host"]
    assert (spare["distribution"], spare["status"]) == ("agentenv-testtopology", "ok")
    meter = found["agent_env.envs", "meter"]
    assert (meter["distribution"], meter["status"]) == ("agentenv-testtopology", "ok")
