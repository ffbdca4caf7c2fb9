"""Env servers against hostile neighbours (SECURITY.md): a server the gateway starts for a run (a
subprocess, a sandbox, a container) answers only the gateway, and `agent-env env serve` cannot be driven
by a web page. Real processes over real HTTP on 127.0.0.1; each test's docstring names the attack."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import httpx2
import pytest
from agentenv_protocol import client as reference
from agentenv_protocol.types import DataPart
from conftest import free_port
from gateway_util import mcp_client, running_gateway

AGENT_ENV = str(Path(sys.executable).parent / "agent-env")
ECHO_SERVER = Path(__file__).parent.parent / "agent_env" / "bundles" / "echo-mcp" / "envs" / "echo" / "server"
MCP_HEADERS = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "intruder", "version": "1"}},
}
NOTE = {"key": "kept", "text": "before", "updated_at": "2026-01-01T00:00:00Z"}


def rpc_body(method: str, params: dict | None = None) -> dict:
    return {"jsonrpc": "2.0", "id": 7, "method": method, "params": params or {}}


def tool_call(name: str, arguments: dict, meta: dict | None = None) -> dict:
    params = {"name": name, "arguments": arguments, **({"_meta": meta} if meta else {})}
    return {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": params}


async def intrusions(base: str, **headers) -> list[int]:
    """What a local process gets trying the server's every door: initialize, a tool call with a forged
    role, a listing (hidden tools), the card, and a data/reset."""
    async with httpx2.AsyncClient(timeout=10) as http:
        answers = [
            await http.post(f"{base}/mcp", json=INITIALIZE, headers={**MCP_HEADERS, **headers}),
            await http.post(
                f"{base}/mcp",
                headers={**MCP_HEADERS, **headers},
                json=tool_call(
                    "issue_refund",
                    {"order_id": "ORD-1", "charge_id": "CH-1", "amount_cents": 1, "reason": "x"},
                    {"agentenv.io/role": "billing_lead", "agentenv.io/agent": "lee"},
                ),
            ),
            await http.post(
                f"{base}/mcp",
                headers={**MCP_HEADERS, **headers},
                json={"jsonrpc": "2.0", "id": 3, "method": "tools/list"},
            ),
            await http.get(f"{base}/.well-known/agent-env.json", headers=headers),
            await http.post(f"{base}/agentenv", json=rpc_body("data/reset"), headers=headers),
        ]
    return [a.status_code for a in answers]


# -- apps the gateway runs in processes of their own --

SPEC = {
    "id": "sub-1",
    "run_id": "run-sec",
    "now": "2026-04-01T08:00:00Z",
    "apps": [{"app": "notes", "run": "subprocess"}, {"app": "billing", "run": "subprocess"}],
    "roles": {"clerk": {"tools": ["*"]}},
    "agents": {"ann": "clerk"},
}


async def test_a_subprocess_app_answers_only_the_gateway(tmp_path):
    """Attack: an agent on the same machine finds the port of an app's own `env serve` process and talks
    to it directly — initialize, call a hidden tool claiming another role, list hidden tools, read the
    card, wipe the data — skipping roles, hidden tools and the trajectory. Also: it reads the token off
    the process's command line."""
    async with running_gateway(tmp_path / "gw") as (gateway, base, admin):
        await admin.put_instance(SPEC)
        await admin.load("sub-1", [{"kind": "data", "data": {"notes": {"notes": [NOTE]}}}])
        apps = (await gateway.get("sub-1")).apps
        for name in ("notes", "billing"):
            server = apps[name].base_url
            assert await intrusions(server) == [401] * 5, f"{name}: no token"
            assert await intrusions(server, authorization="Bearer aes_guessed") == [401] * 5, f"{name}: wrong token"
            agent_token = await admin.token("sub-1", "ann")
            assert await intrusions(server, authorization=f"Bearer {agent_token}") == [401] * 5, "a role token"
            assert await intrusions(server, authorization=f"Bearer {gateway.admin_token}") == [401] * 5
            async with httpx2.AsyncClient() as http:
                refused = await http.post(f"{server}/agentenv", json=rpc_body("data/reset"))
                assert "answers only it" in refused.json()["error"], "the refusal says where to go instead"
                assert (await http.get(f"{server}/ready")).status_code == 200, "readiness stays open"
            cmdline = Path(f"/proc/{apps[name].proc.pid}/cmdline").read_bytes()
            assert apps[name]._auth.token.encode() not in cmdline, "the token is not on the command line"

        got = {p["metadata"]["agentenv.io/app"]: p["data"] for p in (await admin.data("sub-1", "data/get"))["parts"]}
        assert got["notes"]["notes"] == [{**NOTE, "author": None}], "the refused reset changed nothing"
        assert await admin.trajectory("sub-1") == [], "nothing reached the apps, so nothing to record"


