"""The gateway over real HTTP on 127.0.0.1: the mcp SDK's client, REST, roles from every angle,
the data plane, snapshots, trajectory, and a restart."""

from __future__ import annotations

import asyncio

import httpx2
import pytest
from agentenv_protocol.types import EnvironmentCard as ReferenceCard
from gateway_util import mcp_client, running_gateway, support_data, support_spec
from mcp.shared.exceptions import MCPError

from agent_env.gateway_client import GatewayRefused


@pytest.fixture
async def desk(tmp_path):
    async with running_gateway(tmp_path / "gw") as (gateway, base, admin):
        await admin.put_instance(support_spec())
        await admin.data("desk-1", "data/add", {"parts": [{"kind": "data", "data": support_data()}]})
        yield gateway, base, admin


async def tool_names(base, instance, token, mode="auto"):
    async with mcp_client(base, instance, token, mode) as mcp:
        return {t.name for t in (await mcp.list_tools()).tools}


async def test_roles_decide_what_each_agent_sees(desk):
    gateway, base, admin = desk
    sam = await tool_names(base, "desk-1", await admin.token("desk-1", "sam"))
    lee = await tool_names(base, "desk-1", await admin.token("desk-1", "lee"))
    assert {"send_email", "list_tickets", "get_order", "get_time"} <= sam
    assert "issue_refund" not in sam, "hidden tools need naming, `*` is not enough"
    assert "verify_order" not in sam, "denied"
    assert lee == {"get_account", "list_orders", "get_order", "verify_order", "issue_refund", "get_time"}


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_a_call_outside_the_role_is_refused_and_recorded(desk, mode):
    gateway, base, admin = desk
    args = {"order_id": "ORD-1001", "charge_id": "CH-5002", "amount_cents": 4900, "reason": "duplicate"}
    async with mcp_client(base, "desk-1", await admin.token("desk-1", "sam"), mode) as mcp:
        refused = await mcp.call_tool("issue_refund", args)
    assert refused.is_error and "not available to role 'support'" in refused.content[0].text
    order = (await admin.call_as("desk-1", "get_order", {"order_id": "ORD-1001"}, role="billing_lead"))["result"]
    assert all(c["refunded_cents"] == 0 for c in order["charges"]), "nothing happened"
    entries = await admin.trajectory("desk-1")
    last = [e for e in entries if e["tool"] == "issue_refund"][-1]
    assert last["refused"] and last["agent"] == "sam" and last["role"] == "support"


async def test_tokens_are_required_and_bound_to_their_instance(desk):
    gateway, base, admin = desk
    await admin.put_instance({**support_spec("desk-2")})
    other = await admin.token("desk-2", "lee")
    async with httpx2.AsyncClient() as http:
        url = f"{base}/envs/desk-1/mcp"
        body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
        assert (await http.post(url, json=body)).status_code == 401
        assert (await http.post(url, json=body, headers={"authorization": "Bearer aet_wrong"})).status_code == 403
        assert (await http.post(url, json=body, headers={"authorization": f"Bearer {other}"})).status_code == 403
        assert (
            await http.post(url, json=body, headers={"authorization": f"Bearer {gateway.admin_token}"})
        ).status_code == 403
        assert (
            await http.get(f"{base}/envs/nope/tools", headers={"authorization": f"Bearer {other}"})
        ).status_code == 404
    with pytest.raises(Exception):  # noqa: B017 - the mcp client surfaces the 401 as an error
        await tool_names(base, "desk-1", None)


async def test_a_client_sent_role_is_never_trusted(desk):
    gateway, base, admin = desk
    sam = await admin.token("desk-1", "sam")
    async with mcp_client(base, "desk-1", sam, headers={"AgentEnv-Role": "billing_lead"}) as mcp:
        names = {t.name for t in (await mcp.list_tools()).tools}
        result = await mcp.call_tool(
            "issue_refund",
            {"order_id": "ORD-1001", "charge_id": "CH-5002", "amount_cents": 100, "reason": "x"},
            meta={"agentenv.io/role": "billing_lead"},
        )
    assert "issue_refund" not in names and result.is_error


