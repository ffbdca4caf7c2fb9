"""Hostile agents and hostile pages against the gateway and the episodes server, over real HTTP on
127.0.0.1: forged Host (DNS rebinding), cross-site Origin, cross-site "simple" bodies, malformed and
misplaced credentials, and one agent trying to use up what every agent shares."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time

import httpx2
import pytest
import uvicorn
from conftest import free_port
from gateway_util import mcp_client, running_gateway, support_data, support_spec
from mcp.shared.exceptions import MCPError

from agent_env.envs import App, tool
from agent_env.gateway_client import GatewayRefused

EVIL_HOST = "evil.example:4444"
MCP_ACCEPT = {"accept": "application/json, text/event-stream"}
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
}


class Gate:
    """Where the test holds an agent's calls: `wait` blocks until `opened` is set."""

    opened: asyncio.Event
    waiting = 0

    @classmethod
    def reset(cls) -> None:
        cls.opened, cls.waiting = asyncio.Event(), 0


class Gated(App):
    name = "gated"

    @tool
    async def wait(self) -> dict:
        """Wait until the test opens the gate."""
        Gate.waiting += 1
        await Gate.opened.wait()
        return {"passed": True}

    @tool
    def ping(self) -> dict:
        """Answer at once."""
        return {"pong": True}


class ServerErrors(logging.Handler):
    """What the web server logs at ERROR (an unhandled exception, with its traceback)."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def server_errors():
    handler = ServerErrors()
    loggers = [logging.getLogger(name) for name in ("uvicorn.error", "agentenv", "mcp")]
    for logger in loggers:
        logger.addHandler(handler)
    yield handler.records
    for logger in loggers:
        logger.removeHandler(handler)


@pytest.fixture
async def desk(tmp_path):
    async with running_gateway(tmp_path / "gw") as (gateway, base, admin):
        await admin.put_instance(support_spec())
        await admin.data("desk-1", "data/add", {"parts": [{"kind": "data", "data": support_data()}]})
        yield gateway, base, admin


@pytest.fixture
async def gated(tmp_path):
    Gate.reset()
    spec = {
        "id": "g",
        "run_id": "run-g",
        "apps": [{"app": f"{__name__}:Gated"}],
        "roles": {"agent": {"tools": ["*"]}},
        "agents": {"a": "agent", "b": "agent"},
    }
    async with running_gateway(tmp_path / "gw") as (gateway, base, admin):
        await admin.put_instance(spec)
        try:
            yield gateway, base, admin
        finally:
            Gate.opened.set()


async def raw_request(
    base: str, method: str, path: str, headers: list[tuple[bytes, bytes]], body: object = None
) -> tuple[int, str]:
    """One request over a bare socket, header bytes exactly as given (clients refuse to send some)."""
    host, port = base.removeprefix("http://").split(":")
    data = json.dumps(body).encode() if body is not None else b""
    head = [
        f"{method} {path} HTTP/1.1".encode(),
        f"host: {host}:{port}".encode(),
        b"connection: close",
        b"content-type: application/json",
        f"content-length: {len(data)}".encode(),
    ]
    head += [name + b": " + value for name, value in headers]
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(b"\r\n".join(head) + b"\r\n\r\n" + data)
        answer = await asyncio.wait_for(reader.read(), 30)
    finally:
        writer.close()
    status_line, _, rest = answer.partition(b"\r\n")
    return int(status_line.split()[1]), rest.partition(b"\r\n\r\n")[2].decode("utf-8", "replace")


def bearer(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


async def state_of(admin) -> dict:
    """What a refused request must not have changed: instances, desk-1's data, its trajectory."""
    return {
        "instances": sorted(i["id"] for i in (await admin._json("GET", "/admin/instances"))["instances"]),
        "data": await admin.data("desk-1", "data/get"),
        "trajectory": len(await admin.trajectory("desk-1")),
    }


