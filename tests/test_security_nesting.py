"""JSON nested too deeply, against every server agent-env starts (SECURITY.md, "the door").

The red team's finding: one tool call with an argument nested ~960 levels deep was recorded (refused or not),
and every later read of the instance's trajectory was a 500 (RecursionError), so graders, `prompt_agent`,
teardown and the explorer failed on that run; 100,000 levels were a 500 with a traceback on every server.
Here, over real HTTP on 127.0.0.1 and as an outsider: each server refuses such a body before anything
parses it, in its protocol's shape and naming the limit; nothing of it is recorded; and an entry an older
gateway recorded too deep (or a corrupt one) is flagged in its page, never failing the read.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import sqlite3
import subprocess
import sys
import textwrap
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import explorer_util
import httpx2
import pytest
from conftest import free_port
from gateway_util import mcp_client, running_gateway, support_data, support_spec
from hypothesis import given, settings
from hypothesis import strategies as st

from agent_env import json_depth
from agent_env.envs import App, tool
from agent_env.guard import HostGuard
from agent_env.json_depth import JSON_RPC, MAX_DEPTH, DepthScanner, TooDeep

AGENT_ENV = str(Path(sys.executable).parent / "agent-env")
LEVELS = (960, 100_000)  # the finding's two: recorded then unreadable, and a 500 at once
NAMED = f"deeper than {MAX_DEPTH} levels"
DEEP = "__deep__"  # where a body template takes the nested value
MCP_HEADERS = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
SCRIPTED = {"name": "sam", "type": "scripted", "config": {"turns": [[{"say": "said: ${prompt}"}]]}}


def nested(levels: int) -> str:
    return "[" * levels + "]" * levels


def body(template: object, levels: int) -> bytes:
    """`template` as JSON, its DEEP string replaced by arrays nested `levels` deep."""
    text = json.dumps(template)
    assert f'"{DEEP}"' in text
    return text.replace(f'"{DEEP}"', nested(levels)).encode()


def rpc(method: str, params: object) -> dict:
    return {"jsonrpc": "2.0", "id": 7, "method": method, "params": params}


def refused(answer: httpx2.Response, shape: str) -> None:
    """The door's answer: 400 `{"error": ...}` (REST); a JSON-RPC parse error, HTTP 200 (the data plane,
    A2A) or 400 (MCP); the limit named either way."""
    assert answer.headers["content-type"] == "application/json", answer.text[:200]
    got = answer.json()
    if shape == "rest":
        assert answer.status_code == 400 and NAMED in got["error"], answer.text[:300]
        return
    assert answer.status_code == (JSON_RPC if shape == "json-rpc" else json_depth.MCP), answer.text[:300]
    assert got["jsonrpc"] == "2.0" and got["id"] is None and got["error"]["code"] == -32700, got
    assert NAMED in got["error"]["message"]


class ServerErrors(logging.Handler):
    """What in-process servers log at ERROR (an unhandled exception, with its traceback)."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def server_errors():
    handler = ServerErrors()
    loggers = [logging.getLogger(name) for name in ("uvicorn.error", "agentenv", "mcp", "a2a")]
    for logger in loggers:
        logger.addHandler(handler)
    yield handler.records
    for logger in loggers:
        logger.removeHandler(handler)


@contextlib.contextmanager
def process(argv: list[str], ready: str, folder: Path, env: dict | None = None):
    """A server in a process of its own, once `ready` answers; yields the file of its stderr."""
    stderr_path = folder / "stderr"
    with stderr_path.open("w+b") as stderr:
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=stderr, env=env)
        try:
            deadline = time.monotonic() + 30
            while True:
                try:
                    if httpx2.get(ready).status_code < 500:
                        break
                except httpx2.TransportError:
                    pass
                assert proc.poll() is None, stderr_path.read_text()
                assert time.monotonic() < deadline, f"{argv} did not come up"
                time.sleep(0.05)
            yield stderr_path
        finally:
            proc.terminate()
            proc.wait(10)