async def test_role_changes_apply_from_the_next_call_and_notify(desk):
    gateway, base, admin = desk
    sam = await admin.token("desk-1", "sam")
    heard = []

    async def on_message(message):
        heard.append(getattr(getattr(message, "root", message), "method", type(message).__name__))

    async with (
        mcp_client(base, "desk-1", sam, "legacy", message_handler=on_message) as legacy,
        mcp_client(base, "desk-1", sam, "auto") as modern,
    ):
        assert "issue_refund" not in {t.name for t in (await legacy.list_tools()).tools}
        async with modern.listen(tools_list_changed=True) as subscription:
            await admin.set_role("desk-1", "support", ["*", "issue_refund"])
            event = await asyncio.wait_for(subscription.__anext__(), 5)
        assert "ToolsListChanged" in type(event).__name__
        for _ in range(50):
            if "notifications/tools/list_changed" in heard:
                break
            await asyncio.sleep(0.05)
        assert "notifications/tools/list_changed" in heard
        assert "issue_refund" in {t.name for t in (await legacy.list_tools()).tools}
        done = await legacy.call_tool(
            "issue_refund",
            {"order_id": "ORD-1001", "charge_id": "CH-5002", "amount_cents": 4900, "reason": "charged twice"},
        )
        assert not done.is_error, done.content[0].text
    # an agent can also move to another role
    await admin.set_agent_role("desk-1", "sam", "billing_lead")
    assert "send_email" not in await tool_names(base, "desk-1", sam)


async def test_calls_are_stamped_and_recorded(desk):
    gateway, base, admin = desk
    async with mcp_client(base, "desk-1", await admin.token("desk-1", "sam")) as mcp:
        created = await mcp.call_tool(
            "create_ticket",
            {"customer_email": "dana@example.com", "subject": "Refund?", "description": "Still waiting."},
        )
        time = await mcp.call_tool("get_time", {"zone": "America/New_York"})
        bad_zone = await mcp.call_tool("get_time", {"zone": "Mars/Olympus"})
        bad_args = await mcp.call_tool("assign_ticket", {"ticket_id": 42})
    assert created.structured_content["created_at"] == "2026-02-16T09:30:00Z", "the app used the virtual now"
    assert time.structured_content == {
        "utc": "2026-02-16T09:30:00Z",
        "zone": "America/New_York",
        "local": "2026-02-16T04:30:00-05:00",
    }
    assert bad_zone.is_error and "IANA" in bad_zone.content[0].text
    assert bad_args.is_error and "ticket_id: Input should be a valid string" in bad_args.content[0].text
    assert "assignee: is required" in bad_args.content[0].text
    entries = [e for e in await admin.trajectory("desk-1") if e["via"] == "mcp"]
    first = entries[0]
    assert (first["agent"], first["role"], first["tool"], first["run_id"]) == (
        "sam",
        "support",
        "create_ticket",
        "run-1",
    )
    assert first["arguments"]["subject"] == "Refund?" and first["result"]["id"].startswith("TCK-")
    assert first["virtual_time"] == "2026-02-16T09:30:00Z" and first["duration_ms"] >= 0
    assert entries[-1]["error"].startswith("invalid arguments for assign_ticket")
    assert [e["seq"] for e in entries] == sorted(e["seq"] for e in entries)


async def test_a_trajectory_longer_than_a_page_is_read_whole_and_a_short_page_ends_the_read(desk, monkeypatch):
    from agent_env.gateway import trajectory

    gateway, base, admin = desk
    for _ in range(7):
        await admin.call_as("desk-1", "get_time", {"zone": "UTC"}, role="support")
    everything = await admin.trajectory("desk-1")
    monkeypatch.setattr(trajectory, "PAGE", 3)
    pages = []
    original = admin._json

    async def counted(method, path, **kwargs):
        reply = await original(method, path, **kwargs)
        pages.append(len(reply["entries"]))
        return reply

    monkeypatch.setattr(admin, "_json", counted)
    assert await admin.trajectory("desk-1") == everything and len(everything) >= 7
    full, rest = divmod(len(everything), 3)
    assert pages == [3] * full + ([rest] if rest else [0]), pages  # no empty page asked after a short one


