"""Fuzzing with hypothesis: whatever a user writes or a client sends, the answer is a clear refusal.

Specs (tasks, environments, agents, triggers): random structures, mutations of the built-in bundles' files
and damaged TOML text end in a valid spec or an AgentEnvError (a message with a fix), never another
exception. A real gateway: random tool arguments, JSON-RPC / MCP / REST bodies and data-plane parts get
a 2xx-4xx answer, never a 500, and the gateway keeps answering /ready.

Bounded (max_examples) so the file runs in well under a minute; a failure prints its input.
"""

from __future__ import annotations

import asyncio
import base64
import json
import math
import shutil
import tempfile
import threading
import tomllib
from pathlib import Path
from urllib.parse import quote

import httpx
import pytest
from gateway_util import running_gateway, support_data, support_spec
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent_env.bundles import BUILTIN_ROOT, find_agent, find_env
from agent_env.errors import AgentEnvError
from agent_env.planning.tasks import load_task, parse_task


def fuzz(examples: int) -> settings:
    # No deadline: the first calls to a gateway are slower than the rest. No example database: nothing is
    # written into the checkout; a failure prints the input (and `@reproduce_failure` to replay it).
    return settings(
        max_examples=examples,
        deadline=None,
        database=None,
        print_blob=True,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )


TASK_FILES = sorted(BUILTIN_ROOT.glob("*/tasks/*.toml"))
ENV_FILES = sorted(BUILTIN_ROOT.glob("*/envs/*/env.toml"))
AGENT_FILES = sorted(BUILTIN_ROOT.glob("*/agents/*/agent.toml"))

# Field names the specs use, so random structures reach past the first "unknown field".
FIELDS = [
    "id",
    "version",
    "description",
    "seed",
    "timeout",
    "clock",
    "personas",
    "triggers",
    "steps",
    "type",
    "depends_on",
    "config",
    "env",
    "tool",
    "arguments",
    "checks",
    "name",
    "path",
    "equals",
    "matches",
    "when",
    "actions",
    "at",
    "every",
    "count",
    "mode",
    "start",
    "zone",
    "rate",
    "agent",
    "role",
    "apps",
    "app",
    "roles",
    "tools",
    "deny",
    "data",
    "record",
    "prompt",
    "turns",
    "say",
    "on_failure",
    "retries",
    "unless",
    "match",
    "state",
    "says",
    "persona",
    "enable",
    "disable",
    "model",
    "llm",
    "brief",
    "email",
]
TEXT = st.text(max_size=12) | st.sampled_from(
    [
        "${steps.x.outputs.y}",
        "+1h",
        "1d",
        "*",
        "notes",
        "desk",
        "2026-03-02T08:00:00Z",
        "../../etc/passwd",
        "scripted",
        "call_tool",
        "time",
        "event_driven",
    ]
)
SCALARS = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | TEXT
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.datetimes()
)
KEYS = st.sampled_from(FIELDS) | st.text(max_size=8)
VALUES = st.recursive(
    SCALARS, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(KEYS, inner, max_size=5), max_leaves=25
)


def refused_clearly(call):
    """Runs `call`; a spec it returns is fine, an AgentEnvError is fine, anything else fails the test."""
    try:
        call()
    except AgentEnvError as e:
        assert str(e).strip(), "an error with no message"


def nodes(doc, path=()):
    """(path, value) of every node of a JSON-like document, the root included."""
    yield path, doc
    items = doc.items() if isinstance(doc, dict) else enumerate(doc) if isinstance(doc, list) else ()
    for key, value in items:
        yield from nodes(value, (*path, key))


def mutate(data, doc):
    """A few random edits of `doc`: a node replaced, removed, or given a new field/item."""
    for _ in range(data.draw(st.integers(1, 3), label="edits")):
        path, node = data.draw(st.sampled_from(list(nodes(doc))), label="node")
        op = data.draw(st.sampled_from(["replace", "remove", "add"]), label="op")
        parent = doc
        for key in path[:-1]:
            parent = parent[key]
        if op == "add" and isinstance(node, dict):
            node[data.draw(KEYS, label="key")] = data.draw(VALUES, label="value")
        elif op == "add" and isinstance(node, list):
            node.append(data.draw(VALUES, label="item"))
        elif not path:  # the root stays: test_random_task_structures covers roots of every kind
            continue
        elif op == "remove":
            del parent[path[-1]]
        else:
            parent[path[-1]] = data.draw(VALUES, label="value")
    return doc