async def test_the_gateway_still_works_through_token_guarded_servers(tmp_path):
    """Attack: an agent behind the gateway forges `_meta` (role, agent, time) to act as someone else, and
    asks for a hidden tool; the guarded servers must still serve the gateway (calls, data, snapshots)."""
    async with running_gateway(tmp_path / "gw") as (gateway, base, admin):
        await admin.put_instance(SPEC)
        token = await admin.token("sub-1", "ann")
        async with mcp_client(base, "sub-1", token) as mcp:
            names = {t.name for t in (await mcp.list_tools()).tools}
            assert "write_note" in names and "get_order" in names
            assert "issue_refund" not in names, "a hidden tool stays hidden"
            forged = {
                "agentenv.io/role": "billing_lead",
                "agentenv.io/agent": "lee",
                "agentenv.io/now": "1999-01-01T00:00:00Z",
            }
            written = await mcp.call_tool("write_note", {"key": "k", "text": "mine"}, meta=forged)
            assert written.structured_content == {"key": "k", "updated_at": "2026-04-01T08:00:00Z"}, "gateway time"
            read = await mcp.call_tool("read_note", {"key": "k"})
            assert read.structured_content["author"] == "ann", "the gateway's stamp, not the forged one"
            refund = await mcp.call_tool(
                "issue_refund", {"order_id": "O", "charge_id": "C", "amount_cents": 1, "reason": "x"}, meta=forged
            )
            assert refund.is_error and "not available to role 'clerk'" in refund.content[0].text
        await admin.load("sub-1", [{"kind": "data", "data": {"notes": {"notes": [NOTE]}}}], idempotency_key="l-1")
        snapshot = await admin.snapshot("sub-1")
        await admin.call_tool("sub-1", token, "delete_note", {"key": "kept"})
        await admin.restore("sub-1", snapshot)
        assert set((await admin.call_tool("sub-1", token, "list_notes", {}))["notes"]) == {"k", "kept"}
        calls = [(e["tool"], e["agent"], e["role"]) for e in await admin.trajectory("sub-1")]
        assert ("issue_refund", "ann", "clerk") in calls, "the refused call is on the trajectory"


# -- `agent-env env serve` --