async def test_rest_and_card(desk):
    gateway, base, admin = desk
    sam = await admin.token("desk-1", "sam")
    listed = {t["name"] for t in await admin.list_tools("desk-1", sam)}
    assert listed == await tool_names(base, "desk-1", sam)
    order = await admin.call_tool("desk-1", sam, "get_order", {"order_id": "ORD-1001"})
    assert len(order["charges"]) == 2
    for tool, args, status in [
        ("issue_refund", {}, 403),
        ("nope", {}, 404),
        ("get_order", {"order_id": "X"}, 422),
        ("get_order", {"order": "ORD-1001"}, 422),
    ]:
        with pytest.raises(GatewayRefused) as e:
            await admin.call_tool("desk-1", sam, tool, args)
        assert e.value.status == status, (tool, e.value)
    async with httpx2.AsyncClient() as http:
        card = (
            await http.get(f"{base}/envs/desk-1/.well-known/agent-env.json", headers={"authorization": f"Bearer {sam}"})
        ).json()
    ReferenceCard.model_validate(card)
    assert card["name"] == "support-desk" and card["capabilities"]["operations"] == [
        "data/reset",
        "data/add",
        "data/get",
    ]
    assert {t["name"] for t in card["capabilities"]["tools"]} == listed
    assert [c["name"] for c in card["children_environments"]] == ["mail", "helpdesk", "billing"]


async def test_a_token_asked_with_its_tools_lists_them_as_the_token_would(desk):
    gateway, base, admin = desk
    await admin.change_role("desk-1", "support", enable=["issue_refund"], disable=[])  # a listing changed since
    for agent, role in (("sam", "support"), ("lee", "billing_lead")):
        token, tools = await admin.token_and_tools("desk-1", agent)
        assert token == await admin.token("desk-1", agent)
        assert tools == await admin.list_tools("desk-1", token), agent
        assert {t["name"] for t in tools} == await tool_names(base, "desk-1", token)
        async with httpx2.AsyncClient(headers={"authorization": f"Bearer {gateway.admin_token}"}) as http:
            # The plain answer is unchanged; the role comes with the tools.
            plain = (await http.get(f"{base}/admin/instances/desk-1/tokens/{agent}")).json()
            full = (await http.get(f"{base}/admin/instances/desk-1/tokens/{agent}?tools=1")).json()
        assert plain == {"token": token} and full["role"] == role
    assert "issue_refund" in {t["name"] for t in (await admin.token_and_tools("desk-1", "sam"))[1]}


async def test_data_plane_fans_out_to_every_app(desk):
    gateway, base, admin = desk
    parts = (await admin.data("desk-1", "data/get"))["parts"]
    assert [p["metadata"]["agentenv.io/app"] for p in parts] == ["mail", "helpdesk", "billing"]
    billing = parts[2]["data"]
    assert {c["id"] for c in billing["charges"]} >= {"CH-5001", "CH-5002"}
    await admin.data("desk-1", "data/reset")
    assert all(not any(rows for rows in p["data"].values()) for p in (await admin.data("desk-1", "data/get"))["parts"])
    await admin.data(
        "desk-1",
        "data/add",
        {"parts": [{"kind": "data", "data": support_data()["billing"], "metadata": {"agentenv.io/app": "billing"}}]},
    )
    assert (await admin.call_as("desk-1", "get_account", {"email": "dana@example.com"}, role="billing_lead"))["result"]
    with pytest.raises(GatewayRefused, match="not an app of this environment"):
        await admin.data("desk-1", "data/add", {"parts": [{"kind": "data", "data": {"crm": {}}}]})
    async with httpx2.AsyncClient() as http:
        answer = (
            await http.post(
                f"{base}/envs/desk-1/agentenv",
                content=b"{oops",
                headers={"authorization": f"Bearer {gateway.admin_token}"},
            )
        ).json()
        assert answer["error"]["code"] == -32700
        no_admin = await http.post(
            f"{base}/envs/desk-1/agentenv", json={"jsonrpc": "2.0", "id": 1, "method": "data/get"}
        )
        assert no_admin.status_code == 401


async def test_snapshot_mutate_restore(desk):
    gateway, base, admin = desk
    before = await admin.snapshot("desk-1")
    await admin.call_as(
        "desk-1",
        "issue_refund",
        {"order_id": "ORD-1001", "charge_id": "CH-5002", "amount_cents": 4900, "reason": "dup"},
        role="billing_lead",
    )
    refunded = (await admin.call_as("desk-1", "get_order", {"order_id": "ORD-1001"}, role="billing_lead"))["result"]
    assert refunded["refunds"]
    await admin.restore("desk-1", before)
    restored = (await admin.call_as("desk-1", "get_order", {"order_id": "ORD-1001"}, role="billing_lead"))["result"]
    assert restored["refunds"] == []
    with pytest.raises(GatewayRefused, match="snapshot holds"):
        await admin.put_instance(
            {**support_spec("notes-1"), "apps": [{"app": "notes"}], "roles": {"agent": {}}, "agents": {}}
        )
        await admin.restore("notes-1", before)


