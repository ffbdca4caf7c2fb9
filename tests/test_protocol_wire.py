"""Our side of the open agent-env protocol's wire, judged by its own pydantic models (`agentenv_protocol.types`),
over real HTTP on 127.0.0.1: the cards we serve are its EnvironmentCard exactly, our data plane takes what its
AddDataRequest takes (refusing the rest with -32602, naming the field) and answers its GetDataResponse, and the
gateway reads an env server written with the protocol's own server SDK through its card."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from agentenv_protocol import AgentEnvStarletteApplication, add_data, get_data
from agentenv_protocol.types import (
    AddDataResponse,
    DataPart,
    EnvironmentCard,
    FilePart,
    FileWithUri,
    GetDataResponse,
    ResetDataResponse,
)
from explorer_util import serving
from gateway_util import running_gateway, support_spec

from agent_env.cli.env_cmd import resolve_app
from agent_env.envs.serve import create_app
from agent_env.gateway_client import GatewayRefused

CARD = "/.well-known/agent-env.json"
CLERK = {"roles": {"clerk": {"tools": ["*"]}}, "agents": {"ann": "clerk"}}


@pytest.fixture(scope="module")
def notes(tmp_path_factory) -> Iterator[str]:
    """`agent-env env serve notes`, in a thread: its base URL."""
    with serving(create_app(resolve_app("notes"), tmp_path_factory.mktemp("notes"))) as base:
        yield base


def rpc(base: str, method: str, params: Any = None) -> dict[str, Any]:
    answer = httpx.post(f"{base}/agentenv", json={"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
    assert answer.status_code == 200, answer.text
    return answer.json()


def exactly(model, payload: dict[str, Any], **dump: Any) -> None:
    """`payload` is `model`'s: it validates, and nothing is dropped or added on the way (no key it lacks)."""
    assert model.model_validate(payload).model_dump(mode="json", **dump) == payload


# -- what we emit --


async def test_the_cards_we_serve_are_the_protocols_exactly(notes, tmp_path):
    served = httpx.get(f"{notes}{CARD}").json()
    exactly(EnvironmentCard, served)
    assert served["capabilities"]["operations"] == ["data/reset", "data/add", "data/get"]
    assert served["additionalInterfaces"] == [{"url": "/mcp", "transport": "mcp"}]
    async with running_gateway(tmp_path / "gw") as (_, base, admin):
        await admin.put_instance(support_spec())
        sam = await admin.token("desk-1", "sam")
        async with httpx.AsyncClient() as http:  # (the gateway serves in this test's loop)
            composed = (await http.get(f"{base}/envs/desk-1{CARD}", headers={"authorization": f"Bearer {sam}"})).json()
    exactly(EnvironmentCard, composed)
    assert [c["name"] for c in composed["children_environments"]] == ["mail", "helpdesk", "billing"]
    assert all(c["capabilities"]["operations"] == [] for c in composed["children_environments"])


def test_data_plane_answers_are_the_protocols(notes):
    note = {"key": "k", "text": "t", "updated_at": "2026-01-01T00:00:00Z"}
    assert rpc(notes, "data/reset")["result"] == ResetDataResponse().model_dump()
    added = rpc(notes, "data/add", {"parts": [DataPart(data={"notes": [note]}).model_dump(exclude_none=True)]})
    assert added["result"] == AddDataResponse().model_dump()
    got = rpc(notes, "data/get")["result"]
    exactly(GetDataResponse, got, exclude_none=True)
    stored = {**note, "author": None}
    assert got["parts"] == [{"kind": "data", "data": {"notes": [stored]}, "metadata": {"agentenv.io/app": "notes"}}]


