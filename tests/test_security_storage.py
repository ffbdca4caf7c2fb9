"""An agent that writes without end, against the gateway's storage budgets, over real HTTP: a write flood from
one token stops at its instance's budget (507 naming the setting) while its reads and other instances go on;
past its trajectory budget an instance takes no more calls and its files stop growing; below the free-space
floor every instance's writes are refused and /ready says low disk; the settings reach a gateway process."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import httpx2
import pytest
from conftest import free_port
from gateway_util import mcp_client, running_gateway, support_data, support_spec
from mcp.shared.exceptions import MCPError

from agent_env.gateway import tokens
from agent_env.gateway.service import Gateway
from agent_env.gateway_client import GatewayRefused
from agent_env.gateway_client.single import SingleGateway

MIB = 1024 * 1024
BUDGETS = ("max_app_data_mib", "max_trajectory_mib", "min_free_disk_mib")
DESCRIPTION = "d" * 50_000  # the longest description create_ticket takes (as the red team sent)
TICKET = {"customer_email": "flood@example.com", "subject": "flood", "description": DESCRIPTION}
# What may land past a budget: the calls in flight when it is reached, and one SQLite write-ahead log per
# file (~4 MiB at its auto-checkpoint), whose pages were counted once written to the log.
SLACK = 5 * MIB
CONNECTIONS = 8  # the red team's: 6 over REST, 2 over MCP here
MOST_CALLS = 100  # per connection (~25 fill a budget): a flood never refused fails instead of running on


def bearer(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


def files_of(folder: Path) -> tuple[int, int]:
    """(app data, trajectory): bytes of the instance's files on disk, the trajectory's at the folder's top."""
    app = trajectory = 0
    for where, _, names in os.walk(folder):
        for name in names:
            size = os.stat(os.path.join(where, name)).st_size
            if where == str(folder) and name.startswith("trajectory.sqlite"):
                trajectory += size
            else:
                app += size
    return app, trajectory


async def flood(base: str, instance: str, token: str, tool: str, arguments: dict) -> tuple[int, list[str]]:
    """CONNECTIONS connections call `tool` until each is refused with 507 (REST) or an MCP error.
    Returns (calls answered, the refusals' messages); other answers fail the test."""
    answered = 0

    async def over_rest() -> str:
        nonlocal answered
        async with httpx2.AsyncClient(base_url=base, headers=bearer(token), timeout=60) as http:
            for _ in range(MOST_CALLS):
                answer = await http.post(f"/envs/{instance}/tools/{tool}", json=arguments)
                if answer.status_code == 507:
                    return answer.json()["error"]
                assert answer.status_code in (200, 422), answer.text[:300]  # 422: the tool's own error, recorded
                answered += 1
        raise AssertionError(f"{MOST_CALLS} calls and never refused")

    async def over_mcp() -> str:
        nonlocal answered
        async with mcp_client(base, instance, token) as mcp:
            for _ in range(MOST_CALLS):
                try:
                    await mcp.call_tool(tool, arguments)
                except MCPError as e:
                    return str(e)
                answered += 1
        raise AssertionError(f"{MOST_CALLS} calls and never refused")

    refusals = await asyncio.gather(*[over_rest() for _ in range(CONNECTIONS - 2)], over_mcp(), over_mcp())
    return answered, list(refusals)


async def deploy(admin, instance: str, run: str) -> str:
    """A support desk with its data; returns the role token of its agent sam."""
    await admin.put_instance(support_spec(instance, run_id=run))
    await admin.data(instance, "data/add", {"parts": [{"kind": "data", "data": support_data()}]})
    return await admin.token(instance, "sam")