async def test_setup_calls_with_an_idempotency_key_take_effect_once(desk):
    gateway, base, admin = desk
    args = {"customer_email": "dana@example.com", "subject": "S", "description": "D"}
    first = await admin.call_as("desk-1", "create_ticket", args, role="support", idempotency_key="run-1/step-a")
    again = await admin.call_as("desk-1", "create_ticket", args, role="support", idempotency_key="run-1/step-a")
    assert first == again
    tickets = await admin.call_as("desk-1", "list_tickets", {"customer_email": "dana@example.com"}, role="support")
    assert sum(t["subject"] == "S" for t in tickets["result"]["tickets"]) == 1


async def test_bad_specs_are_refused_with_the_reason(desk):
    gateway, base, admin = desk
    with pytest.raises(GatewayRefused, match="are both exposed as 'write_note'"):
        await admin.put_instance({"id": "clash", "apps": [{"app": "notes"}, {"app": "notes", "name": "notes2"}]})
    ok = await admin.put_instance(
        {"id": "prefixed", "apps": [{"app": "notes"}, {"app": "notes", "name": "notes2", "prefix": "two_"}]}
    )
    assert "two_list_notes" in ok["roles"]["agent"]
    with pytest.raises(GatewayRefused, match="'refund_money' matches no tool"):
        await admin.put_instance(
            {**support_spec("typo"), "roles": {"support": {"tools": ["refund_money"]}}, "agents": {}}
        )
    with pytest.raises(GatewayRefused, match="has role 'boss'"):
        await admin.put_instance({**support_spec("agents"), "agents": {"sam": "boss"}})
    with pytest.raises(GatewayRefused, match="app"):
        await admin.put_instance({"id": "bad", "apps": [{"app": "nope:Nothing"}]})
    with pytest.raises(GatewayRefused, match="other apps"):
        await admin.put_instance({**support_spec(), "apps": [{"app": "notes"}]})


async def test_oversized_payloads_are_refused(tmp_path):
    async with running_gateway(tmp_path / "gw", max_body_bytes=64 * 1024) as (gateway, base, admin):
        await admin.put_instance({"id": "n", "apps": [{"app": "notes"}]})
        token = await admin.token("n", "agent")
        with pytest.raises(GatewayRefused) as e:
            await admin.call_tool("n", token, "write_note", {"key": "k", "text": "x" * 100_000})
        assert e.value.status == 413
        async with mcp_client(base, "n", token) as mcp:
            with pytest.raises(MCPError):
                await mcp.call_tool("write_note", {"key": "k", "text": "x" * 100_000})
            assert not (await mcp.call_tool("write_note", {"key": "k", "text": "fine"})).is_error


async def test_a_restarted_gateway_serves_the_same_instances_data_and_tokens(tmp_path):
    async with running_gateway(tmp_path / "gw") as (gateway, base, admin):
        await admin.put_instance(support_spec())
        token = await admin.token("desk-1", "sam")
        await admin.call_tool(
            "desk-1", token, "create_ticket", {"customer_email": "x@example.com", "subject": "kept", "description": "d"}
        )
        await admin.set_role("desk-1", "support", ["helpdesk.*"])
    async with running_gateway(tmp_path / "gw") as (gateway, base, admin):
        tickets = await admin.call_tool("desk-1", token, "list_tickets", {})
        assert [t["subject"] for t in tickets["tickets"]] == ["kept"]
        assert "send_email" not in await tool_names(base, "desk-1", token), "the role change survived too"
        assert [e["tool"] for e in await admin.trajectory("desk-1")] == ["create_ticket", "list_tickets"]