def every_endpoint_family(gateway, sam: str) -> list[tuple[str, str, dict | None, dict]]:
    """(method, path, JSON body, headers): each kind of endpoint, with the credential it needs."""
    admin, agent = bearer(gateway.admin_token), bearer(sam)
    args = {"customer_email": "x@example.com", "subject": "forged", "description": "d"}
    return [
        ("GET", "/ready", None, {}),
        ("POST", "/envs/desk-1/mcp", INITIALIZE, {**agent, **MCP_ACCEPT}),
        ("GET", "/envs/desk-1/tools", None, agent),
        ("POST", "/envs/desk-1/tools/create_ticket", args, agent),
        ("GET", "/envs/desk-1/.well-known/agent-env.json", None, agent),
        ("POST", "/envs/desk-1/agentenv", {"jsonrpc": "2.0", "id": 1, "method": "data/reset"}, admin),
        ("GET", "/admin/instances", None, admin),
        ("DELETE", "/admin/instances/desk-1", None, admin),
        ("PUT", "/admin/instances/forged", {"id": "forged", "apps": [{"app": "notes"}]}, admin),
        ("GET", "/admin/instances/desk-1/tokens/sam", None, admin),
        (
            "POST",
            "/admin/instances/desk-1/call",
            {"tool": "create_ticket", "arguments": args, "role": "support"},
            admin,
        ),
        ("GET", "/admin/agents", None, admin),
        ("GET", "/agents/someone/.well-known/agent-card.json", None, {}),
        ("POST", "/agents/someone/", {"jsonrpc": "2.0", "id": 1, "method": "message/send"}, admin),
    ]


async def test_a_forged_host_is_refused_everywhere_and_changes_nothing(desk, server_errors):
    """DNS rebinding: a page whose domain now resolves to 127.0.0.1 sends our own requests, with the
    right tokens even, but its domain in `Host`. Every endpoint family answers 421 and nothing changes."""
    gateway, base, admin = desk
    sam = await admin.token("desk-1", "sam")
    before = await state_of(admin)
    async with httpx2.AsyncClient(base_url=base) as http:
        for method, path, body, headers in every_endpoint_family(gateway, sam):
            answer = await http.request(method, path, json=body, headers={**headers, "host": EVIL_HOST})
            assert answer.status_code == 421, (method, path, answer.text)
            assert "127.0.0.1 or the configured URL" in answer.json()["error"]
        # The same requests naming this server are served: the refusal was the Host, nothing else.
        assert (await http.get("/envs/desk-1/tools", headers=bearer(sam))).status_code == 200
    assert await state_of(admin) == before
    assert not server_errors


async def test_the_configured_public_url_is_this_servers_name(tmp_path):
    """A gateway behind a proxy at its public URL answers for that name (and that origin), not for others."""
    from agent_env.gateway.http import create_app
    from agent_env.gateway.service import Gateway

    gateway = Gateway(tmp_path / "gw")
    port = free_port()
    app = create_app(gateway, urls=["https://gw.example.org/"])
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    task = asyncio.create_task(server.serve())
    try:
        while not server.started:
            await asyncio.sleep(0.01)
        async with httpx2.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http:
            admin = bearer(gateway.admin_token)
            named = {**admin, "host": "gw.example.org", "origin": "https://gw.example.org"}
            assert (await http.get("/admin/instances", headers=named)).status_code == 200
            assert (
                await http.get("/admin/instances", headers={**admin, "host": "gw.example.org.evil.example"})
            ).status_code == 421
            assert (
                await http.get(
                    "/admin/instances", headers={**admin, "host": "gw.example.org", "origin": "https://evil.example"}
                )
            ).status_code == 403
    finally:
        server.should_exit = True
        await task
        gateway.close()


async def test_a_cross_site_origin_is_refused_and_changes_nothing(desk, server_errors):
    """A page on another site (Origin http://evil.example) drives the gateway on its own address: 403."""
    gateway, base, admin = desk
    sam = await admin.token("desk-1", "sam")
    before = await state_of(admin)
    async with httpx2.AsyncClient(base_url=base) as http:
        for method, path, body, headers in every_endpoint_family(gateway, sam):
            for origin in ("http://evil.example", "null"):
                answer = await http.request(method, path, json=body, headers={**headers, "origin": origin})
                assert answer.status_code == 403, (method, path, origin, answer.text)
        own = await http.get("/envs/desk-1/tools", headers={**bearer(sam), "origin": base})
        assert own.status_code == 200, "the server's own origin is welcome"
    assert await state_of(admin) == before
    assert not server_errors