def cli(args: list[str], env: dict | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([AGENT_ENV, *args], capture_output=True, text=True, env=env, timeout=timeout)


def no_traceback(stderr: Path) -> None:
    logged = stderr.read_text(errors="replace")
    assert "Traceback" not in logged and "RecursionError" not in logged, logged[-3000:]


# -- the measure --


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(alphabet='ab"\\[]{}\u00e9\u20ac\U0001f600 '),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(alphabet='k"\\[{', max_size=3), inner),
    max_leaves=40,
)


def depth_of(value: object) -> int:
    if isinstance(value, list):
        return 1 + max(map(depth_of, value), default=0)
    if isinstance(value, dict):
        return 1 + max(map(depth_of, value.values()), default=0)
    return 0


@settings(max_examples=400, deadline=None)
@given(
    value=json_values,
    encoding=st.sampled_from(["utf-8", "utf-8-sig", "utf-16", "utf-16-le", "utf-16-be", "utf-32", "utf-32-be"]),
    ascii_only=st.booleans(),
    cuts=st.lists(st.integers(min_value=1, max_value=10_000), max_size=6),
)
def test_the_depth_is_what_a_parser_would_meet_in_any_encoding_and_any_pieces(value, encoding, ascii_only, cuts):
    """Strings holding brackets, quotes and backslashes, escapes split across pieces, UTF-16 and UTF-32 (which
    `json.loads` reads too): the scanner finds exactly the depth `json.loads` recurses to."""
    text = (" \n" + json.dumps([value], ensure_ascii=ascii_only)).encode(encoding, "surrogatepass")
    assert json.loads(text) == [value]
    depth = depth_of([value])
    for limit in (depth - 1, depth):
        scanner = DepthScanner(limit)
        edges = sorted({0, len(text), *(c % (len(text) + 1) for c in cuts)})
        try:
            for start, end in zip(edges, edges[1:], strict=False):
                scanner.feed(text[start:end], last=end == len(text))
        except TooDeep:
            assert depth > limit
        else:
            assert depth <= limit


def test_measuring_never_recurses():
    """A million levels, of arrays and of objects, measured with hardly any stack left: TooDeep, not a
    RecursionError (json.loads itself fails on them)."""
    import inspect

    bodies = [b"[" * 1_000_000, b'{"a":' * 1_000_000, ("[" * 100_000).encode("utf-32"), b" " * 100 + b"[" * 100_000]
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(len(inspect.stack()) + 25)
    try:
        for deep in bodies:
            with pytest.raises(TooDeep, match=NAMED):
                json_depth.check(deep)
    finally:
        sys.setrecursionlimit(limit)
    with pytest.raises(RecursionError):
        json.loads(bodies[0])


def test_what_is_not_an_array_or_object_is_not_measured():
    """A snapshot's tar, a gzip, a scalar: nothing a JSON parser would recurse into, so nothing refused."""
    import io
    import tarfile

    blob = io.BytesIO()
    with tarfile.open(fileobj=blob, mode="w") as tar:
        member = tarfile.TarInfo("notes.sqlite")
        data = b"[" * 10_000
        member.size = len(data)
        tar.addfile(member, io.BytesIO(data))
    for raw in [blob.getvalue(), b"\x1f\x8b" + b"[" * 1000, b'"' + b"[" * 1000 + b'"', b"1" + b"[" * 1000]:
        json_depth.check(raw)
    with pytest.raises(TooDeep):
        json_depth.check(b"\xef\xbb\xbf  \n" + b"[" * 100)  # a BOM and whitespace first: still measured


def test_json_inside_a_string_is_measured_where_it_is_parsed():
    deep = nested(960)
    with pytest.raises(TooDeep):
        json_depth.loads(deep)
    with pytest.raises(ValueError, match=NAMED):  # where invalid JSON is refused, so is this
        json_depth.loads(deep.encode())
    assert json_depth.loads(nested(MAX_DEPTH)) == json.loads(nested(MAX_DEPTH))


# -- every server's door --


