"""The gateway under training load: runs release what they opened (files, processes, agents, sessions),
idle instances close and reopen, trajectories are complete, a failing writer is reported, subprocess
apps die with the gateway, remote apps reconnect. Real gateways, real runs, real processes."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx2
import pytest
from conftest import free_port
from gateway_util import mcp_client, running_gateway

from agent_env.gateway import tokens
from agent_env.gateway_client import GatewayUnavailable
from agent_env.spec.run import RunStatus

SMALL_TASK = {
    "id": "small",
    "steps": [
        {"id": "notes", "type": "deploy_env", "config": {"env_id": "notes"}},
        {
            "id": "write",
            "type": "call_tool",
            "depends_on": ["notes"],
            "config": {"env": "notes", "tool": "write_note", "arguments": {"key": "k", "text": "hi"}},
        },
    ],
}
NOTES = {"roles": {"clerk": {"tools": ["*"]}}, "agents": {"ann": "clerk"}, "now": "2026-04-01T08:00:00Z"}


def fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def alive(pid: int) -> bool:
    """Running (a zombie, reaped by no one yet, counts as gone)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


async def wait_until(check, timeout: float = 15.0) -> bool:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.05)
    return True


# -- runs release what they open --


async def test_many_runs_leave_the_gateway_flat(run_task, settings):
    from agent_env.gateway.embedded import status

    async def runs(n: int) -> None:
        for _ in range(0, n, 4):  # a few at a time, like a trainer's parallel episodes
            states = await asyncio.gather(*(run_task(SMALL_TASK) for _ in range(4)))
            assert all(s.status is RunStatus.PASSED for s in states), [s.error for s in states]

    await runs(20)  # warm up: imports, pools, caches
    pid = status(settings).info.pid
    fds_warm, rss_warm = fds(pid), rss_mib(pid)
    await runs(180)
    fds_end, rss_end = fds(pid), rss_mib(pid)
    print(f"gateway {pid}: fds {fds_warm} -> {fds_end}, RSS {rss_warm:.1f} -> {rss_end:.1f} MiB over 180 runs")
    assert fds_end <= fds_warm + 8, f"file descriptors grew from {fds_warm} to {fds_end} over 180 runs"
    assert rss_end - rss_warm < 15, f"RSS grew from {rss_warm:.1f} to {rss_end:.1f} MiB over 180 runs"


async def test_a_hosted_agent_run_leaves_no_agent_behind(run_task, settings):
    from agent_env.gateway.embedded import connect

    pat = {
        "name": "pat",
        "type": "scripted",
        "role": "agent",
        "config": {"turns": [[{"tool": "write_note", "arguments": {"key": "k", "text": "x"}}, {"say": "done"}]]},
    }
    state = await run_task(
        {
            "id": "hosted",
            "steps": [
                {"id": "env", "type": "deploy_env", "config": {"env_id": "notes"}},
                {"id": "pat", "type": "deploy_agent", "depends_on": ["env"], "config": {"record": pat, "env": "env"}},
                {
                    "id": "ask",
                    "type": "prompt_agent",
                    "depends_on": ["pat"],
                    "config": {"agent": "pat", "prompt": "Go"},
                },
            ],
        }
    )
    assert state.status is RunStatus.PASSED, state.error
    async with connect(settings) as admin:
        agents = (await admin._json("GET", "/admin/agents"))["agents"]
        assert not [a for a in agents if a.get("run_id") == state.run_id], "the run's hosted agent was deleted"
        instance = state.steps["env"].outputs["instance"]
        calls = await admin.trajectory(instance)  # the closed instance is still readable
        assert [c["tool"] for c in calls if c["agent"] == "pat"] == ["write_note"]


async def test_ending_a_run_closes_its_instances_and_ends_its_sessions(tmp_path):
    async with running_gateway(tmp_path / "gw") as (gateway, base, admin):
        await admin.put_instance(
            {"id": "i-1", "run_id": "r-1", "apps": [{"app": "notes", "run": "subprocess"}], **NOTES}
        )
        await admin.put_instance({"id": "i-2", "run_id": "r-2", "apps": [{"app": "notes"}], **NOTES})
        await admin.call_as("i-2", "write_note", {"key": "k", "text": "other run"}, agent="ann")
        proc = (await gateway.get("i-1")).apps["notes"].proc
        token = await admin.token("i-1", "ann")
        async with mcp_client(base, "i-1", token, mode="legacy") as mcp:  # a handshake-era session
            await mcp.call_tool("write_note", {"key": "k", "text": "kept"})
            ended = await admin.end_run("r-1")
            assert ended["instances"] == ["i-1"] and ended["sessions"] == 1
            assert proc.poll() is not None, "the subprocess app stopped with its run"
            assert "i-1" not in gateway._instances and "i-2" in gateway._instances, "only the run's instance"
            with pytest.raises(Exception):  # noqa: B017 - the SDK's error for a session the server ended
                await mcp.call_tool("read_note", {"key": "k"})
        gateway.trajectory.flush()
        assert gateway.trajectory.open_files == 1, "only the live run's trajectory file stays open"
        read = await admin.call_as("i-1", "read_note", {"key": "k"}, agent="ann")  # reopened on demand
        assert read["result"]["text"] == "kept"