async def test_a_cross_site_simple_body_is_refused(desk):
    """A form or `text/plain` POST (what a page may send anywhere without a preflight) reaching the data
    plane, a tool or an admin route, even with the right token: 415, and the data is unchanged."""
    gateway, base, admin = desk
    sam = await admin.token("desk-1", "sam")
    before = await state_of(admin)
    reset = b'{"jsonrpc": "2.0", "id": 1, "method": "data/reset"}'
    async with httpx2.AsyncClient(base_url=base) as http:
        for ctype in (
            "text/plain",
            "text/plain;charset=UTF-8",
            "application/x-www-form-urlencoded",
            "multipart/form-data; boundary=x",
        ):
            answer = await http.post(
                "/envs/desk-1/agentenv", content=reset, headers={**bearer(gateway.admin_token), "content-type": ctype}
            )
            assert answer.status_code == 415 and "application/json" in answer.json()["error"], answer.text
        ticket = b'{"customer_email": "x@example.com", "subject": "s", "description": "d"}'
        answer = await http.post(
            "/envs/desk-1/tools/create_ticket", content=ticket, headers={**bearer(sam), "content-type": "text/plain"}
        )
        assert answer.status_code == 415
        answer = await http.delete(
            "/admin/instances/desk-1", headers={**bearer(gateway.admin_token), "content-type": "text/plain"}
        )
        assert answer.status_code == 415
    assert await state_of(admin) == before
    # what the clients send is still accepted: JSON, and a snapshot's tar
    await admin.restore("desk-1", await admin.snapshot("desk-1"))
    async with httpx2.AsyncClient(base_url=base) as http:
        tar = await http.put(
            "/admin/instances/desk-1/snapshot",
            content=await admin.snapshot("desk-1"),
            headers={**bearer(gateway.admin_token), "content-type": "application/x-tar"},
        )
        assert tar.status_code == 200, tar.text


MALFORMED = [
    b"Bearer \xff\xfe\x80\xc0",  # not UTF-8 at all
    "Bearer été-ünïcødé".encode(),  # UTF-8, not ASCII
    "Bearer aea_é".encode("latin-1"),
    b"Bearer",
    b"Bearer ",
    b"bearer",
    b"Basic dXNlcjpwYXNz",
    b"Token aet_something",
    b"aet_no_scheme",
    b"Bearer " + b"a" * 8000,
]


async def test_malformed_credentials_get_401_or_403_never_a_traceback(desk, server_errors):
    """An agent sends garbage where its token goes: every shape is a clean refusal (401/403, JSON body),
    never a 500, nothing in the server's log; the gateway keeps serving."""
    gateway, base, admin = desk
    before = await state_of(admin)
    paths = [
        ("POST", "/envs/desk-1/mcp", INITIALIZE),
        ("GET", "/envs/desk-1/tools", None),
        ("POST", "/envs/desk-1/tools/get_order", {"order_id": "ORD-1001"}),
        ("GET", "/envs/desk-1/.well-known/agent-env.json", None),
        ("POST", "/envs/desk-1/agentenv", {"jsonrpc": "2.0", "id": 1, "method": "data/reset"}),
        ("GET", "/admin/instances", None),
        ("DELETE", "/admin/instances/desk-1", None),
        ("GET", "/admin/instances/desk-1/tokens/sam", None),
        ("POST", "/agents/someone/", {"jsonrpc": "2.0", "id": 1, "method": "message/send"}),
    ]
    for value in MALFORMED:
        for method, path, body in paths:
            headers = [(b"authorization", value), (b"accept", MCP_ACCEPT["accept"].encode())]
            status, text = await raw_request(base, method, path, headers, body)
            assert status in (401, 403), (value[:40], method, path, status, text)
            assert "error" in json.loads(text) and "Traceback" not in text
    async with httpx2.AsyncClient(base_url=base) as http:
        assert (await http.get("/ready")).status_code == 200
    assert await state_of(admin) == before
    assert not server_errors, [r.getMessage() for r in server_errors]


async def test_a_huge_token_is_refused_by_the_server_not_a_500(desk, server_errors):
    """A 100 KB `Authorization` header: the web server refuses or drops it; never a 500, and others are served."""
    gateway, base, admin = desk
    async with httpx2.AsyncClient(base_url=base) as http:
        for path in ("/envs/desk-1/tools", "/admin/instances"):
            try:
                answer = await http.get(path, headers={"authorization": "Bearer " + "x" * 100_000})
            except httpx2.TransportError:  # the server closed the connection on the oversized head
                continue
            assert answer.status_code in (400, 401, 403, 431), answer.status_code
        assert (await http.get("/ready")).status_code == 200
    assert (await admin.token("desk-1", "sam")).startswith("aet_")
    assert not server_errors, [r.getMessage() for r in server_errors]


