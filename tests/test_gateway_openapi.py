"""The gateway's OpenAPI documents: the admin API's (admin token only) and each instance's REST tools
(role token; the caller's role's tools only). Nothing documents the gateway without a token."""

from __future__ import annotations

import gc
import json

import httpx2
import pytest
from gateway_util import running_gateway, support_data, support_spec

from agent_env.gateway import routes_agents


@pytest.fixture
async def desk(tmp_path):
    async with running_gateway(tmp_path / "gw") as (gateway, base, admin):
        await admin.put_instance(support_spec())
        await admin.data("desk-1", "data/add", {"parts": [{"kind": "data", "data": support_data()}]})
        tokens = {agent: await admin.token("desk-1", agent) for agent in ("sam", "lee")}
        async with httpx2.AsyncClient(base_url=base, timeout=30) as http:
            yield gateway, http, admin, tokens


def bearer(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


def unresolved_refs(doc: dict) -> list[str]:
    """Every `$ref` of `doc` that does not point into the document itself."""
    refs: list[str] = []

    def walk(node):
        if isinstance(node, dict):
            if isinstance(node.get("$ref"), str):
                refs.append(node["$ref"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(doc)
    missing = []
    for ref in refs:
        target = doc
        for part in ref.removeprefix("#/").split("/"):
            target = target.get(part) if isinstance(target, dict) else None
        if not ref.startswith("#/") or target is None:
            missing.append(ref)
    return missing


async def test_the_admin_api_document_needs_the_admin_token(desk):
    gateway, http, admin, tokens = desk
    answer = await http.get("/admin/openapi.json", headers=bearer(gateway.admin_token))
    assert answer.status_code == 200, answer.text
    doc = answer.json()
    assert doc["openapi"].startswith("3.")
    paths = doc["paths"]
    assert set(paths["/admin/instances/{instance}"]) == {"get", "put", "delete"}
    assert set(paths["/admin/instances/{instance}/roles/{role}"]) == {"put", "patch"}
    assert "post" in paths["/envs/{instance}/agentenv"], "the data plane is the run's too"
    body = paths["/admin/instances/{instance}/call"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert body == {"$ref": "#/components/schemas/CallRequest"}
    assert "tool" in doc["components"]["schemas"]["CallRequest"]["properties"]
    assert unresolved_refs(doc) == []
    assert not any(p.startswith("/envs/{instance}/tools") or p.endswith("/mcp") for p in paths), "agents' routes"
    assert "/admin/openapi.json" not in paths

    for headers in ({}, bearer(tokens["lee"]), bearer("aea_not-the-admin-token")):
        refused = await http.get("/admin/openapi.json", headers=headers)
        assert refused.status_code == 401, refused.text
        assert refused.json() == {"error": "this needs the gateway's admin token"}


async def test_no_public_docs(desk):
    gateway, http, admin, tokens = desk
    for path in ("/docs", "/redoc", "/openapi.json", "/docs/oauth2-redirect"):
        for headers in ({}, bearer(gateway.admin_token)):
            assert (await http.get(path, headers=headers)).status_code == 404, path


async def test_the_tools_document_lists_the_callers_tools_only(desk):
    gateway, http, admin, tokens = desk
    for agent, token in tokens.items():
        answer = await http.get("/envs/desk-1/openapi.json", headers=bearer(token))
        assert answer.status_code == 200, answer.text
        doc = answer.json()
        listed = (await http.get("/envs/desk-1/tools", headers=bearer(token))).json()["tools"]
        assert set(doc["paths"]) == {f"/envs/desk-1/tools/{t['name']}" for t in listed}, agent
        for tool in listed:
            operation = doc["paths"][f"/envs/desk-1/tools/{tool['name']}"]["post"]
            assert operation["requestBody"]["content"]["application/json"]["schema"] == tool["inputSchema"]
            assert operation["operationId"] == tool["name"]
        assert unresolved_refs(doc) == []
    lee = (await http.get("/envs/desk-1/openapi.json", headers=bearer(tokens["lee"]))).json()
    sam = (await http.get("/envs/desk-1/openapi.json", headers=bearer(tokens["sam"]))).json()
    assert "/envs/desk-1/tools/verify_order" in lee["paths"] and "/envs/desk-1/tools/verify_order" not in sam["paths"]

    # what the document says is what the gateway takes
    called = await http.post(
        "/envs/desk-1/tools/get_order", json={"order_id": "ORD-1001"}, headers=bearer(tokens["lee"])
    )
    assert called.status_code == 200 and called.json()["result"]["id"] == "ORD-1001"


async def test_the_tools_document_needs_a_role_token_of_the_instance(desk):
    gateway, http, admin, tokens = desk
    missing = await http.get("/envs/desk-1/openapi.json")
    assert missing.status_code == 401 and "missing role token" in missing.json()["error"]
    wrong = await http.get("/envs/desk-1/openapi.json", headers=bearer("aet_forged"))
    assert wrong.status_code == 403
    await admin.put_instance(support_spec("desk-2"))
    other = await http.get("/envs/desk-2/openapi.json", headers=bearer(tokens["lee"]))
    assert other.status_code == 403, "a token of desk-1 reads nothing of desk-2"


async def test_the_tools_document_follows_role_changes_and_ends_with_the_run(desk):
    gateway, http, admin, tokens = desk
    first = await http.get("/envs/desk-1/openapi.json", headers=bearer(tokens["lee"]))
    again = await http.get("/envs/desk-1/openapi.json", headers=bearer(tokens["lee"]))
    assert first.content == again.content
    cached = routes_agents._documents[gateway._instances["desk-1"]]["billing_lead"][1]
    await http.get("/envs/desk-1/openapi.json", headers=bearer(tokens["lee"]))
    assert routes_agents._documents[gateway._instances["desk-1"]]["billing_lead"][1] is cached, "built once"

    await admin.change_role("desk-1", "billing_lead", enable=[], disable=["verify_order"])
    changed = (await http.get("/envs/desk-1/openapi.json", headers=bearer(tokens["lee"]))).json()
    assert "/envs/desk-1/tools/verify_order" not in changed["paths"]
    assert "/envs/desk-1/tools/get_order" in changed["paths"]

    await admin.end_run("run-1")
    gc.collect()
    assert not any(inst.spec.id == "desk-1" for inst in routes_agents._documents.keys()), "held past the run"


def test_schema_definitions_move_into_the_components():
    schema = {
        "type": "object",
        "properties": {"items": {"type": "array", "items": {"$ref": "#/$defs/Item"}}},
        "$defs": {"Item": {"type": "object", "properties": {"sku": {"type": "string"}}}},
    }
    components: dict = {}
    moved = routes_agents._hoisted(schema, "order", components)
    assert "$defs" not in moved and "$defs" in schema, "the tool's own schema is left as it is"
    assert moved["properties"]["items"]["items"] == {"$ref": "#/components/schemas/order.Item"}
    assert components == {"order.Item": schema["$defs"]["Item"]}
    assert json.dumps(routes_agents._hoisted({"type": "object"}, "x", components)) == '{"type": "object"}'


async def test_the_admin_api_document_describes_its_answers_and_the_gateway_gives_them(desk):
    """The answers are documented (the shapes the clients parse, `gateway_client.wire`), and what the gateway
    sends has every field its document requires."""
    gateway, http, admin, tokens = desk
    doc = (await http.get("/admin/openapi.json", headers=bearer(gateway.admin_token))).json()
    schemas = doc["components"]["schemas"]

    def answer_schema(path: str, method: str) -> dict:
        schema = doc["paths"][path][method]["responses"]["200"]["content"]["application/json"]["schema"]
        return schemas[schema["$ref"].rsplit("/", 1)[-1]] if "$ref" in schema else schema

    described = answer_schema("/admin/instances/{instance}", "get")
    assert {"id", "apps", "agents", "roles", "paths"} <= set(described["required"])
    sent = (await http.get("/admin/instances/desk-1", headers=bearer(gateway.admin_token))).json()
    assert set(described["required"]) <= set(sent)
    load = answer_schema("/admin/load", "get")
    assert set(load["required"]) == {"instances", "agents", "run_instances"}
    call = answer_schema("/admin/instances/{instance}/call", "post")
    assert {"result", "error", "refused", "hits"} <= set(call["properties"])
    for path, method in [
        ("/admin/instances/{instance}/world", "put"),
        ("/admin/instances/{instance}/trajectory", "get"),
        ("/admin/runs/{run_id}/end", "post"),
        ("/admin/instances/{instance}/tokens/{agent}", "get"),
    ]:
        assert answer_schema(path, method).get("properties"), f"{method} {path}: its answer is not documented"
    assert unresolved_refs(doc) == []