async def test_idle_instances_close_and_reopen_on_demand(tmp_path):
    async with running_gateway(tmp_path / "gw", idle_close_s=0.5) as (gateway, base, admin):
        await admin.put_instance(
            {"id": "i-1", "run_id": "r-1", "apps": [{"app": "notes", "run": "subprocess"}], **NOTES}
        )
        await admin.call_as("i-1", "write_note", {"key": "k", "text": "before"}, agent="ann")
        proc = gateway._instances["i-1"].apps["notes"].proc
        assert await wait_until(lambda: "i-1" not in gateway._instances, 10), "closed once idle"
        assert await wait_until(lambda: proc.poll() is not None, 10), "its process stopped"
        assert await wait_until(lambda: gateway.trajectory.open_files == 0, 10), "its trajectory file closed"
        token = await admin.token("i-1", "ann")
        async with mcp_client(base, "i-1", token) as mcp:
            read = await mcp.call_tool("read_note", {"key": "k"})
        assert read.structured_content["text"] == "before", "reopened with its data"
        assert [e["tool"] for e in await admin.trajectory("i-1")] == ["write_note", "read_note"]


# -- trajectories: complete, and a failing writer is reported --


async def test_a_long_trajectory_is_kept_whole(tmp_path, settings):
    from agent_env.gateway.release import retire_instance
    from agent_env.gateway.service import Caller
    from agent_env.stores import open_stores

    async with running_gateway(tmp_path / "gw") as (gateway, base, admin):
        await admin.put_instance({"id": "long-1", "run_id": "r-long", "apps": [{"app": "notes"}], **NOTES})
        inst = await gateway.get("long-1")
        for i in range(10_050):
            await gateway.call(Caller(inst, "ann"), "get_time", {"n": i}, via="run")
        stores = open_stores(settings)
        kept = await retire_instance(admin, stores, "r-long", "long-1")
        assert kept["calls"] == 10_050
        lines = stores.objects.get(kept["trajectory"]).decode().splitlines()
        assert len(lines) == 10_050
        assert [json.loads(line)["arguments"]["n"] for line in lines] == list(range(10_050))


async def test_a_runs_end_carries_the_trajectories_a_page_holds_and_the_record_keeps_every_one_whole(
    tmp_path, settings, monkeypatch
):
    from agent_env.gateway import trajectory
    from agent_env.gateway.release import end_run, trajectory_key
    from agent_env.gateway.service import Caller
    from agent_env.stores import open_stores

    async with running_gateway(tmp_path / "gw") as (gateway, base, admin):
        calls = {"short": 2, "mid": 3, "long": 5}
        for name, n in calls.items():
            await admin.put_instance({"id": f"r-1.{name}", "run_id": "r-1", "apps": [{"app": "notes"}], **NOTES})
            inst = await gateway.get(f"r-1.{name}")
            for i in range(n):
                await gateway.call(Caller(inst, "ann"), "get_time", {"n": i}, via="run")
        monkeypatch.setattr(trajectory, "PAGE", 4)  # "long" needs two pages; "short" and "mid" fit one apart
        asked = []
        original = admin._json

        async def counted(method, path, **kwargs):
            asked.append((method, path))
            return await original(method, path, **kwargs)

        monkeypatch.setattr(admin, "_json", counted)
        stores = open_stores(settings)
        assert await end_run(admin, stores, "r-1") == {"closed": 3, "agents_deleted": 0}
        # The end carried what a page holds in all (the first of short and mid it met); the rest was read after it,
        # the long one a page at a time.
        reads = [path.split("/")[3] for _, path in asked if path.endswith("/trajectory")]
        long_twice = ["r-1.long", "r-1.long"]
        assert sorted(reads) in ([*long_twice, "r-1.mid"], [*long_twice, "r-1.short"]), asked
        for name, n in calls.items():
            lines = stores.objects.get(trajectory_key("r-1", f"r-1.{name}")).decode().splitlines()
            assert [json.loads(line)["arguments"]["n"] for line in lines] == list(range(n)), name
        plain = await original("POST", "/admin/runs/r-1/end")  # (idempotent) asked without: as before
        assert "trajectories" not in plain and sorted(plain["instances"]) == ["r-1.long", "r-1.mid", "r-1.short"]