def serve(tmp_path: Path, *args: str, env: dict | None = None) -> tuple[subprocess.Popen, str]:
    port = free_port()
    proc = subprocess.Popen(
        [AGENT_ENV, "env", "serve", "notes", "--port", str(port), "--state", str(tmp_path / "s"), *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=env,
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 20
    while True:
        try:
            if httpx2.get(f"{base}/ready").status_code == 200:
                return proc, base
        except httpx2.TransportError:
            pass
        assert proc.poll() is None, proc.stderr.read().decode()
        assert time.monotonic() < deadline, "env serve did not come up"
        time.sleep(0.05)


@pytest.fixture
def standalone(tmp_path):
    proc, base = serve(tmp_path)
    yield base
    proc.terminate()
    proc.wait(10)


async def test_env_serve_refuses_what_a_web_page_can_send(standalone):
    """Attack: a web page the user visits drives the local `env serve` — by DNS rebinding (its own name,
    resolving to 127.0.0.1, in `Host`), by a cross-site fetch (`Origin`), or by a no-preflight
    `text/plain` POST — to initialize MCP or wipe the data with `data/reset`."""
    base = standalone
    await reference.reset_data(base)
    await reference.add_data(base, [DataPart(data={"notes": [NOTE]})])
    before = (await reference.get_data(base)).parts
    port = base.rsplit(":", 1)[1]
    reset = json.dumps(rpc_body("data/reset"))
    async with httpx2.AsyncClient() as http:
        for headers, status in [
            ({"host": "evil.example"}, 421),
            ({"host": f"evil.example:{port}"}, 421),
            ({"origin": "http://evil.example"}, 403),
            ({"origin": "null"}, 403),
        ]:
            for path, body in [("/mcp", json.dumps(INITIALIZE)), ("/agentenv", reset)]:
                answer = await http.post(base + path, content=body, headers={**MCP_HEADERS, **headers})
                assert answer.status_code == status, (path, headers)
        for ctype in ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x"):
            for path, body in [("/mcp", json.dumps(INITIALIZE)), ("/agentenv", reset)]:
                answer = await http.post(base + path, content=body, headers={**MCP_HEADERS, "content-type": ctype})
                assert answer.status_code == 415, (path, ctype)
        same_site = await http.post(
            f"{base}/agentenv",
            content=json.dumps(rpc_body("data/get")),
            headers={"origin": base, "content-type": "application/json"},
        )
        assert same_site.status_code == 200, "the server's own origin is fine"
    assert (await reference.get_data(base)).parts == before, "nothing was reset"
    assert await reference.supports_v1(base), "the protocol's reference client still works"


async def test_env_serve_with_a_token_refuses_every_other_caller(tmp_path):
    """Attack: a local process calls an `env serve --token` server with no token, a wrong one, a prefix
    of it, or bytes that are not ASCII (a malformed header must be a 401, never a 500)."""
    token = "s3cret-token-for-this-test"
    proc, base = serve(tmp_path, "--token", token)
    try:
        assert await intrusions(base) == [401] * 5, "no token"
        for bad in [
            "Bearer wrong",
            f"Bearer {token[:-1]}",
            f"Bearer {token}x",
            "Bearer",
            f"Basic {token}",
            "Bearer é".encode(),
            b"Bearer \xff\xfe",
            f"Bearer {token}é".encode(),
        ]:
            assert await intrusions(base, authorization=bad) == [401] * 5, bad
        assert 401 not in await intrusions(base, authorization=f"Bearer {token}")
        async with httpx2.AsyncClient(headers={"authorization": f"Bearer {token}"}) as http:
            assert (await http.get(f"{base}/.well-known/agent-env.json")).json()["name"] == "notes"
            got = await http.post(f"{base}/agentenv", json=rpc_body("data/get"))
            assert got.status_code == 200 and "result" in got.json()
            evil = await http.post(f"{base}/agentenv", json=rpc_body("data/get"), headers={"host": "evil.example"})
            assert evil.status_code == 421, "the token does not lift the host check"
    finally:
        proc.terminate()
        proc.wait(10)


# -- sandboxed apps started by deploy_env --


def _docker_problem() -> str | None:
    from test_docker import _docker_problem as problem

    return problem()


def echo_bundle(root: Path, provider: str) -> Path:
    """The echo-mcp bundle's server, deployed and held by a run; `local` runs it as a plain process."""
    folder = root / "envs" / "echo"
    (folder / "server").mkdir(parents=True)
    for name in ("Dockerfile", "server.py"):
        (folder / "server" / name).write_text((ECHO_SERVER / name).read_text())
    command = f'command = ["{sys.executable}", "server.py"]' if provider == "local" else ""
    (folder / "env.toml").write_text(
        textwrap.dedent(f"""
        name = "echo"
        [[apps]]
        name = "echo"
        [apps.sandbox]
        build = "server"
        provider = "{provider}"
        {command}
        [roles.agent]
        tools = ["*"]
        """)
    )
    (root / "tasks").mkdir()
    (root / "tasks" / "t.toml").write_text(
        textwrap.dedent("""
        id = "hold"
        [[steps]]
        id = "echo"
        type = "deploy_env"
        config = { env_id = "echo" }
        [[steps]]
        id = "hold"
        type = "sleep"
        depends_on = ["echo"]
        config = { seconds = 120 }
        """)
    )
    return root


@pytest.mark.parametrize("provider", ["local", "docker"])
async def test_a_sandboxed_mcp_server_answers_only_the_gateway(provider, client, settings, worker, tmp_path):
    """Attack: an agent finds the published port of a sandboxed app (a container, or a local process) and
    calls its tools directly, bypassing the gateway's roles and trajectory."""
    if provider == "docker" and (problem := _docker_problem()):
        message = f"the Docker tier needs a Docker daemon and the base image (run scripts/docker-setup): {problem}"
        if os.environ.get("AGENT_ENV_REQUIRE_DOCKER"):
            pytest.fail(message)  # CI: the tier must run
        pytest.skip(message)
    from test_durability import wait_until

    from agent_env.gateway import embedded as embedded_gateway
    from agent_env.planning.tasks import load_task
    from agent_env.temporal import launch

    bundle = echo_bundle(tmp_path / "b", provider)
    handle = await launch.start_run(client, settings, load_task(bundle / "tasks" / "t.toml"))
    try:

        async def deployed():
            state = await launch.query_state(handle)
            assert state.steps["echo"].status != "failed", state.steps["echo"]
            return state.steps["echo"].status == "succeeded"

        await wait_until(deployed, timeout=120, what=f"the {provider} sandbox to deploy")
        outputs = (await launch.query_state(handle)).steps["echo"].outputs
        assert "aes_" not in json.dumps(outputs), "the server token stays out of run history"
        url = outputs["sandboxes"][0]["url"]
        async with httpx2.AsyncClient(timeout=10) as http:
            for headers in [{}, {"authorization": "Bearer aes_guessed"}, {"authorization": b"Bearer \xff"}]:
                answer = await http.post(
                    f"{url}/mcp", json=tool_call("echo", {"text": "hi"}), headers={**MCP_HEADERS, **headers}
                )
                assert answer.status_code == 401, headers
                assert (
                    await http.post(f"{url}/mcp", json=INITIALIZE, headers={**MCP_HEADERS, **headers})
                ).status_code == 401
        instance = f"{handle.id}.echo"
        async with embedded_gateway.connect(settings) as admin:
            token = await admin.token(instance, "agent")
        async with mcp_client(embedded_gateway.base_url(settings), instance, token) as mcp:
            answer = await mcp.call_tool("echo", {"text": "through the gateway"})
            assert not answer.is_error and answer.structured_content == {"text": "through the gateway"}
    finally:
        await handle.cancel()
        await asyncio.wait_for(launch.wait_result(handle), 60)
