"""A composed instance (several apps behind one gateway) over real HTTP and real processes: its card nests each app
served by its own server with that app's own extensions, rooted where the gateway relays them to that app; apps
at URLs written with the protocol's own env SDK start with the run's roles, and get the world's clock again from a
gateway that was killed and came back."""

from __future__ import annotations

import asyncio
import os
import signal
from datetime import UTC, datetime, timedelta

import httpx2
import pytest
from agentenv_protocol.manifest import GET_INTERFACES_EXTENSION_URI
from agentenv_protocol.types import DATA_OBJECTS_EXTENSION_URI, INTAKE_EXTENSION_URI
from gateway_util import mcp_client, running_gateway
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from reference_venv import reference_python, side_script  # noqa: F401 - fixtures: the side venv and its scripts
from test_env_extensions import bearer, card_of, foreign_env  # noqa: F401 - the foreign env, as a fixture

from agent_env.config import load_settings
from agent_env.envs.extensions import set_errors
from agent_env.gateway import embedded
from agent_env.gateway import extensions as gateway_extensions
from agent_env.gateway_client import GatewayRefused
from agent_env.ports import free_port
from agent_env.spec.times import iso

COMPOSED = {
    "id": "desk",
    "run_id": "run-c",
    "apps": [{"app": "notes", "name": "pad", "run": "subprocess"}, {"app": "mail"}],
    "roles": {"writer": {"tools": ["*"], "deny": ["delete_note"]}},
    "agents": {"ann": "writer"},
}
DESK = "/envs/desk"  # the instance's base: the paths its card names are relative to it


def child(card: dict, name: str) -> dict:
    found = [c for c in card["children_environments"] if c["name"] == name]
    assert len(found) == 1, card["children_environments"]
    return found[0]


def extension(card: dict, uri: str) -> dict:
    found = [e for e in card["capabilities"]["extensions"] if e["uri"] == uri]
    assert len(found) == 1, [e["uri"] for e in card["capabilities"]["extensions"]]
    return found[0]


@pytest.mark.processes
async def test_a_composed_card_lists_an_apps_extensions_and_a_call_reaches_that_app(tmp_path):
    async with running_gateway(tmp_path / "gw") as (gateway, base, admin):
        await admin.put_instance(COMPOSED)
        writer = await admin.token("desk", "ann")
        async with httpx2.AsyncClient(base_url=base, timeout=30) as http:
            card = await card_of(http, "desk", gateway.admin_token)
            pad = child(card, "pad")
            assert pad["url"] == "/svc/pad/agentenv", "its data plane, rooted where the gateway relays it"
            errors = extension(pad, set_errors.URI)
            interfaces = extension(pad, GET_INTERFACES_EXTENSION_URI)
            assert interfaces["params"]["endpoint"] == "/svc/pad/agentenv/interface-manifest"
            extension(pad, INTAKE_EXTENSION_URI)  # declarations without a path come as they are
            extension(pad, DATA_OBJECTS_EXTENSION_URI)
            assert {t["name"] for t in pad["capabilities"]["tools"]} >= {"write_note", "delete_note"}
            assert not child(card, "mail")["capabilities"]["extensions"], "an app in the gateway's process serves none"
            assert [e["uri"] for e in card["capabilities"]["extensions"]] == [
                *(e.uri for e in gateway_extensions.CARD_EXTENSIONS),
                gateway_extensions.CHANGES_EXTENSION.uri,  # the in-process mail app keeps a changelog
            ], "the instance's own extensions stay the gateway's"

            # the role's view of the same card: the child's tools are the role's
            as_writer = child(await card_of(http, "desk", writer), "pad")
            assert "delete_note" not in {t["name"] for t in as_writer["capabilities"]["tools"]}

            # set-errors/v1, at the endpoint the composed card names: the app `pad` fails its tool from then on
            method = errors["params"]["methods"]["set_errors"]
            path = method.get("endpoint") or errors["params"]["endpoint"]
            assert path == "/svc/pad" + set_errors.PATH
            body = {"tool_name": "write_note", "error_rate": 1, "error_type": "unavailable"}
            answer = await http.request(method["method"], DESK + path, json=body, headers=bearer(gateway.admin_token))
            assert answer.status_code == 200, answer.text
            with pytest.raises(GatewayRefused, match="unavailable: the service is unavailable"):
                await admin.call_tool("desk", writer, "write_note", {"key": "a", "text": "b"})

            manifest = await http.get(
                DESK + interfaces["params"]["endpoint"] + "/cli", headers=bearer(gateway.admin_token)
            )
            assert manifest.status_code == 200, manifest.text
            assert "write_note" in manifest.text

            # the data plane of that app alone
            got = await http.post(
                DESK + pad["url"],
                json={"jsonrpc": "2.0", "id": 1, "method": "data/get", "params": {}},
                headers=bearer(gateway.admin_token),
            )
            assert got.status_code == 200 and got.json()["result"]["parts"][0]["data"] == {"notes": []}, got.text

            # the operator's, only what the card declares
            for token in (writer, None):
                refused = await http.post(DESK + path, json=body, headers=bearer(token))
                assert refused.status_code == 401, refused.text
            for undeclared in ("/svc/pad/mcp", "/svc/pad/ready", "/svc/pad/agentenv/../mcp", "/svc/mail/agentenv"):
                refused = await http.post(DESK + undeclared, json={}, headers=bearer(gateway.admin_token))
                assert refused.status_code == 404, (undeclared, refused.text)