@pytest.mark.parametrize(
    ("part", "named"),
    [
        ({"kind": "data", "data": {"notes": []}, "metadata": ["notes"]}, "parts[0].data.metadata"),
        ({"kind": "file", "file": {"bytes": 5}}, "parts[0].file.file"),
        ({"kind": "data", "data": [1]}, "parts[0].data.data"),
        ({"kind": "text", "text": 5}, "parts[0].text.text"),
        ({"kind": "table"}, "parts[0]"),
    ],
)
def test_the_data_plane_refuses_parts_the_protocol_refuses(notes, part, named):
    refused = rpc(notes, "data/add", {"parts": [part]})
    assert refused["error"]["code"] == -32602, refused
    assert refused["error"]["data"]["detail"].startswith(named), refused
    assert "a part is {kind: data" in refused["error"]["data"]["detail"]  # and what it should be
    assert rpc(notes, "data/reset")["result"] == {}  # still serving


def test_the_data_plane_refuses_no_parts_naming_the_list(notes):
    for params in ({"parts": []}, {}, [1]):
        refused = rpc(notes, "data/add", params)
        assert refused["error"]["code"] == -32602 and "parts" in refused["error"]["data"]["detail"], refused


# -- what we receive: an env server written with the protocol's server SDK --


class Ledger:
    """An env's data plane as the protocol's SDK writes one: data/add and data/get, no data/reset."""

    def __init__(self) -> None:
        self.entries: list[dict[str, Any]] = []

    @add_data
    def load(self, parts: list) -> None:
        for part in parts:
            self.entries += part.data["entries"]

    @get_data
    def export(self) -> list:
        return [
            DataPart(data={"entries": self.entries}),
            FilePart(file=FileWithUri(uri="exports/ledger.csv", mimeType="text/csv")),  # its own format
        ]


@contextlib.contextmanager
def protocol_env(handler: Any, card: dict[str, Any] | None = None) -> Iterator[str]:
    """A ledger env: its card and data plane from the protocol's SDK (its Starlette mount, which needs no
    mcp<2), its tool over MCP from ours; `card`: served instead of the SDK's."""
    from mcp.server import MCPServer
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    mcp = MCPServer("ledger")

    @mcp.tool()
    def balance() -> int:
        """The ledger's balance."""
        return 0

    app = mcp.streamable_http_app()
    AgentEnvStarletteApplication(EnvironmentCard(name="ledger"), handler).add_routes_to_app(app)
    if card is not None:
        app.router.routes.insert(0, Route(CARD, lambda request: JSONResponse(card)))
    with serving(app) as base:
        yield base


async def test_an_env_written_with_the_protocol_sdk_is_read_through_its_card(tmp_path):
    ledger = Ledger()
    with protocol_env(ledger) as url:
        assert httpx.get(f"{url}{CARD}").json()["capabilities"]["operations"] == ["data/add", "data/get"]  # (a thread)
        async with running_gateway(tmp_path / "gw") as (_, _base, admin):
            await admin.put_instance({"id": "l-1", "apps": [{"name": "ledger", "url": url}], **CLERK})
            assert await admin.call_as("l-1", "balance", {}, agent="ann") == {"result": 0}
            entry = {"id": 1, "amount": 5}
            await admin.data("l-1", "data/add", {"parts": [{"kind": "data", "data": {"ledger": {"entries": [entry]}}}]})
            assert ledger.entries == [entry]
            await admin.data("l-1", "data/reset")  # it declares no data/reset: nothing to send it
            assert ledger.entries == [entry]
            got = await admin.data("l-1", "data/get")
            assert got["parts"] == [
                {"kind": "data", "data": {"entries": [entry]}, "metadata": {"agentenv.io/app": "ledger"}}
            ]


async def test_a_card_that_is_no_protocol_card_is_refused_by_name(tmp_path):
    with protocol_env(Ledger(), card={"name": "ledger", "capabilities": {"operations": "data/get"}}) as url:
        async with running_gateway(tmp_path / "gw") as (_, _base, admin):
            with pytest.raises(GatewayRefused) as refused:
                await admin.put_instance({"id": "l-1", "apps": [{"name": "ledger", "url": url}], **CLERK})
    assert "answers /.well-known/agent-env.json with no valid agent-env card" in str(refused.value)
    assert "capabilities.operations" in str(refused.value)