async def test_the_gateway_refuses_deep_json_at_every_door_and_records_nothing(tmp_path, server_errors):
    """REST tool calls (an allowed tool and one the role is refused), MCP, the data plane, the admin API and
    a hosted agent's A2A: 960 and 100,000 levels, as UTF-8, as UTF-16, and after 2 MiB of padding (in a
    later piece of the body than the first). Every one is refused, none is parsed or reaches the trajectory,
    nothing is logged, and the same requests nested normally are served."""
    async with running_gateway(tmp_path / "gw") as (gateway, base, admin):
        await admin.put_instance(support_spec())
        await admin.load("desk-1", [{"kind": "data", "data": support_data()}])
        await admin.put_agent({"id": "run-1.sam", "record": SCRIPTED})
        sam = await admin.token("desk-1", "sam")
        agent, run = {"authorization": f"Bearer {sam}"}, {"authorization": f"Bearer {gateway.admin_token}"}
        ticket = {"customer_email": "dana@example.com", "subject": "help", "description": "it broke"}
        refund = {"order_id": "ORD-1001", "charge_id": "CH-5002", "amount_cents": 4900, "reason": DEEP}
        doors = [
            ("POST", "/envs/desk-1/tools/create_ticket", {**ticket, "x": DEEP}, agent, "rest"),
            ("POST", "/envs/desk-1/tools/issue_refund", refund, agent, "rest"),  # refused for support, and recorded so
            ("POST", "/envs/desk-1/mcp", rpc("tools/call", {"name": "create_ticket", "arguments": {**ticket, "x": DEEP}}), agent, "mcp"),
            ("POST", "/envs/desk-1/agentenv", rpc("data/add", {"parts": [{"kind": "data", "data": DEEP}]}), run, "json-rpc"),
            ("POST", "/admin/instances/desk-1/call", {"tool": "create_ticket", "arguments": {**ticket, "x": DEEP}, "role": "support"}, run, "rest"),
            ("POST", "/admin/instances/desk-1/load", {"parts": [{"kind": "data", "data": {"mail": DEEP}}]}, run, "rest"),
            ("PUT", "/admin/instances/desk-2", {**support_spec("desk-2"), "roles": DEEP}, run, "rest"),
            ("POST", "/admin/human/t-1", {"answer": DEEP}, run, "rest"),
            ("POST", "/agents/run-1.sam/", rpc("SendMessage", {"message": {"messageId": "m", "parts": DEEP}}), run, "json-rpc"),
        ]  # fmt: skip
        async with httpx2.AsyncClient(base_url=base, timeout=60) as http:
            for levels in LEVELS:
                for method, path, template, headers, shape in doors:
                    raw = body(template, levels)
                    for content in (raw, raw.decode().encode("utf-16")):
                        answer = await http.request(method, path, content=content, headers={**MCP_HEADERS, **headers})
                        refused(answer, shape)
            for method, path, template, headers, shape in doors[:4]:  # the deep part comes after 2 MiB
                padded = body({"padding": " " * (2 << 20), "call": template}, 960)
                refused(await http.request(method, path, content=padded, headers={**MCP_HEADERS, **headers}), shape)
            anonymous = await http.post("/envs/desk-1/tools/create_ticket", content=body({"x": DEEP}, 100_000))
            assert anonymous.status_code == 401, "tokens come first: the door holds no body back for anyone"
            served = await http.post("/envs/desk-1/tools/create_ticket", json=ticket, headers=agent)
            assert served.status_code == 200, served.text
        async with mcp_client(base, "desk-1", sam) as mcp:
            assert not (await mcp.call_tool("list_tickets", {})).is_error
        entries = await admin.trajectory("desk-1")
        assert [(e["tool"], e["via"]) for e in entries] == [("create_ticket", "rest"), ("list_tickets", "mcp")]
        assert "desk-2" not in {i["id"] for i in (await admin._json("GET", "/admin/instances"))["instances"]}
    assert not server_errors, [r.getMessage() for r in server_errors]