async def test_role_tokens_of_other_instances_and_runs_are_refused(desk):
    """An agent replays a token it got elsewhere: another instance's (of another run), or one from an
    earlier run of an instance id now reused for a new run: 403 on every agent route."""
    gateway, base, admin = desk
    await admin.put_instance({**support_spec("desk-2"), "run_id": "run-2"})
    other_instance = await admin.token("desk-2", "sam")
    old_run = await admin.token("desk-1", "sam")
    await admin.delete_instance("desk-1")
    await admin.put_instance({**support_spec(), "run_id": "run-7"})
    current = await admin.token("desk-1", "sam")
    assert current != old_run, "a new run of the same instance id has new tokens"
    async with httpx2.AsyncClient(base_url=base) as http:
        for token in (other_instance, old_run):
            for method, path, body in [
                ("POST", "/envs/desk-1/mcp", INITIALIZE),
                ("GET", "/envs/desk-1/tools", None),
                ("POST", "/envs/desk-1/tools/list_tickets", {}),
                ("GET", "/envs/desk-1/.well-known/agent-env.json", None),
            ]:
                answer = await http.request(method, path, json=body, headers={**bearer(token), **MCP_ACCEPT})
                assert answer.status_code == 403, (path, answer.text)
        assert (await http.get("/envs/desk-1/tools", headers=bearer(current))).status_code == 200
    assert not [e for e in await admin.trajectory("desk-1")], "no refused token reached a tool"


async def test_credentials_only_open_their_own_doors(desk):
    """A role token on the run's routes (admin API, data plane, hosted agents) and the admin token on an
    agent's routes are refused; nothing changes."""
    gateway, base, admin = desk
    sam = await admin.token("desk-1", "sam")
    before = await state_of(admin)
    async with httpx2.AsyncClient(base_url=base) as http:
        for method, path, body in [
            ("POST", "/envs/desk-1/agentenv", {"jsonrpc": "2.0", "id": 1, "method": "data/reset"}),
            ("GET", "/admin/instances", None),
            ("DELETE", "/admin/instances/desk-1", None),
            ("GET", "/admin/instances/desk-1/tokens/lee", None),
            ("PUT", "/admin/instances/desk-1/roles/support", {"tools": ["*", "issue_refund"]}),
            ("PUT", "/admin/instances/desk-1/agents/sam", {"role": "billing_lead"}),
            ("POST", "/admin/instances/desk-1/call", {"tool": "issue_refund", "role": "billing_lead", "arguments": {}}),
            ("GET", "/admin/instances/desk-1/snapshot", None),
            ("GET", "/admin/agents", None),
            ("POST", "/agents/someone/", {"jsonrpc": "2.0", "id": 1, "method": "message/send"}),
        ]:
            answer = await http.request(method, path, json=body, headers=bearer(sam))
            assert answer.status_code in (401, 403), (method, path, answer.text)
        for method, path, body in [
            ("POST", "/envs/desk-1/mcp", INITIALIZE),
            ("GET", "/envs/desk-1/tools", None),
            ("POST", "/envs/desk-1/tools/list_tickets", {}),
        ]:
            answer = await http.request(method, path, json=body, headers={**bearer(gateway.admin_token), **MCP_ACCEPT})
            assert answer.status_code == 403, (path, answer.text)
    assert await state_of(admin) == before


async def wait_until(condition, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.01)


async def test_one_agent_holding_its_calls_does_not_slow_another(gated, server_errors):
    """Agent A keeps as many slow calls in flight as it may (REST and MCP alike); its next call is refused
    (429 over REST, an MCP error over MCP), while agent B, with its own token, is answered at once."""
    gateway, base, admin = gated
    cap = gateway.limits.calls
    assert cap == 32, "the default"
    a, b = await admin.token("g", "a"), await admin.token("g", "b")
    async with httpx2.AsyncClient(base_url=base, timeout=30) as http, mcp_client(base, "g", a, "legacy") as a_mcp:
        held = [
            asyncio.create_task(http.post("/envs/g/tools/wait", json={}, headers=bearer(a))) for _ in range(cap - 1)
        ]
        held.append(asyncio.create_task(a_mcp.call_tool("wait", {})))
        await wait_until(lambda: Gate.waiting == cap)
        over = await http.post("/envs/g/tools/ping", json={}, headers=bearer(a))
        assert over.status_code == 429 and "32 tool calls in flight" in over.json()["error"], over.text
        with pytest.raises(MCPError, match="tool calls in flight"):
            await a_mcp.call_tool("ping", {})
        started = time.monotonic()
        assert (await admin.call_tool("g", b, "ping", {})) == {"pong": True}
        async with mcp_client(base, "g", b) as b_mcp:
            assert not (await b_mcp.call_tool("ping", {})).is_error
        assert time.monotonic() - started < 5, "B was answered promptly"
        Gate.opened.set()
        answers = await asyncio.gather(*held)
        assert [r.status_code for r in answers[:-1]] == [200] * (cap - 1) and not answers[-1].is_error
        assert (await http.post("/envs/g/tools/ping", json={}, headers=bearer(a))).status_code == 200, (
            "the slots are given back"
        )
    assert not server_errors, [r.getMessage() for r in server_errors]