async def test_a_write_flood_stops_at_the_instance_budget_while_reads_and_others_go_on(tmp_path, caplog):
    """The red team's flood (create_ticket with 50,000-character descriptions, 8 connections, one token) against
    an 8 MiB app-data budget: every connection ends refused (507, naming the setting), the instance's files stay
    near the budget however long it goes on, and its reads and another instance's writes are served. The
    operator's log says so once, not once per refused call."""
    caplog.set_level(logging.WARNING, "agent_env.gateway")
    budget = 8
    async with running_gateway(tmp_path / "gw", max_app_data_mib=budget) as (gateway, base, admin):
        sam = await deploy(admin, "desk-1", "run-1")
        other = await deploy(admin, "desk-2", "run-2")
        tickets = (await admin.call_tool("desk-1", sam, "list_tickets", {}))["count"]
        created, refusals = await flood(base, "desk-1", sam, "create_ticket", TICKET)
        for refusal in refusals:
            assert "'desk-1' is at its app data budget" in refusal, refusal
            assert "max_app_data_mib" in refusal and "AGENT_ENV_GATEWAY_MAX_APP_DATA_MIB" in refusal, refusal
        assert created * len(DESCRIPTION) > (budget - 2) * MIB, "refused near the budget, not before"

        async with httpx2.AsyncClient(base_url=base, timeout=60) as http:
            for _ in range(3 * CONNECTIONS):  # it keeps trying: each try is refused, nothing is written
                again = await http.post("/envs/desk-1/tools/create_ticket", json=TICKET, headers=bearer(sam))
                assert again.status_code == 507, again.text[:300]
            small = {**TICKET, "description": "a short one"}
            assert (
                await http.post("/envs/desk-1/tools/create_ticket", json=small, headers=bearer(sam))
            ).status_code == 507
            listed = await http.post("/envs/desk-1/tools/list_tickets", json={}, headers=bearer(sam))
            assert listed.status_code == 200 and listed.json()["result"]["count"] == tickets + created, "reads"
            elsewhere = await http.post("/envs/desk-2/tools/create_ticket", json=TICKET, headers=bearer(other))
            assert elsewhere.status_code == 200, "another instance keeps writing"
            assert (await http.get("/ready")).status_code == 200, "one instance's budget is not the gateway's"
            document = (await http.get("/envs/desk-1/openapi.json", headers=bearer(sam))).json()
            assert "507" in document["paths"]["/envs/desk-1/tools/create_ticket"]["post"]["responses"]
            metrics = (await http.get("/metrics", headers=bearer(gateway.admin_token))).text
            counted = re.search(r'agentenv_gateway_refusals_total\{reason="storage"\} (\S+)', metrics)
            assert counted and float(counted[1]) >= CONNECTIONS + 3 * CONNECTIONS + 1, "refusals are counted"
        async with mcp_client(base, "desk-1", sam) as mcp:
            assert not (await mcp.call_tool("get_ticket", {"ticket_id": "TCK-1001"})).is_error

        # The run's own loads into the instance are refused alike (REST and the JSON-RPC data plane).
        more = {"parts": [{"kind": "data", "data": {"helpdesk": {"customers": [{"email": "late@example.com"}]}}}]}
        with pytest.raises(GatewayRefused, match="max_app_data_mib") as refused:
            await admin.load("desk-1", more["parts"])
        assert refused.value.status == 507
        with pytest.raises(GatewayRefused, match="max_app_data_mib"):
            await admin.data("desk-1", "data/add", more)

        app, _ = files_of(gateway.folder("desk-1"))
        assert app <= budget * MIB + SLACK, f"{app / MIB:.1f} MiB of app data"
    logged = [r.getMessage() for r in caplog.records if "budget" in r.getMessage()]
    assert len(logged) == 1 and "'desk-1' is at its app data budget" in logged[0], logged


@pytest.mark.processes
async def test_an_app_in_its_own_process_is_budgeted_by_what_it_leaves_in_its_folder(tmp_path):
    """`run = "subprocess"` apps write their own files: those count too."""
    spec = {
        "id": "sub-1",
        "apps": [{"app": "notes", "run": "subprocess"}],
        "roles": {"clerk": {"tools": ["*"]}},
        "agents": {"ann": "clerk"},
    }
    async with running_gateway(tmp_path / "gw", max_app_data_mib=4) as (gateway, base, admin):
        await admin.put_instance(spec)
        ann = await admin.token("sub-1", "ann")
        async with httpx2.AsyncClient(base_url=base, headers=bearer(ann), timeout=60) as http:
            for i in range(4 * MOST_CALLS):
                wrote = await http.post("/envs/sub-1/tools/write_note", json={"key": f"k{i}", "text": DESCRIPTION})
                if wrote.status_code == 507:
                    break
                assert wrote.status_code == 200, wrote.text[:300]
            assert wrote.status_code == 507 and "max_app_data_mib" in wrote.json()["error"], wrote.text[:300]
            assert (await http.post("/envs/sub-1/tools/read_note", json={"key": "k0"})).status_code == 200
        app, _ = files_of(gateway.folder("sub-1"))
        assert app <= 4 * MIB + SLACK, f"{app / MIB:.1f} MiB of app data"