@pytest.mark.processes
async def test_env_serve_refuses_deep_json_on_its_data_plane_and_mcp(tmp_path):
    """`agent-env env serve` (a process): the JSON-RPC data plane answers as the protocol's reference client
    expects (HTTP 200, -32700, id null), MCP with its 400; JSON carried inside a part's text is measured
    too (-32602). The notes it holds are untouched, and it logs no traceback."""
    port = free_port()
    argv = [AGENT_ENV, "env", "serve", "notes", "--port", str(port), "--state", str(tmp_path / "s")]
    base = f"http://127.0.0.1:{port}"
    with process(argv, f"{base}/ready", tmp_path) as stderr:
        async with httpx2.AsyncClient(base_url=base, timeout=60) as http:
            note = {"key": "k", "text": "kept", "updated_at": "2026-01-01T00:00:00Z"}
            added = await http.post(
                "/agentenv", json=rpc("data/add", {"parts": [{"kind": "data", "data": {"notes": [note]}}]})
            )
            assert added.json()["result"] == {}, added.text
            for levels in LEVELS:
                refused(await http.post("/agentenv", content=body(rpc("data/reset", DEEP), levels)), "json-rpc")
                call = rpc("tools/call", {"name": "write_note", "arguments": {"key": "k", "text": DEEP}})
                refused(await http.post("/mcp", content=body(call, levels), headers=MCP_HEADERS), "mcp")
                inside = rpc("data/add", {"parts": [{"kind": "text", "text": nested(levels)}]})
                answer = (await http.post("/agentenv", json=inside)).json()
                assert answer["error"]["code"] == -32602 and NAMED in answer["error"]["data"]["detail"], answer
            got = (await http.post("/agentenv", json=rpc("data/get", {}))).json()["result"]["parts"][0]["data"]
            assert [n["text"] for n in got["notes"]] == ["kept"]
    no_traceback(stderr)


@pytest.mark.processes
async def test_the_fake_model_refuses_deep_json(tmp_path):
    """`agent-env models fake` (a process): its three chat APIs."""
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    with process([AGENT_ENV, "models", "fake", "--port", str(port)], f"{base}/v1/models", tmp_path) as stderr:
        async with httpx2.AsyncClient(base_url=base, timeout=60) as http:
            for levels in LEVELS:
                for path in ("/v1/chat/completions", "/v1/responses", "/v1/messages"):
                    asked = {"model": "fake", "messages": [{"role": "user", "content": DEEP}], "input": "hi"}
                    refused(await http.post(path, content=body(asked, levels)), "rest")
            assert (await http.get("/v1/models")).status_code == 200
    no_traceback(stderr)


@pytest.mark.processes
async def test_an_agent_served_with_the_sdk_refuses_deep_json(tmp_path):
    """An agent of the SDK's `serve()` (a process): its A2A JSON-RPC (HTTP 200, -32700) and the open
    protocol's extension routes (400); it still answers a turn."""
    from agent_env.agents.client import AgentClient

    port = free_port()
    script = tmp_path / "agent.py"
    script.write_text(
        textwrap.dedent(f"""
        from agent_env.agents.sdk import Agent, serve

        class Echo(Agent):
            name = "echo"

            async def answer(self, turn):
                return "echo: " + turn.prompt

        serve(Echo(), "127.0.0.1", {port})
        """)
    )
    base = f"http://127.0.0.1:{port}"
    with process([sys.executable, str(script)], f"{base}/.well-known/agent-card.json", tmp_path) as stderr:
        async with httpx2.AsyncClient(base_url=base, timeout=60) as http:
            for levels in LEVELS:
                message = rpc("SendMessage", {"message": {"messageId": "m", "role": "ROLE_USER", "parts": DEEP}})
                refused(await http.post("/", content=body(message, levels), headers=MCP_HEADERS), "json-rpc")
                for path in ("/ext/agent-config", "/ext/mcp-config", "/ext/skill-config", "/ext/trajectory"):
                    refused(await http.post(path, content=body({"config": DEEP}, levels)), "rest")
            import httpx

            async with httpx.AsyncClient(timeout=30) as client:
                assert (await AgentClient(base, client).ask("hi", {}, context_id="c", deadline_s=10)).text == "echo: hi"
    no_traceback(stderr)