async def open_session(http, token: str) -> httpx2.Response:
    return await http.post("/envs/g/mcp", json=INITIALIZE, headers={**bearer(token), **MCP_ACCEPT})


async def test_one_agent_cannot_hoard_mcp_sessions(gated):
    """Agent A opens MCP sessions and never closes them: beyond its cap it is refused (429), B still opens
    one, and A gets room back by ending a session."""
    gateway, base, admin = gated
    cap = gateway.limits.sessions
    assert cap == 16, "the default"
    a, b = await admin.token("g", "a"), await admin.token("g", "b")
    async with httpx2.AsyncClient(base_url=base, timeout=30) as http:
        opened = await asyncio.gather(*[open_session(http, a) for _ in range(cap)])
        assert [r.status_code for r in opened] == [200] * cap
        over = await open_session(http, a)
        assert over.status_code == 429 and "16 MCP sessions open" in over.json()["error"], over.text
        assert (await open_session(http, b)).status_code == 200, "B is not affected"
        async with mcp_client(base, "g", b, "legacy") as b_mcp:
            assert not (await b_mcp.call_tool("ping", {})).is_error
        ended = await http.delete(
            "/envs/g/mcp", headers={**bearer(a), **MCP_ACCEPT, "mcp-session-id": opened[0].headers["mcp-session-id"]}
        )
        assert ended.status_code == 200, ended.text
        assert (await open_session(http, a)).status_code == 200, "an ended session frees its place"
        # requests within an open session are never counted as new sessions
        sid = opened[1].headers["mcp-session-id"]
        listed = await http.post(
            "/envs/g/mcp",
            json={"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
            headers={**bearer(a), **MCP_ACCEPT, "mcp-session-id": sid, "mcp-protocol-version": "2025-06-18"},
        )
        assert listed.status_code == 200 and "wait" in listed.text


async def test_one_agent_cannot_hold_every_stream(tmp_path):
    """Agent A opens long-lived MCP streams (GET event streams) up to its cap of open MCP requests: its
    next MCP request is refused (429), B's is served."""
    Gate.reset()
    spec = {
        "id": "g",
        "apps": [{"app": f"{__name__}:Gated"}],
        "roles": {"agent": {"tools": ["*"]}},
        "agents": {"a": "agent", "b": "agent"},
    }
    async with running_gateway(tmp_path / "gw", max_mcp_requests_per_agent=2) as (gateway, base, admin):
        await admin.put_instance(spec)
        a, b = await admin.token("g", "a"), await admin.token("g", "b")
        async with httpx2.AsyncClient(base_url=base, timeout=30) as http, contextlib.AsyncExitStack() as streams:
            for _ in range(2):
                sid = (await open_session(http, a)).headers["mcp-session-id"]
                stream = await streams.enter_async_context(
                    http.stream(
                        "GET",
                        "/envs/g/mcp",
                        headers={
                            **bearer(a),
                            "accept": "text/event-stream",
                            "mcp-session-id": sid,
                            "mcp-protocol-version": "2025-06-18",
                        },
                    )
                )
                assert stream.status_code == 200
            over = await open_session(http, a)
            assert over.status_code == 429 and "2 MCP requests open" in over.json()["error"], over.text
            assert (await open_session(http, b)).status_code == 200


async def test_the_episodes_server_checks_its_door(settings, server_errors):
    """The episodes server hands out role tokens: a forged Host (421), another site's Origin (403), a
    text/plain body (415) and every malformed credential (401) are refused before any episode starts."""
    from agent_env.episodes.http import create_app
    from agent_env.gateway import tokens

    admin = tokens.admin_token(tokens.load_or_create_key(settings.state_dir / "gateway" / "key"))
    port = free_port()
    # No lifespan: nothing here may reach an episode (a request that did would fail on the missing state).
    server = uvicorn.Server(
        uvicorn.Config(
            create_app(settings, worker=False), host="127.0.0.1", port=port, log_level="warning", lifespan="off"
        )
    )
    task = asyncio.create_task(server.serve())
    try:
        while not server.started:
            await asyncio.sleep(0.01)
        start = {"task": "refund", "trainer_agents": ["refunds"]}
        async with httpx2.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http:
            auth = bearer(admin)
            for method, path in [
                ("POST", "/episodes"),
                ("POST", "/episodes/e1/next-turn"),
                ("POST", "/episodes/e1/turns/t1/end"),
                ("POST", "/episodes/e1/abandon"),
                ("GET", "/episodes/e1/result"),
            ]:
                body = start if path == "/episodes" else {"response": "x"}
                forged = await http.request(method, path, json=body, headers={**auth, "host": EVIL_HOST})
                assert forged.status_code == 421, (path, forged.text)
                cross = await http.request(method, path, json=body, headers={**auth, "origin": "http://evil.example"})
                assert cross.status_code == 403, (path, cross.text)
                for value in MALFORMED + [b"Bearer aet_x"]:
                    status, text = await raw_request(
                        f"http://127.0.0.1:{port}", method, path, [(b"authorization", value)], body
                    )
                    assert status == 401, (value[:40], path, text)
            plain = await http.post(
                "/episodes", content=b'{"task": "refund"}', headers={**auth, "content-type": "text/plain"}
            )
            assert plain.status_code == 415
            # the door itself lets the admin in: a bad body is the handler's 400 (no episode is started)
            bad = await http.post("/episodes", json={"task": "escalation"}, headers=auth)  # two agents: name one
            assert bad.status_code == 400 and "trainer_agents" in bad.json()["error"]
    finally:
        server.should_exit = True
        await task
    assert not server_errors, [r.getMessage() for r in server_errors]


async def test_gateway_client_still_works_through_the_door(desk):
    """The clients agent-env itself uses (GatewayClient, the MCP SDK client) pass the checks unchanged."""
    gateway, base, admin = desk
    sam = await admin.token("desk-1", "sam")
    assert {t["name"] for t in await admin.list_tools("desk-1", sam)} >= {"list_tickets"}
    for mode in ("auto", "legacy"):
        async with mcp_client(base, "desk-1", sam, mode) as mcp:
            assert not (await mcp.call_tool("list_tickets", {})).is_error
    with pytest.raises(GatewayRefused) as refused:
        await admin.call_tool("desk-1", "aet_nope", "list_tickets", {})
    assert refused.value.status == 403


async def test_a_hidden_tool_stays_out_of_reach_on_every_path(desk):
    """Attack: an agent whose role lacks the hidden `issue_refund` tries every way in — the REST listing
    and call, MCP with a role claimed in `_meta` and in a header, the instance's card — and a direct data
    plane call with its role token. None lists the tool, none refunds, and every attempt is recorded."""
    gateway, base, admin = desk
    sam = await admin.token("desk-1", "sam")
    refund = {"order_id": "ORD-1001", "charge_id": "CH-5002", "amount_cents": 4900, "reason": "charged twice"}
    spoof = {"agentenv-role": "billing_lead", "x-agentenv-role": "billing_lead"}
    async with httpx2.AsyncClient(base_url=base, headers={**bearer(sam), **spoof}, timeout=30) as http:
        listed = (await http.get("/envs/desk-1/tools")).json()
        assert listed["role"] == "support" and "issue_refund" not in {t["name"] for t in listed["tools"]}
        refused = await http.post("/envs/desk-1/tools/issue_refund", json=refund)
        assert refused.status_code == 403, refused.text
        card = (await http.get("/envs/desk-1/.well-known/agent-env.json")).json()
        assert "issue_refund" not in {t["name"] for t in card["capabilities"]["tools"]}
        plane = await http.post("/envs/desk-1/agentenv", json={"jsonrpc": "2.0", "id": 1, "method": "data/reset"})
        assert plane.status_code in (401, 403)
    async with mcp_client(base, "desk-1", sam, headers=spoof) as mcp:
        assert "issue_refund" not in {t.name for t in (await mcp.list_tools()).tools}
        result = await mcp.call_tool(
            "issue_refund", refund, meta={"agentenv.io/role": "billing_lead", "agentenv.io/agent": "lee"}
        )
        assert result.is_error
    order = await admin.call_as("desk-1", "get_order", {"order_id": "ORD-1001"}, role="billing_lead")
    assert order["result"]["refunds"] == [], "no refund was made"
    for _ in range(50):
        entries = [e for e in await admin.trajectory("desk-1") if e.get("tool") == "issue_refund"]
        if len(entries) >= 2:
            break
        await asyncio.sleep(0.05)
    assert len(entries) == 2 and all(e["agent"] == "sam" and e.get("refused") for e in entries), entries


async def test_a_strangers_token_opens_nothing(tmp_path):
    """Attack: after a gateway restart, instances are closed until used; opening one starts its processes.
    A request with a made-up or another run's token must be refused without opening the instance, while
    the agent's own token opens and serves it."""
    async with running_gateway(tmp_path / "gw") as (gateway, base, admin):
        await admin.put_instance(support_spec())
        sam = await admin.token("desk-1", "sam")
        await admin.put_instance(support_spec("desk-2", run_id="run-2"))
        other = await admin.token("desk-2", "sam")
    async with running_gateway(tmp_path / "gw") as (gateway, base, admin):
        async with httpx2.AsyncClient(base_url=base, timeout=30) as http:
            for token in ("aet_made-up", other, "aet_\u00e9t\u00e9"):
                answer = await http.get("/envs/desk-1/tools", headers={"authorization": f"Bearer {token}".encode()})
                assert answer.status_code == 403, answer.text
            assert "desk-1" not in gateway._instances, "a refused request opened the instance"
            assert (await http.get("/envs/desk-1/tools", headers=bearer(sam))).status_code == 200
        assert "desk-1" in gateway._instances


# -- MCP sessions belong to who opened them --


def in_session(token: str, sid: str) -> dict[str, str]:
    return {**bearer(token), **MCP_ACCEPT, "mcp-session-id": sid, "mcp-protocol-version": "2025-06-18"}


LIST_TOOLS = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}