def toml_value(value) -> str:
    """A TOML inline value (None has no TOML form: callers drop it)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf") if math.isinf(value) else repr(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value if v is not None) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(k)} = {toml_value(v)}" for k, v in value.items() if v is not None) + "}"
    return value.isoformat()  # datetimes


def toml_document(doc) -> str:
    if not isinstance(doc, dict):
        return f"value = {toml_value(doc)}\n" if doc is not None else ""
    return "".join(f"{json.dumps(k)} = {toml_value(v)}\n" for k, v in doc.items() if v is not None)


# -- specs --


@fuzz(150)
@given(st.dictionaries(KEYS, VALUES, max_size=6) | VALUES)
def test_random_task_structures(data):
    refused_clearly(lambda: parse_task(data, "fuzz task"))


@fuzz(250)
@given(st.sampled_from(TASK_FILES), st.data())
def test_mutated_bundle_tasks(path, data):
    doc = mutate(data, tomllib.loads(path.read_text()))
    refused_clearly(lambda: parse_task(doc, str(path), path.parent.parent))


TRIGGER = st.fixed_dictionaries(
    {
        "id": st.sampled_from(["t1", "t2"]) | TEXT,
        "when": st.fixed_dictionaries(
            {"type": st.sampled_from(["time", "tool_call", "state", "persona"]) | TEXT},
            optional={
                k: VALUES
                for k in ("at", "every", "count", "env", "tool", "match", "persona", "says", "check", "jitter")
            },
        ),
        "actions": st.lists(
            st.fixed_dictionaries(
                {
                    "type": st.sampled_from(["call_tool", "set_tools", "instruct", "set_clock", "triggers", "end_run"])
                    | TEXT
                },
                optional={
                    k: VALUES
                    for k in (
                        "env",
                        "tool",
                        "arguments",
                        "role",
                        "agent",
                        "enable",
                        "disable",
                        "text",
                        "to",
                        "mode",
                        "rate",
                        "reason",
                        "triggers",
                    )
                },
            ),
            max_size=3,
        ),
    },
    optional={"unless": VALUES, "description": TEXT},
)


@fuzz(150)
@given(
    st.lists(TRIGGER, min_size=1, max_size=3),
    st.none()
    | st.fixed_dictionaries(
        {
            "start": st.sampled_from(["2026-03-02T08:00:00-05:00"]) | TEXT,
            "mode": st.sampled_from(["event_driven", "paced", "frozen"]) | TEXT,
        },
        optional={"rate": VALUES, "zone": VALUES},
    ),
)
def test_random_triggers_on_a_real_task(triggers, clock):
    path = BUILTIN_ROOT / "workplace" / "tasks" / "workplace.toml"
    doc = tomllib.loads(path.read_text())
    doc["triggers"] = triggers
    if clock is not None:
        doc["clock"] = clock
    refused_clearly(lambda: parse_task(doc, str(path), path.parent.parent))


@fuzz(100)
@given(st.sampled_from(TASK_FILES), st.data())
def test_damaged_task_files(path, data):
    text = path.read_text()
    for _ in range(data.draw(st.integers(1, 4), label="edits")):
        at = data.draw(st.integers(0, len(text)), label="at")
        cut = data.draw(st.integers(0, 20), label="cut")
        text = (
            text[:at]
            + data.draw(st.text(max_size=8) | st.sampled_from(["[", "]]", "=", '"', "\\u", "\x00"]), label="insert")
            + text[at + cut :]
        )
    with tempfile.TemporaryDirectory() as tmp:
        file = Path(tmp) / "tasks" / "task.toml"
        file.parent.mkdir()
        file.write_bytes(text.encode("utf-8", "surrogatepass"))
        refused_clearly(lambda: load_task(file))


@fuzz(150)
@given(st.sampled_from(ENV_FILES), st.data())
def test_mutated_environment_records(path, data):
    doc = mutate(data, tomllib.loads(path.read_text()))
    with tempfile.TemporaryDirectory() as tmp:
        bundle = Path(tmp)
        folder = bundle / "envs" / "fuzzed"
        shutil.copytree(path.parent, folder)  # its data files come along
        (folder / "env.toml").write_text(toml_document(doc))
        refused_clearly(lambda: find_env(bundle, "fuzzed"))


@fuzz(150)
@given(st.sampled_from(AGENT_FILES), st.data())
def test_mutated_agent_records(path, data):
    doc = mutate(data, tomllib.loads(path.read_text()))
    with tempfile.TemporaryDirectory() as tmp:
        bundle = Path(tmp)
        (bundle / "agents" / "fuzzed").mkdir(parents=True)
        (bundle / "agents" / "fuzzed" / "agent.toml").write_text(toml_document(doc))
        refused_clearly(lambda: find_agent(bundle, "fuzzed"))


# -- a real gateway --


class Desk:
    """A gateway serving the support desk, in a thread of its own: hypothesis drives it synchronously."""

    def __init__(self, root: Path) -> None:
        self.root, self.ready, self.stop = root, threading.Event(), None
        self.thread = threading.Thread(target=lambda: asyncio.run(self._serve()), daemon=True)
        self.error: BaseException | None = None

    async def _serve(self) -> None:
        try:
            async with running_gateway(self.root) as (gateway, base, admin):
                for instance in ("desk-1", "desk-data"):
                    await admin.put_instance(support_spec(instance))
                    await admin.data(instance, "data/add", {"parts": [{"kind": "data", "data": support_data()}]})
                self.base, self.admin = base, gateway.admin_token
                self.tokens = {agent: await admin.token("desk-1", agent) for agent in ("sam", "lee")}
                self.stop = asyncio.Event()
                self.loop = asyncio.get_running_loop()
                self.ready.set()
                await self.stop.wait()
        except BaseException as e:
            self.error = e
            self.ready.set()

    def close(self) -> None:
        if self.stop is not None:
            self.loop.call_soon_threadsafe(self.stop.set)
        self.thread.join(10)


@pytest.fixture(scope="module")
def desk():
    with tempfile.TemporaryDirectory() as tmp:
        served = Desk(Path(tmp) / "gw")
        served.thread.start()
        served.ready.wait(60)
        assert served.error is None and served.stop is not None, f"the gateway did not start: {served.error!r}"
        with httpx.Client(base_url=served.base, timeout=30) as http:
            served.http = http
            served.mcp_session = open_mcp_session(served)
            yield served
        served.close()


MCP_HEADERS = {
    "accept": "application/json, text/event-stream",
    "content-type": "application/json",
    "mcp-protocol-version": "2025-06-18",
}


def open_mcp_session(desk) -> str:
    """One MCP session of Lee's, opened by hand (initialize, then initialized), for raw JSON-RPC."""
    headers = {**MCP_HEADERS, "authorization": f"Bearer {desk.tokens['lee']}"}
    answer = desk.http.post(
        "/envs/desk-1/mcp",
        headers=headers,
        json={
            "jsonrpc": "2.0",
            "id": 0,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "fuzz", "version": "1"},
            },
        },
    )
    assert answer.status_code == 200, answer.text
    session = answer.headers["mcp-session-id"]
    done = desk.http.post(
        "/envs/desk-1/mcp",
        headers={**headers, "mcp-session-id": session},
        json={"jsonrpc": "2.0", "method": "notifications/initialized"},
    )
    assert done.status_code in (200, 202), done.text
    return session