@pytest.mark.processes
async def test_the_echo_mcp_server_answers_deep_json_with_a_parse_error(tmp_path):
    """The echo-mcp bundle's server (standard library only, as a plain third-party MCP server would be; it is
    reached only through the gateway's door): 100,000 levels are a JSON-RPC parse error, not a dropped
    connection and a traceback."""
    port = free_port()
    script = Path(__file__).parent.parent / "agent_env/bundles/echo-mcp/envs/echo/server/server.py"
    env = {**os.environ, "HOST": "127.0.0.1", "PORT": str(port)}
    base = f"http://127.0.0.1:{port}"
    with process([sys.executable, str(script)], f"{base}/mcp", tmp_path, env) as stderr:
        async with httpx2.AsyncClient(base_url=base, timeout=60) as http:
            call = rpc("tools/call", {"name": "echo", "arguments": {"text": DEEP}})
            answer = await http.post("/mcp", content=body(call, 100_000), headers=MCP_HEADERS)
            assert answer.status_code == 400 and answer.json()["error"]["code"] == -32700, answer.text
            echoed = await http.post("/mcp", json=rpc("tools/call", {"name": "echo", "arguments": {"text": "hi"}}))
            assert echoed.json()["result"]["structuredContent"] == {"text": "hi"}
    no_traceback(stderr)


async def test_the_episodes_server_refuses_deep_json(settings, server_errors):
    """`agent-env episodes serve`'s app on a real port: every route that takes a body. (No lifespan: a body
    that reached an episode would fail on the missing state.)"""
    import uvicorn

    from agent_env.episodes.http import create_app
    from agent_env.gateway.embedded import admin_token

    port = free_port()
    app = create_app(settings, worker=False)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off"))
    task = asyncio.create_task(server.serve())
    try:
        while not server.started:
            await asyncio.sleep(0.01)
        auth = {"authorization": f"Bearer {admin_token(settings)}"}
        async with httpx2.AsyncClient(base_url=f"http://127.0.0.1:{port}", headers=auth, timeout=60) as http:
            for levels in LEVELS:
                for path, template in [
                    ("/episodes", {"task": {"id": "t", "steps": DEEP}, "trainer_agents": ["a"]}),
                    ("/episodes/groups", {"task": "refund", "trainer_agents": ["a"], "size": 2, "seeds": DEEP}),
                    ("/episodes/e1/next-turn", {"agent": DEEP}),
                    ("/episodes/e1/turns/t1/end", {"response": DEEP}),
                    ("/episodes/e1/abandon", {"reason": DEEP}),
                ]:
                    refused(await http.post(path, content=body(template, levels)), "rest")
            shallow = await http.post("/episodes", json={"task": "escalation"})  # prompts two: name one
            assert shallow.status_code == 400 and "trainer_agents" in shallow.json()["error"]
    finally:
        server.should_exit = True
        await task
    assert not server_errors, [r.getMessage() for r in server_errors]


async def test_the_explorer_never_parses_a_deep_body(tmp_path, server_errors):
    """The explorer reads no request bodies (its API is GET only): a deep one is answered as any request it
    does not serve, never a 500, nothing logged."""
    from explorer_util import serving

    from agent_env.config import Settings
    from agent_env.explorer.auth import Door
    from agent_env.explorer.server import create_app

    with serving(create_app(Settings(state_dir=tmp_path), Door())) as base:
        async with httpx2.AsyncClient(base_url=base, timeout=60) as http:
            for levels in LEVELS:
                for path in ("/api/runs", "/login", "/api/runs/r/calls"):
                    answer = await http.post(path, content=body({"q": DEEP}, levels))
                    assert answer.status_code in (401, 405), (path, answer.status_code, answer.text[:200])
            assert (await http.get("/api/runs")).status_code == 401
    assert not server_errors, [r.getMessage() for r in server_errors]