async def test_a_borrowed_mcp_session_is_unknown_to_everyone_but_its_opener(desk):
    """Attack: an agent learns another's MCP session id (a log line, a shared proxy) and sends its own
    requests in that session, or ends it: with another agent's token of the same instance, with the token of
    another run's instance (at that instance's path), and with no token. Each is answered as for a session that
    does not exist (404; 401 without a token), none ends it, and its opener goes on using it."""
    gateway, base, admin = desk
    await admin.put_instance(support_spec("desk-2", run_id="run-2"))
    sam, lee, other_run = (
        await admin.token("desk-1", "sam"),
        await admin.token("desk-1", "lee"),
        await admin.token("desk-2", "sam"),
    )
    async with httpx2.AsyncClient(base_url=base, timeout=30) as http:
        opened = await http.post("/envs/desk-1/mcp", json=INITIALIZE, headers={**bearer(sam), **MCP_ACCEPT})
        assert opened.status_code == 200, opened.text
        sid = opened.headers["mcp-session-id"]
        for path, token in [("/envs/desk-1/mcp", lee), ("/envs/desk-2/mcp", other_run)]:
            listed = await http.post(path, json=LIST_TOOLS, headers=in_session(token, sid))
            assert listed.status_code == 404, (path, listed.text)
            ended = await http.delete(path, headers=in_session(token, sid))
            assert ended.status_code == 404, (path, ended.text)
        headers = {k: v for k, v in in_session(sam, sid).items() if k != "authorization"}
        assert (await http.post("/envs/desk-1/mcp", json=LIST_TOOLS, headers=headers)).status_code == 401
        assert (await http.delete("/envs/desk-1/mcp", headers=headers)).status_code == 401
        assert sid in gateway.mcp.sessions, "no one but its opener ended the session"
        mine = await http.post("/envs/desk-1/mcp", json=LIST_TOOLS, headers=in_session(sam, sid))
        assert mine.status_code == 200 and "list_tickets" in mine.text, mine.text
        assert (await http.delete("/envs/desk-1/mcp", headers=in_session(sam, sid))).status_code == 200
        assert sid not in gateway.mcp.sessions, "its opener ends it"