async def test_a_failing_trajectory_writer_makes_the_gateway_unready(tmp_path):
    async with running_gateway(tmp_path / "gw") as (gateway, base, admin):
        for instance in ("bad-1", "good-1"):
            await admin.put_instance({"id": instance, "apps": [{"app": "notes"}], **NOTES})
        async with httpx2.AsyncClient(base_url=base) as http:
            assert (await http.get("/ready")).status_code == 200
            gateway.folder("bad-1").joinpath("trajectory.sqlite").mkdir(parents=True)  # SQLite cannot open it
            await admin.call_as("bad-1", "write_note", {"key": "k", "text": "x"}, agent="ann")
            await admin.call_as("good-1", "write_note", {"key": "k", "text": "x"}, agent="ann")
            gateway.trajectory.flush()
            ready = await http.get("/ready")
        assert ready.status_code == 503
        problem = ready.json()["trajectory"]
        assert "bad-1" in problem["error"] and "OperationalError" in problem["error"] and problem["lost_entries"] == 1
        assert [e["tool"] for e in await admin.trajectory("good-1")] == ["write_note"], "the writer kept serving"


# -- processes: subprocess apps die with the gateway; remote apps reconnect --


async def test_a_killed_gateway_takes_its_subprocess_apps_along(tmp_path):
    port, root = free_port(), tmp_path / "gw"
    gateway = subprocess.Popen(
        [sys.executable, "-m", "agent_env.gateway", "--root", str(root), "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        from agent_env.gateway_client.single import SingleGateway

        admin = SingleGateway(
            f"http://127.0.0.1:{port}",
            tokens.admin_token(tokens.load_or_create_key(root / "key"))
            if await wait_until(lambda: (root / "key").exists())
            else None,
        )
        async with admin:
            for _ in range(300):  # until it listens
                try:
                    await admin.put_instance({"id": "sub-1", "apps": [{"app": "notes", "run": "subprocess"}], **NOTES})
                    break
                except GatewayUnavailable:
                    await asyncio.sleep(0.05)
        children = [int(p) for p in Path(f"/proc/{gateway.pid}/task/{gateway.pid}/children").read_text().split()]
        assert children, "the gateway started the app's server"
        gateway.send_signal(signal.SIGKILL)
        gateway.wait()
        assert await wait_until(lambda: not any(alive(c) for c in children), 10), "no orphaned app server"
    finally:
        if gateway.poll() is None:
            gateway.kill()
            gateway.wait()


def serve_notes(port: int, state: Path, token: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "agent_env", "env", "serve", "notes", "--port", str(port), "--state", str(state)],
        env={**os.environ, "AGENT_ENV_SERVER_TOKEN": token},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


async def test_a_remote_app_reconnects_after_its_server_restarts(tmp_path):
    port = free_port()
    async with running_gateway(tmp_path / "gw") as (gateway, base, admin):
        token = tokens.server_token(gateway.key, "remote-1", "notes")
        server = serve_notes(port, tmp_path / "state", token)
        try:
            await admin.put_instance(
                {"id": "remote-1", "apps": [{"name": "notes", "url": f"http://127.0.0.1:{port}"}], **NOTES}
            )
            await admin.call_as("remote-1", "write_note", {"key": "k", "text": "one"}, agent="ann")
            server.kill()
            server.wait()
            down = await admin.call_as("remote-1", "read_note", {"key": "k"}, agent="ann")
            assert "error" in down, "a call while the server is down fails (and does not hang)"
            server = serve_notes(port, tmp_path / "state", token)
            async with httpx2.AsyncClient() as http:

                async def up() -> bool:
                    try:
                        return (await http.get(f"http://127.0.0.1:{port}/ready")).status_code == 200
                    except httpx2.TransportError:
                        return False

                for _ in range(300):
                    if await up():
                        break
                    await asyncio.sleep(0.05)
            again = await admin.call_as("remote-1", "read_note", {"key": "k"}, agent="ann")
            assert again.get("result", {}).get("text") == "one", again
        finally:
            server.kill()
            server.wait()