def still_serving(desk, answer: httpx.Response) -> None:
    assert answer.status_code < 500, (
        f"{answer.status_code} for {answer.request.method} {answer.request.url}: {answer.text[:500]}"
    )
    assert desk.http.get("/ready").status_code == 200, "the gateway stopped answering /ready"


TOOLS = [
    "get_ticket",
    "list_tickets",
    "create_ticket",
    "set_status",
    "add_comment",
    "send_email",
    "get_order",
    "list_orders",
    "verify_order",
    "issue_refund",
    "get_account",
    "get_time",
]
ARGS = st.dictionaries(
    st.sampled_from(
        [
            "ticket_id",
            "order_id",
            "charge_id",
            "amount_cents",
            "reason",
            "status",
            "author",
            "body",
            "to",
            "subject",
            "sender",
            "verified_by",
            "limit",
            "customer_email",
            "priority",
        ]
    )
    | st.text(max_size=8),
    # the desk's own ids and values, so calls get past "not found" to the tools' logic
    st.sampled_from(
        ["ORD-1001", "TCK-1004", "CH-5002", "CH-5001", "ACC-1", "dana@example.com", "solved", 4900, -1, 10**12]
    )
    | VALUES,
    max_size=6,
)
JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)


def jsonable(value):
    """`value` as strict JSON can carry it: NaN and infinities become null, datetimes text."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [jsonable(v) for v in value]
    return value if value is None or isinstance(value, (bool, int, float, str)) else str(value)


JSON_ARGS = ARGS.map(jsonable)


@fuzz(120)
@given(
    st.sampled_from(["sam", "lee"]), st.sampled_from(TOOLS) | st.text(min_size=1, max_size=10), JSON_ARGS | JSON_VALUES
)
def test_rest_tool_calls_with_random_arguments(desk, agent, tool, arguments):
    answer = desk.http.post(
        f"/envs/desk-1/tools/{quote(tool, safe='')}",
        json=arguments,
        headers={"authorization": f"Bearer {desk.tokens[agent]}"},
    )
    still_serving(desk, answer)


@fuzz(120)
@given(
    st.sampled_from(["tools/call", "tools/list", "ping", "resources/list", "initialize"]) | st.text(max_size=10),
    st.one_of(
        st.fixed_dictionaries(
            {"name": st.sampled_from(TOOLS) | st.text(max_size=8)},
            optional={"arguments": JSON_ARGS | JSON_VALUES, "_meta": JSON_VALUES},
        ),
        JSON_VALUES,
    ),
    st.none() | st.integers(-5, 2**40) | st.text(max_size=5) | JSON_VALUES,
)
def test_mcp_json_rpc_with_random_requests(desk, method, params, id_):
    body = {"jsonrpc": "2.0", "method": method, "params": params, **({"id": id_} if id_ is not None else {})}
    answer = desk.http.post(
        "/envs/desk-1/mcp",
        json=body,
        headers={**MCP_HEADERS, "authorization": f"Bearer {desk.tokens['lee']}", "mcp-session-id": desk.mcp_session},
    )
    still_serving(desk, answer)


ENDPOINTS = [
    ("POST", "/envs/desk-1/mcp", "lee"),
    ("POST", "/envs/desk-1/tools/get_order", "lee"),
    ("POST", "/envs/desk-1/agentenv", "admin"),
    ("PUT", "/admin/instances/fz", "admin"),
    ("PUT", "/admin/instances/desk-1/roles/fz", "admin"),
    ("PATCH", "/admin/instances/desk-1/roles/support", "admin"),
    ("PUT", "/admin/instances/desk-1/world", "admin"),
    ("POST", "/admin/instances/desk-1/call", "admin"),
    ("POST", "/admin/instances/desk-1/load", "admin"),
    ("PUT", "/admin/agents/fz", "admin"),
    ("PUT", "/admin/instances/desk-1/agents/fz", "admin"),
    ("POST", "/admin/human/fz/1", "admin"),
]


@fuzz(150)
@given(
    st.sampled_from(ENDPOINTS),
    st.binary(max_size=200) | JSON_VALUES.map(lambda v: json.dumps(v).encode()),
    st.sampled_from(["application/json", "application/octet-stream", None]),
)
def test_random_bodies_to_every_endpoint(desk, endpoint, body, content_type):
    method, path, who = endpoint
    token = desk.admin if who == "admin" else desk.tokens[who]
    headers = {"authorization": f"Bearer {token}", **({"content-type": content_type} if content_type else {})}
    if path.endswith("/mcp"):
        headers |= {"accept": MCP_HEADERS["accept"], "mcp-session-id": desk.mcp_session}
    still_serving(desk, desk.http.request(method, path, content=body, headers=headers))


@fuzz(60)
@given(st.data())
def test_mutated_instance_specs(desk, data):
    spec = jsonable(mutate(data, support_spec("fz")))
    answer = desk.http.put("/admin/instances/fz", json=spec, headers={"authorization": f"Bearer {desk.admin}"})
    still_serving(desk, answer)


PART = st.fixed_dictionaries(
    {"kind": st.sampled_from(["data", "text", "file"]) | TEXT},
    optional={
        "data": st.dictionaries(
            st.sampled_from(["mail", "helpdesk", "billing"]) | st.text(max_size=6),
            st.dictionaries(
                st.sampled_from(["tickets", "orders", "accounts", "emails", "charges"]) | st.text(max_size=6),
                st.lists(JSON_VALUES, max_size=3) | JSON_VALUES,
                max_size=3,
            )
            | JSON_VALUES,
            max_size=3,
        )
        | JSON_VALUES,
        "text": JSON_VALUES,
        "file": st.fixed_dictionaries(
            {},
            optional={
                "bytes": st.binary(max_size=40).map(lambda b: base64.b64encode(b).decode()) | JSON_VALUES,
                "uri": st.sampled_from(["file:///etc/passwd", "file:data.json", "http://x/y", "../x"]) | TEXT,
                "mimeType": TEXT,
            },
        )
        | JSON_VALUES,
        "metadata": st.fixed_dictionaries(
            {}, optional={"agentenv.io/app": st.sampled_from(["mail", "helpdesk", "billing"]) | JSON_VALUES}
        )
        | JSON_VALUES,
    },
)


@fuzz(120)
@given(
    st.sampled_from(["data/add", "data/get", "data/reset"]) | TEXT,
    st.fixed_dictionaries({"parts": st.lists(PART, max_size=3) | JSON_VALUES}) | JSON_VALUES,
)
def test_data_plane_payloads(desk, method, params):
    answer = desk.http.post(
        "/envs/desk-data/agentenv",
        json={"jsonrpc": "2.0", "id": 7, "method": method, "params": params},
        headers={"authorization": f"Bearer {desk.admin}"},
    )
    still_serving(desk, answer)
    reply = answer.json()
    assert answer.status_code == 200 and ("result" in reply) != ("error" in reply), reply
    if "error" in reply:
        assert isinstance(reply["error"]["code"], int) and reply["error"]["message"], reply
