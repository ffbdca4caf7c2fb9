"""An app served alone speaks the open agent-env protocol v1 (checked with that protocol's own reference
client, unchanged) and MCP (checked with the mcp SDK's client, in both protocol eras)."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from agentenv_protocol import client as reference
from agentenv_protocol.tool_client import ToolSession
from agentenv_protocol.types import DataPart, FilePart, FileWithBytes, FileWithUri
from agentenv_protocol.types import EnvironmentCard as ReferenceCard
from conftest import free_port
from mcp import Client

AGENT_ENV = str(Path(sys.executable).parent / "agent-env")


@pytest.fixture(scope="module")
def notes_server(tmp_path_factory):
    root = tmp_path_factory.mktemp("serve")
    (root / "data").mkdir()
    (root / "data" / "seed.json").write_text(
        json.dumps({"notes": [{"key": "from_file", "text": "seeded", "updated_at": "2026-01-01T00:00:00Z"}]})
    )
    (root / "secret.json").write_text(json.dumps({"notes": []}))
    port = free_port()
    proc = subprocess.Popen(
        [
            AGENT_ENV,
            "env",
            "serve",
            "notes",
            "--port",
            str(port),
            "--state",
            str(root / "state"),
            "--data-root",
            str(root / "data"),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 20
    while True:
        try:
            if httpx.get(f"{base}/ready").status_code == 200:
                break
        except httpx.HTTPError:
            pass
        assert proc.poll() is None, proc.stderr.read().decode()
        assert time.monotonic() < deadline, "env serve did not come up"
        time.sleep(0.05)
    yield base, root
    proc.terminate()
    proc.wait(10)


def rpc(base: str, body) -> dict:
    response = httpx.post(f"{base}/agentenv", content=body if isinstance(body, (bytes, str)) else json.dumps(body))
    assert response.status_code == 200
    return response.json()


async def test_card_has_the_exact_protocol_shape(notes_server):
    base, _ = notes_server
    card = await reference.get_card(base)
    assert set(card) == {
        "name",
        "protocolVersion",
        "url",
        "preferredTransport",
        "additionalInterfaces",
        "capabilities",
        "children_environments",
    }
    assert card["children_environments"] is None and "children_environments" in card  # nulls are kept
    assert (card["name"], card["protocolVersion"], card["url"], card["preferredTransport"]) == (
        "notes",
        "1.0",
        "/agentenv",
        "JSONRPC",
    )
    assert card["capabilities"]["operations"] == ["data/reset", "data/add", "data/get"]
    assert reference.mcp_path(card) == "/mcp"
    assert await reference.supports_v1(base)
    ReferenceCard.model_validate(card)


async def test_reference_client_data_plane_round_trip(notes_server):
    base, root = notes_server
    await reference.reset_data(base)
    rows = {"notes": [{"key": "inline", "text": "hi", "updated_at": "2026-01-01T00:00:00Z"}]}
    await reference.add_data(base, [DataPart(data=rows)])
    blob = base64.b64encode(json.dumps({"notes": [{"key": "bytes", "text": "b", "updated_at": "t"}]}).encode())
    await reference.add_data(base, [FilePart(file=FileWithBytes(bytes=blob.decode(), mimeType="application/json"))])
    await reference.add_data(base, [FilePart(file=FileWithUri(uri=f"file://{root}/data/seed.json"))])
    parts = (await reference.get_data(base)).parts
    keys = sorted(row["key"] for row in parts[0].data["notes"])
    assert keys == ["bytes", "from_file", "inline"]
    await reference.reset_data(base)
    assert (await reference.get_data(base)).parts[0].data == {"notes": []}


def test_json_rpc_errors(notes_server):
    base, root = notes_server
    assert rpc(base, b"{not json") == {
        "jsonrpc": "2.0",
        "id": None,
        "error": {"code": -32700, "message": "parse error"},
    }
    unknown = rpc(base, {"jsonrpc": "2.0", "id": 7, "method": "data/explode"})
    assert unknown["id"] == 7 and unknown["error"]["code"] == -32601
    probe = rpc(base, {"jsonrpc": "2.0", "id": "verify-data/add", "method": "data/add", "params": {"parts": []}})
    assert probe["id"] == "verify-data/add" and probe["error"]["code"] == -32602
    assert rpc(base, [1, 2])["error"]["code"] == -32600
    assert rpc(base, {"jsonrpc": "2.0", "id": 1, "method": "data/reset"})["result"] == {}
    escape = rpc(
        base,
        {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "data/add",
            "params": {"parts": [{"kind": "file", "file": {"uri": f"file://{root}/secret.json"}}]},
        },
    )
    assert escape["error"]["code"] == -32602 and "outside the data folder" in escape["error"]["data"]["detail"]
    dotdot = rpc(
        base,
        {
            "jsonrpc": "2.0",
            "id": 3,
            "method": "data/add",
            "params": {"parts": [{"kind": "file", "file": {"uri": "file:///../secret.json"}}]},
        },
    )
    assert dotdot["error"]["code"] == -32602
    bad_table = rpc(
        base,
        {
            "jsonrpc": "2.0",
            "id": 4,
            "method": "data/add",
            "params": {"parts": [{"kind": "data", "data": {"nope": []}}]},
        },
    )
    assert bad_table["error"]["code"] == -32000 and bad_table["error"]["data"] == {"code": "add_failed"}
    assert "has no table 'nope'" in bad_table["error"]["message"]


def test_oversized_bodies_are_refused(notes_server):
    base, _ = notes_server
    huge = (
        b'{"jsonrpc": "2.0", "id": 1, "method": "data/add", "params": {"parts": [{"kind": "text", "text": "'
        + b"x" * (17 * 1024 * 1024)
        + b'"}]}}'
    )
    assert httpx.post(f"{base}/agentenv", content=huge).status_code == 413


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_mcp_tools_match_the_card_and_work(notes_server, mode):
    base, _ = notes_server
    card = await reference.get_card(base)
    async with Client(f"{base}/mcp", mode=mode) as mcp:
        tools = (await mcp.list_tools()).tools
        assert [(t.name, t.description, t.input_schema) for t in tools] == [
            (t["name"], t["description"], t["inputSchema"]) for t in card["capabilities"]["tools"]
        ]
        now = "2026-05-04T10:00:00+00:00"
        written = await mcp.call_tool(
            "write_note", {"key": f"k-{mode}", "text": "x"}, meta={"agentenv.io/now": now, "agentenv.io/role": "writer"}
        )
        assert not written.is_error and written.structured_content["updated_at"] == "2026-05-04T10:00:00Z"
        read = await mcp.call_tool("read_note", {"key": f"k-{mode}"})
        assert read.structured_content["author"] == "writer"
        bad = await mcp.call_tool("write_note", {"key": 5})
        assert bad.is_error and "key: Input should be a valid string" in bad.content[0].text
        assert "text: is required" in bad.content[0].text
        missing = await mcp.call_tool("read_note", {"key": "never"})
        assert missing.is_error and "no note named 'never'" in missing.content[0].text


async def test_reference_tool_session(notes_server):
    base, _ = notes_server
    session = ToolSession(mcp_url=f"{base}{reference.mcp_path(await reference.get_card(base))}")
    await session.open()
    try:
        names = [t.name for t in await session.list_tools()]
        assert names == ["write_note", "read_note", "list_notes", "delete_note"]
        result = await session.call_tool("list_notes", {})
        assert not result.is_error if hasattr(result, "is_error") else True
    finally:
        await session.close()


def test_env_serve_refuses_unknown_apps():
    done = subprocess.run(
        [AGENT_ENV, "env", "serve", "nope:Nothing"], capture_output=True, text=True, env={**os.environ}, timeout=30
    )
    assert done.returncode == 2 and "cannot import 'nope'" in done.stderr