async def test_a_recursion_error_from_elsewhere_is_never_a_500(tmp_path, server_errors):
    """A value from another path than the request (a store, an app) too deep for Python: whatever the app
    behind the door, the answer is a 422 naming the limit (a JSON-RPC error on its JSON-RPC paths), never
    a 500 with a traceback."""
    from explorer_util import serving
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    value: list = []
    for _ in range(100_000):
        value = [value]

    async def too_deep(request):
        return JSONResponse(value)

    async def fine(request):
        return JSONResponse({"ok": True})

    app = Starlette(routes=[Route("/rest", too_deep), Route("/rpc", too_deep, methods=["POST"]), Route("/", fine)])
    with serving(HostGuard(app, json_rpc={"/rpc": JSON_RPC})) as base:
        async with httpx2.AsyncClient(base_url=base, timeout=60) as http:
            answer = await http.get("/rest")
            assert answer.status_code == 422 and f"limited to {MAX_DEPTH} levels" in answer.json()["error"]
            answer = await http.post("/rpc", json=rpc("x", {}))
            assert answer.status_code == 200 and answer.json()["error"]["code"] == -32603
            assert (await http.get("/")).json() == {"ok": True}
    assert not server_errors, [r.getMessage() for r in server_errors]


# -- the trajectory --


class Deep(App):
    name = "deep"

    @tool
    def dig(self, levels: int) -> dict:
        """Answer with a value nested `levels` deep (an app's answer, not an agent's request).

        Args:
            levels: how deep
        """
        value: list = []
        for _ in range(levels - 1):
            value = [value]
        return {"value": value}


async def test_an_answer_too_deep_to_keep_is_recorded_as_a_note(tmp_path):
    """An app answers with a value nested 100 levels deep: the agent gets it, the trajectory keeps a note
    saying it was too deep (what every later read of the trajectory would have tripped on, deeper)."""
    spec = {"id": "d", "run_id": "r", "apps": [{"app": f"{__name__}:Deep"}], "roles": {"a": {"tools": ["*"]}}}
    async with running_gateway(tmp_path / "gw") as (gateway, base, admin):
        await admin.put_instance({**spec, "agents": {"ann": "a"}})
        token = await admin.token("d", "ann")
        answer = await admin.call_tool("d", token, "dig", {"levels": 100})
        assert json_depth.depth_ok(json.dumps(answer), 101) and not json_depth.depth_ok(json.dumps(answer), 99)
        shallow = await admin.call_tool("d", token, "dig", {"levels": 3})
        deep, kept = await admin.trajectory("d")
        assert deep["result"]["too_deep"] is True and deep["result"]["limit"] == MAX_DEPTH, deep
        assert kept["result"] == shallow


def old_gateway_entries(levels: int) -> list[str]:
    """Rows a gateway from before the door could have written: a call with arguments `levels` deep, the same
    refused, a corrupt row, a row that is not an object."""
    call = {"instance": "desk-1", "agent": "sam", "role": "support", "tool": "create_ticket", "via": "rest"}
    return [
        json.dumps({**call, "arguments": {"x": "X"}, "result": {"id": "T"}}).replace('"X"', nested(levels)),
        json.dumps({**call, "tool": "issue_refund", "arguments": {"x": "X"}, "error": "no", "refused": True}).replace(
            '"X"', nested(levels)
        ),
        '{"instance": "desk-1", "tool": "creat',
        "[1, 2]",
    ]


async def test_entries_that_cannot_be_read_are_flagged_and_every_page_still_reads(tmp_path):
    """What an older gateway recorded (calls 960 and 100,000 levels deep, allowed and refused) or what broke
    on disk sits between good entries: the gateway's REST page, its client (graders, teardown, the
    explorer's live view) read every entry, the bad ones flagged `unreadable` with why."""
    async with running_gateway(tmp_path / "gw") as (gateway, base, admin):
        await admin.put_instance(support_spec())
        await admin.load("desk-1", [{"kind": "data", "data": support_data()}])
        sam = await admin.token("desk-1", "sam")
        await admin.call_tool("desk-1", sam, "list_tickets", {})
        gateway.trajectory.flush()
        db = sqlite3.connect(gateway.folder("desk-1") / "trajectory.sqlite")
        with db:
            for levels in LEVELS:
                db.executemany("INSERT INTO calls (entry) VALUES (?)", [(e,) for e in old_gateway_entries(levels)])
        db.close()
        await admin.call_tool("desk-1", sam, "get_ticket", {"ticket_id": "TCK-1004"})
        async with httpx2.AsyncClient(base_url=base, timeout=60) as http:
            page = await http.get(
                "/admin/instances/desk-1/trajectory", headers={"authorization": f"Bearer {gateway.admin_token}"}
            )
            assert page.status_code == 200, page.text[:300]  # fmt: skip
        entries = await admin.trajectory("desk-1")
        assert [e["seq"] for e in entries] == list(range(1, 11))
        assert [e.get("tool") for e in entries] == ["list_tickets", *[None] * 8, "get_ticket"]
        flagged = entries[1:9]
        assert all(e["unreadable"].startswith("this entry cannot be read") for e in flagged), flagged
        assert sum("nests deeper than 65 levels" in e["unreadable"] for e in flagged) == 4, flagged
        assert "not JSON" in flagged[2]["unreadable"] and "not an object" in flagged[3]["unreadable"]
        assert await admin.last_seq("desk-1") == 10