async def test_past_its_trajectory_budget_an_instance_takes_no_more_calls(tmp_path):
    """Refused calls are recorded too: a flood of calls the tool refuses (arguments far past their bounds) grows
    the trajectory alone. Past its budget every call of the instance is refused (a call that cannot be recorded
    does not happen), nothing more is written, the run still reads the trajectory, and others are served."""
    budget = 8
    async with running_gateway(tmp_path / "gw", max_trajectory_mib=budget) as (gateway, base, admin):
        sam = await deploy(admin, "desk-1", "run-1")
        other = await deploy(admin, "desk-2", "run-2")
        bogus = {"status": "x" * 60_000}  # list_tickets refuses it (422), and records it
        answered, refusals = await flood(base, "desk-1", sam, "list_tickets", bogus)
        for refusal in refusals:
            assert "'desk-1' is at its trajectory budget" in refusal and "max_trajectory_mib" in refusal, refusal
        # Refused near the budget, not long before it: the budget is the disk's bytes (the database, its write-ahead
        # log), which run ahead of the arguments' bytes counted here (93 calls of 60 kB were refused once here).
        assert answered * len(bogus["status"]) > budget * MIB // 2, "refused near the budget, not before"
        # The refusals came from the estimate, which may overcount: measured once the writer is done, the trajectory
        # can be just under the budget, and then calls are taken until it is not (as storage.py intends).
        for _ in range(5):
            recorded = await admin.trajectory("desk-1")  # waits for the writer
            more, _ = await flood(base, "desk-1", sam, "list_tickets", bogus)
            if more == 0:
                break
        assert more == 0, "measured past its budget, every connection's first call is refused"
        before = files_of(gateway.folder("desk-1"))
        assert before[1] <= budget * MIB + SLACK, f"{before[1] / MIB:.1f} MiB of trajectory"
        async with httpx2.AsyncClient(base_url=base, timeout=60) as http:
            for _ in range(3 * CONNECTIONS):
                again = await http.post("/envs/desk-1/tools/list_tickets", json=bogus, headers=bearer(sam))
                assert again.status_code == 507, again.text[:300]
            read = await http.post("/envs/desk-1/tools/list_tickets", json={}, headers=bearer(sam))
            assert read.status_code == 507 and "max_trajectory_mib" in read.json()["error"], "a read is a call too"
            elsewhere = await http.post("/envs/desk-2/tools/create_ticket", json=TICKET, headers=bearer(other))
            assert elsewhere.status_code == 200, elsewhere.text[:300]
        assert len(await admin.trajectory("desk-1")) == len(recorded), "refused calls are not recorded"
        assert files_of(gateway.folder("desk-1")) == before, "nothing more was written"
        assert (await admin.data("desk-1", "data/get"))["parts"], "the run still reads the instance's data"