@pytest.mark.processes
async def test_apps_in_processes_of_their_own(tmp_path):
    """`run = "subprocess"`: the app is served by its own `agent-env env serve` and reached over MCP and the
    data plane, composed with an in-process app behind the same endpoint."""
    spec = {
        "id": "mixed",
        "run_id": "run-9",
        "apps": [{"app": "notes", "run": "subprocess"}, {"app": "billing"}],
        "roles": {"clerk": {"tools": ["*", "issue_refund"]}},
        "agents": {"ann": "clerk"},
        "now": "2026-04-01T08:00:00Z",
    }
    async with running_gateway(tmp_path / "gw") as (gateway, base, admin):
        await admin.put_instance(spec)
        token = await admin.token("mixed", "ann")
        async with mcp_client(base, "mixed", token) as mcp:
            names = {t.name for t in (await mcp.list_tools()).tools}
            assert {"write_note", "issue_refund", "get_time"} <= names
            written = await mcp.call_tool("write_note", {"key": "k", "text": "remote"})
            assert written.structured_content == {"key": "k", "updated_at": "2026-04-01T08:00:00Z"}
            read = await mcp.call_tool("read_note", {"key": "k"})
            assert read.structured_content["author"] == "ann", "the caller reached the other process's app"
            bad = await mcp.call_tool("read_note", {"key": 1})
            assert bad.is_error and "key: Input should be a valid string" in bad.content[0].text
        parts = [{"kind": "data", "data": {"notes": {"notes": [{"key": "seed", "text": "s", "updated_at": "t"}]}}}]
        await admin.load("mixed", parts, idempotency_key="load-1")
        await admin.load("mixed", parts, idempotency_key="load-1")  # a retry: applied once
        got = {p["metadata"]["agentenv.io/app"]: p["data"] for p in (await admin.data("mixed", "data/get"))["parts"]}
        assert sorted(n["key"] for n in got["notes"]["notes"]) == ["k", "seed"]
        snapshot = await admin.snapshot("mixed")
        await admin.call_tool("mixed", token, "delete_note", {"key": "seed"})
        await admin.restore("mixed", snapshot)
        assert "seed" in (await admin.call_tool("mixed", token, "list_notes", {}))["notes"]
        pid = (await gateway.get("mixed")).apps["notes"].proc.pid
    async with running_gateway(tmp_path / "gw") as (gateway, base, admin):
        assert (await admin.call_tool("mixed", token, "read_note", {"key": "k"}))["text"] == "remote"
        new_pid = (await gateway.get("mixed")).apps["notes"].proc.pid
        assert new_pid != pid and gone(pid), "the first gateway stopped its app process"
        await admin.delete_instance("mixed")
        for _ in range(100):
            if gone(new_pid):
                break
            await asyncio.sleep(0.05)
        else:
            raise AssertionError("the app process outlived its instance")


def gone(pid: int) -> bool:
    """No such process, or only a zombie left to be reaped."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return not f.read()
    except OSError:
        return True


LAZY_PROBE = """
import asyncio, json, sys
from pathlib import Path

import uvicorn

from agent_env.gateway_client.single import SingleGateway
from agent_env.gateway.http import create_app
from agent_env.gateway.service import Gateway

def loaded():
    return {"mcp": "mcp" in sys.modules, "a2a": "a2a" in sys.modules}

async def main(root):
    gateway = Gateway(Path(root))
    server = uvicorn.Server(uvicorn.Config(create_app(gateway), host="127.0.0.1", port=0, log_level="warning"))
    serving = asyncio.create_task(server.serve())
    while not server.started:
        await asyncio.sleep(0.01)
    base = "http://127.0.0.1:%d" % server.servers[0].sockets[0].getsockname()[1]
    admin = SingleGateway(base, gateway.admin_token)
    seen = {"started": loaded()}
    await admin.put_instance({"id": "pad", "apps": [{"app": "notes"}], "agents": {"ada": "agent"}})
    await admin.call_as("pad", "write_note", {"key": "k", "text": "hi"}, agent="ada")
    seen["after REST"] = loaded()
    token = await admin.token("pad", "ada")
    from mcp.client import Client
    from mcp.client.streamable_http import streamable_http_client
    import httpx2
    async with httpx2.AsyncClient(headers={"authorization": "Bearer " + token}, timeout=30) as http:
        async with Client(streamable_http_client(base + "/envs/pad/mcp", http_client=http)) as mcp:
            read = await mcp.call_tool("read_note", {"key": "k"})
    seen["mcp read"] = read.structured_content["text"]
    await admin.aclose()
    server.should_exit = True
    await serving
    gateway.close()
    print(json.dumps(seen))

asyncio.run(main(sys.argv[1]))
"""


def test_the_gateway_loads_the_mcp_and_a2a_sdks_only_when_used(tmp_path):
    """Half a second of imports a cold `agent-env run` does not wait for: a gateway serving runs over REST never
    loads either SDK; its first MCP session loads mcp and works."""
    import json
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", LAZY_PROBE, str(tmp_path)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["started"] == {"mcp": False, "a2a": False}
    assert seen["after REST"] == {"mcp": False, "a2a": False}
    assert seen["mcp read"] == "hi"