@pytest.mark.processes
async def test_kept_trajectories_with_unreadable_lines_still_read(tmp_path):
    """A run's trajectory kept in the object store (what `runs trajectory` and the explorer read once the
    run is over) with lines an older gateway wrote too deep: both list every call, the bad ones flagged."""
    from agent_env.config import Settings
    from agent_env.explorer.auth import Door
    from agent_env.explorer.server import create_app
    from agent_env.spec.run import RunState, RunStatus, StepState, StepStatus
    from agent_env.stores import keys, open_stores

    settings = Settings(state_dir=tmp_path)
    stores = open_stores(settings)
    run_id, instance = "deep-run", "deep-run.desk"
    started = datetime(2026, 3, 2, 13, tzinfo=UTC)
    state = RunState(
        run_id=run_id,
        task_id="t",
        task_version="1",
        status=RunStatus.FAILED,
        started_at=started,
        finished_at=started + timedelta(minutes=1),
        steps={"desk": StepState(id="desk", type="deploy_env", status=StepStatus.SUCCEEDED, outputs={"instance": instance})},
    )  # fmt: skip
    good = {
        "seq": 1,
        "instance": instance,
        "agent": "sam",
        "role": "support",
        "tool": "list_tickets",
        "arguments": {},
        "result": {"count": 0},
        "refused": False,
        "virtual_time": started.isoformat(),
        "real_time": started.isoformat(),
        "duration_ms": 1.0,
    }
    lines = [json.dumps(good), *old_gateway_entries(960), *old_gateway_entries(100_000)]
    try:
        stores.documents.put(keys.RUNS, run_id, state.model_dump(mode="json"))
        stores.objects.put(keys.trajectory(run_id, instance), ("\n".join(lines) + "\n").encode())
        env = {**os.environ, "AGENT_ENV_HOME": str(tmp_path), "COLUMNS": "400"}
        shown = await asyncio.to_thread(cli, ["runs", "trajectory", run_id, "--jsonl"], env)
        assert shown.returncode == 0, shown.stderr
        printed = [json.loads(line) for line in shown.stdout.splitlines()]
        assert len(printed) == 9 and [e.get("tool") for e in printed].count("list_tickets") == 1
        assert sum("unreadable" in e for e in printed) == 8
        table = await asyncio.to_thread(cli, ["runs", "trajectory", run_id], env)
        assert table.returncode == 0 and "9 calls" in table.stdout and "cannot be read" in table.stdout, table.stdout
        door = Door()
        import httpx

        transport = httpx.ASGITransport(app=create_app(settings, door, stores=stores))
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:8234") as http:
            await explorer_util.sign_in(http, door)
            page = await http.get(f"/api/runs/{run_id}/calls")
            assert page.status_code == 200 and page.json()["total"] == 9, page.text[:300]
    finally:
        stores.close()