# -- role tokens live as long as their run --

TICKET = {"customer_email": "ada@example.com", "subject": "after the end", "description": "d"}


async def refusals_of_an_ended_run(base: str, token: str, sid: str | None = None) -> list[tuple[str, int, str]]:
    """What every agent route answers `token` (of desk-1, whose run ended): (route, status, error)."""
    routes = [
        ("GET", "/envs/desk-1/tools", None, bearer(token)),
        ("POST", "/envs/desk-1/tools/create_ticket", TICKET, bearer(token)),
        ("GET", "/envs/desk-1/.well-known/agent-env.json", None, bearer(token)),
        ("GET", "/envs/desk-1/openapi.json", None, bearer(token)),
        ("POST", "/envs/desk-1/mcp", INITIALIZE, {**bearer(token), **MCP_ACCEPT}),
    ]
    if sid is not None:
        routes += [
            ("POST", "/envs/desk-1/mcp", LIST_TOOLS, in_session(token, sid)),
            ("DELETE", "/envs/desk-1/mcp", None, in_session(token, sid)),
        ]
    answers = []
    async with httpx2.AsyncClient(base_url=base, timeout=30) as http:
        for method, path, body, headers in routes:
            answer = await http.request(method, path, json=body, headers=headers)
            answers.append((f"{method} {path}", answer.status_code, answer.json().get("error", "")))
    return answers