async def test_below_the_free_space_floor_writes_are_refused_and_ready_says_low_disk(tmp_path):
    """A gateway whose disk has less free space than its floor (a floor set above what the disk has): every
    instance's writes are refused (507, naming the setting), reads are served, no instance is made, and /ready
    and /readyz answer 503 saying low disk. With the space back (the floor lowered), writes go through."""
    root = tmp_path / "gw"
    async with running_gateway(root) as (gateway, base, admin):
        tokens_ = {desk: await deploy(admin, desk, f"run-{desk}") for desk in ("desk-1", "desk-2")}
    above = shutil.disk_usage(tmp_path).free // MIB + 1024 * 1024  # a TiB more than the disk has free
    async with running_gateway(root, min_free_disk_mib=above) as (gateway, base, admin):
        async with httpx2.AsyncClient(base_url=base, timeout=60) as http:
            for desk, token in tokens_.items():
                write = await http.post(f"/envs/{desk}/tools/create_ticket", json=TICKET, headers=bearer(token))
                assert write.status_code == 507, write.text[:300]
                assert "below the floor" in write.json()["error"] and "min_free_disk_mib" in write.json()["error"]
                read = await http.post(f"/envs/{desk}/tools/list_tickets", json={}, headers=bearer(token))
                assert read.status_code == 200 and read.json()["result"]["count"] == 5, "reads are served"
            ready = await http.get("/ready")
            assert ready.status_code == 503 and "min_free_disk_mib" in ready.json()["disk"], ready.text
            readyz = await http.get("/readyz")
            assert readyz.status_code == 503 and readyz.json()["reason"].startswith("low disk"), readyz.text
        with pytest.raises(GatewayRefused, match="min_free_disk_mib") as refused:
            await admin.put_instance(support_spec("desk-3", run_id="run-3"))
        assert refused.value.status == 507
        with pytest.raises(GatewayRefused, match="min_free_disk_mib"):
            await admin.restore("desk-1", await admin.snapshot("desk-1"))
        with pytest.raises(GatewayRefused, match="min_free_disk_mib"):
            await admin.fork("desk-1", {"id": "desk-1-copy"})
    async with running_gateway(root, min_free_disk_mib=1) as (gateway, base, admin):
        async with httpx2.AsyncClient(base_url=base, timeout=60) as http:
            write = await http.post("/envs/desk-1/tools/create_ticket", json=TICKET, headers=bearer(tokens_["desk-1"]))
            assert write.status_code == 200, write.text[:300]
            assert (await http.get("/ready")).status_code == 200


def test_the_budgets_are_gateway_settings_with_variables(tmp_path, monkeypatch):
    from agent_env.config import load_settings

    defaults = load_settings(tmp_path).gateway
    assert (defaults.max_app_data_mib, defaults.max_trajectory_mib, defaults.min_free_disk_mib) == (256, 512, 1024)
    made = inspect.signature(Gateway).parameters  # a gateway made in code has the same defaults
    assert all(made[key].default == getattr(defaults, key) for key in BUDGETS)
    (tmp_path / ".agentenv").mkdir()
    (tmp_path / ".agentenv" / "config.toml").write_text("[gateway]\nmax_app_data_mib = 64\nmin_free_disk_mib = 0\n")
    monkeypatch.setenv("AGENT_ENV_GATEWAY_MAX_TRAJECTORY_MIB", "128")
    settings = load_settings(tmp_path)
    g = settings.gateway
    assert (g.max_app_data_mib, g.max_trajectory_mib, g.min_free_disk_mib) == (64, 128, 0)
    assert settings.origin("gateway", "max_trajectory_mib").name == "AGENT_ENV_GATEWAY_MAX_TRAJECTORY_MIB"


@pytest.mark.processes
async def test_a_gateway_process_takes_its_floor_from_the_config(tmp_path):
    """`python -m agent_env.gateway` (what the embedded daemon runs) reads [gateway] min_free_disk_mib."""
    config = tmp_path / "config.toml"
    above = shutil.disk_usage(tmp_path).free // MIB + 1024 * 1024
    config.write_text(f"[gateway]\nmin_free_disk_mib = {above}\n")
    port, root = free_port(), tmp_path / "gw"
    env = {**os.environ, "AGENT_ENV_CONFIG": str(config)}
    gateway = subprocess.Popen(
        [sys.executable, "-m", "agent_env.gateway", "--root", str(root), "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        async with httpx2.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30) as http:
            for _ in range(600):  # until it listens
                with contextlib.suppress(httpx2.TransportError):
                    ready = await http.get("/ready")
                    break
                assert gateway.poll() is None, "the gateway exited"
                await asyncio.sleep(0.05)
            assert ready.status_code == 503 and f"floor of {above} MiB" in ready.json()["disk"], ready.text
        async with SingleGateway(f"http://127.0.0.1:{port}", tokens.admin_token((root / "key").read_bytes())) as admin:
            with pytest.raises(GatewayRefused, match="min_free_disk_mib"):
                await admin.put_instance(support_spec())
    finally:
        gateway.terminate()
        gateway.wait(10)