async def foreign_listing(url: str, role: str) -> set[str]:
    """The tools the foreign env itself lists to a caller of `role` (as a gateway's stamp names it)."""
    async with (
        httpx2.AsyncClient(headers={"AgentEnv-Role": role}, timeout=30) as http,
        Client(streamable_http_client(f"{url}/mcp", http_client=http)) as client,
    ):
        return {t.name for t in (await client.list_tools()).tools}


@pytest.mark.processes
async def test_a_foreign_env_starts_with_the_runs_roles(foreign_env, tmp_path):  # noqa: F811
    assert await foreign_listing(foreign_env, "reader") == {"ping", "secret"}, "its own default: every tool"
    async with running_gateway(tmp_path / "gw") as (gateway, base, admin):
        spec = {
            "id": "mixed",
            "run_id": "run-r",
            "apps": [{"name": "foreign", "url": foreign_env}],
            "roles": {"reader": {"tools": ["ping"]}, "keeper": {"tools": ["*"]}},
            "agents": {"rae": "reader"},
        }
        await admin.put_instance(spec)
        assert await foreign_listing(foreign_env, "reader") == {"ping"}
        assert await foreign_listing(foreign_env, "keeper") == {"ping", "secret"}
        async with mcp_client(base, "mixed", await admin.token("mixed", "rae")) as mcp:
            assert {t.name for t in (await mcp.list_tools()).tools} == {"ping", "get_time"}

        # the composed card: the foreign env's tool access is the gateway's own (same operations, same paths)
        async with httpx2.AsyncClient(base_url=base, timeout=30) as http:
            foreign = child(await card_of(http, "mixed", gateway.admin_token), "foreign")
            disable = extension(foreign, gateway_extensions.DISABLE_TOOL)["params"]
            assert disable["endpoint"] == "/tools/disable", disable
            # ... so the gateway does not relay it past itself (a run-owned instance refuses it there)
            around = await http.post(
                "/envs/mixed/svc/foreign/tools/disable",
                json={"role": "reader", "tools": ["ping"]},
                headers=bearer(gateway.admin_token),
            )
            assert around.status_code == 404, around.text
        assert await foreign_listing(foreign_env, "reader") == {"ping"}


@pytest.mark.processes
async def test_a_restarted_gateway_sets_a_foreign_envs_clock_to_the_worlds(foreign_env, tmp_path, monkeypatch):  # noqa: F811
    """A paced clock pushed with a short lease; the gateway is SIGKILLed and the lease runs out while it is down (the
    world's clock stops there, the foreign env's runs on). The worker's next call starts the gateway again, which
    opens the instance and sets the foreign env's clock to the world's, stopped at the lease, and its roles to the
    run's."""
    monkeypatch.setenv("AGENT_ENV_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("AGENT_ENV_GATEWAY_PORT", str(free_port()))
    settings = load_settings(tmp_path)
    try:
        admin = embedded.connect(settings)
        async with admin:
            await admin.put_instance(
                {
                    "id": "clocked",
                    "run_id": "run-k",
                    "apps": [{"name": "foreign", "url": foreign_env}],
                    "roles": {"agent": {}},
                }
            )
            real = datetime.now(UTC).replace(microsecond=0)
            lease = real + timedelta(seconds=2)
            clock = {
                "mode": "paced",
                "virtual_anchor": "2031-05-01T12:00:00Z",
                "real_anchor": iso(real),
                "rate": 60.0,
                "lease_until": iso(lease),
            }
            await admin.push_world("clocked", {"run_id": "run-k", "clock": clock})
            before = httpx2.get(f"{foreign_env}/seen").json()["clock"]
            assert len(before) == 1 and before[0]["rate"] == 60.0, before

        os.kill(embedded.status(settings).info.pid, signal.SIGKILL)
        # meanwhile the foreign env's own view drifts: a role's tools taken away there, not by the run
        httpx2.post(f"{foreign_env}/tools/disable", json={"role": "agent", "tools": "*"}).raise_for_status()
        assert await foreign_listing(foreign_env, "agent") == set()
        while datetime.now(UTC) <= lease:  # (the run's lease runs out while the gateway is down)
            await asyncio.sleep(0.2)

        async with embedded.connect(settings) as admin:  # the worker's next call starts it again
            await admin.get_instance("clocked")
        world_now = datetime(2031, 5, 1, 12, tzinfo=UTC) + (lease - real) * 60
        after = httpx2.get(f"{foreign_env}/seen").json()["clock"]
        assert after[-1] == {"virtual_time": iso(world_now), "rate": 0.0}, after
        assert await foreign_listing(foreign_env, "agent") == {"ping", "secret"}, "the run's roles again"
    finally:
        embedded.stop(settings)