async def test_role_tokens_stop_working_when_their_run_ends(tmp_path):
    """Attack: an agent keeps its role token after its run passed and goes on creating tickets, over REST
    and MCP (in its old session or a new one), also once the gateway restarted. Every agent route answers
    410 naming the run's end; no token of the ended run is handed out; another run's agent is served; the
    operator still reads the ended run's trajectory with the admin token."""
    async with running_gateway(tmp_path / "gw") as (gateway, base, admin):
        await admin.put_instance(support_spec())
        await admin.put_instance(support_spec("desk-2", run_id="run-2"))
        sam, other_run = await admin.token("desk-1", "sam"), await admin.token("desk-2", "sam")
        async with httpx2.AsyncClient(base_url=base, timeout=30) as http:
            made = await http.post("/envs/desk-1/tools/create_ticket", json=TICKET, headers=bearer(sam))
            assert made.status_code == 200, made.text
            opened = await http.post("/envs/desk-1/mcp", json=INITIALIZE, headers={**bearer(sam), **MCP_ACCEPT})
            sid = opened.headers["mcp-session-id"]
        await admin.end_run("run-1")
        for route, status, error in await refusals_of_an_ended_run(base, sam, sid):
            assert status == 410, (route, status, error)
            assert "run 'run-1', which ended at" in error and "role tokens no longer work" in error, (route, error)
        await admin.put_instance(support_spec())  # a late retry of the run's deploy step
        with pytest.raises(GatewayRefused) as refused:
            await admin.token("desk-1", "sam")
        assert refused.value.status == 410 and "ended" in str(refused.value), "the run stays ended"
        assert [e["tool"] for e in await admin.trajectory("desk-1")] == ["create_ticket"], "the operator reads it"
        assert (await admin.call_tool("desk-2", other_run, "list_tickets", {})) is not None, "run-2 goes on"
    async with running_gateway(tmp_path / "gw") as (gateway, base, admin):
        for route, status, error in await refusals_of_an_ended_run(base, sam):
            assert status == 410 and "ended at" in error, (route, status, error)
        assert "desk-1" not in gateway._instances, "a dead token opened nothing"
        assert [e["tool"] for e in await admin.trajectory("desk-1")] == ["create_ticket"]
        assert (await admin.call_tool("desk-2", other_run, "list_tickets", {})) is not None


async def test_an_agents_token_dies_with_its_run_also_after_a_gateway_restart(client, settings, worker, tmp_path):
    """The same through a real run on the embedded gateway: while the run holds its notes, the agent's token
    writes a note over REST and MCP; once the run passed, both are refused (410), and still after the gateway
    was restarted; the operator reads the run's trajectory with the admin token."""
    from test_durability import wait_until

    from agent_env.gateway import embedded
    from agent_env.planning.tasks import parse_task
    from agent_env.spec.run import RunStatus
    from agent_env.temporal import launch

    gate = tmp_path / "gate"
    task = {
        "id": "token-life",
        "steps": [
            {"id": "notes", "type": "deploy_env", "config": {"env_id": "notes"}},
            {"id": "hold", "type": "wait_file", "depends_on": ["notes"], "config": {"path": str(gate)}},
        ],
    }
    handle = await launch.start_run(client, settings, parse_task(task, "t"))

    async def deployed() -> bool:
        return (await launch.query_state(handle)).steps["notes"].status == "succeeded"

    await wait_until(deployed, what="the notes to deploy")
    instance = f"{handle.id}.notes"
    note = {"key": "k", "text": "during the run"}
    async with embedded.connect(settings) as admin:
        token = await admin.token(instance, "agent")
        assert (await admin.call_tool(instance, token, "write_note", note))["key"] == "k"
    base = embedded.base_url(settings)
    async with mcp_client(base, instance, token) as mcp:
        assert not (await mcp.call_tool("read_note", {"key": "k"})).is_error
    gate.touch()
    assert (await asyncio.wait_for(launch.wait_result(handle), 60)).status is RunStatus.PASSED

    async def refused() -> None:
        async with httpx2.AsyncClient(base_url=base, timeout=30) as http:
            for method, path, body, headers in [
                ("POST", f"/envs/{instance}/tools/write_note", note, bearer(token)),
                ("POST", f"/envs/{instance}/mcp", INITIALIZE, {**bearer(token), **MCP_ACCEPT}),
            ]:
                answer = await http.request(method, path, json=body, headers=headers)
                assert answer.status_code == 410, (path, answer.text)
                assert f"run {handle.id!r}, which ended at" in answer.json()["error"]

    await refused()
    embedded.stop(settings)
    async with embedded.connect(settings) as admin:  # starts it again
        await refused()
        calls = await admin.trajectory(instance)
    assert [(c["tool"], c["via"]) for c in calls] == [("write_note", "rest"), ("read_note", "mcp")]