async def test_a_run_survives_an_agent_sending_deep_calls(settings, client, worker):
    """The finding end to end: a trainer-played agent (the refund task's) sends calls nested 960 levels deep
    with its role token, over REST and MCP, to a tool it may use and to one its role is refused. Each is
    refused at the door; the run goes on, its `prompt_agent` and grader read the trajectory, the run passes,
    and `agent-env runs trajectory` lists what the agent did."""
    import uvicorn
    from test_episodes import REFUND_SCRIPT

    from agent_env.episodes.http import create_app
    from agent_env.gateway.embedded import admin_token, connect

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(settings, worker=False), host="127.0.0.1", port=port, log_level="warning"))  # fmt: skip
    serving = asyncio.create_task(server.serve())
    while not server.started:
        await asyncio.sleep(0.01)
    gateway = connect(settings)
    try:
        auth = {"authorization": f"Bearer {admin_token(settings)}"}
        async with httpx2.AsyncClient(base_url=f"http://127.0.0.1:{port}", headers=auth, timeout=60) as http:
            started = await http.post(
                "/episodes", json={"task": "refund", "trainer_agents": ["refunds"], "turn_timeout": 60}
            )
            assert started.status_code == 201, started.text  # fmt: skip
            episode = started.json()["episode"]
            turn = (await http.post(f"/episodes/{episode}/next-turn", json={})).json()["turn"]
            as_agent = {"authorization": f"Bearer {turn['token']}", **MCP_HEADERS}
            allowed = {"ticket_id": "TCK-1004", "x": DEEP}  # billing_lead may read tickets...
            denied = {"sender": "a@b.co", "to": ["c@d.co"], "subject": "s", "body": "b", "x": DEEP}  # ...not send mail
            for name, arguments in (("get_ticket", allowed), ("send_email", denied)):
                answer = await http.post(f"{turn['tools_url']}/{name}", content=body(arguments, 960), headers=as_agent)
                refused(answer, "rest")
                call = rpc("tools/call", {"name": name, "arguments": arguments})
                refused(await http.post(turn["mcp_url"], content=body(call, 960), headers=as_agent), "mcp")
            for name, arguments in REFUND_SCRIPT:
                done = await http.post(f"{turn['tools_url']}/{name}", json=arguments, headers=as_agent)
                assert done.status_code == 200, done.text
            entries = await gateway.trajectory(turn["env"])
            assert [e["tool"] for e in entries] == [name for name, _ in REFUND_SCRIPT]
            await http.post(f"/episodes/{episode}/turns/{turn['id']}/end", json={"response": "Refunded CH-5002."})
            result = (await http.get(f"/episodes/{episode}/result")).json()
            shape = {k: result[k] for k in ("status", "score", "total", "passed", "scores", "error")}
            assert shape == {
                "status": "passed",
                "score": 1.0,
                "total": 1.0,
                "passed": True,
                "scores": {"grade": 1.0},
                "error": None,
            }, result
            assert {(c["step"], c["passed"]) for c in result["components"]} == {("grade", True)}, result
        shown = await asyncio.to_thread(cli, ["runs", "trajectory", episode, "--jsonl"])
        assert shown.returncode == 0, shown.stderr
        listed = [json.loads(line) for line in shown.stdout.splitlines()]
        assert [e["tool"] for e in listed if e["via"] != "run"] == [name for name, _ in REFUND_SCRIPT]
        assert [e["tool"] for e in listed if e["via"] == "run"] == ["get_order", "get_ticket"], "the grader's reads"
    finally:
        await gateway.aclose()
        server.should_exit = True
        await serving


async def test_the_background_workers_control_socket_drops_a_deep_request(tmp_path, caplog):
    """The background worker's control socket (this user's only, one JSON request a line): a line nested
    30,000 levels deep is a malformed request like any other, dropped without an answer or an error logged,
    and the socket answers the next one."""
    from agent_env.config import Settings
    from agent_env.temporal.control import serve_control

    path = tmp_path / "control.sock"
    async with serve_control(path, client=None, settings=Settings(state_dir=tmp_path), fingerprint="f"):  # type: ignore[arg-type]
        reader, writer = await asyncio.open_unix_connection(str(path))
        writer.write(nested(30_000).encode() + b"\n")
        assert await asyncio.wait_for(reader.read(), 10) == b"", "no answer, the connection closed"
        writer.close()
        reader, writer = await asyncio.open_unix_connection(str(path))
        writer.write(b'{"op": "ping"}\n')
        assert json.loads(await asyncio.wait_for(reader.readline(), 10)) == {"pid": os.getpid()}
        writer.close()
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text
