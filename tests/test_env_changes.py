"""changes/v1: an instance's changelog (its apps' row changes, each with who made it), served by a real gateway over
real HTTP and declared on its card; read by the protocol's own client as well as ours."""

from __future__ import annotations

import json
import sqlite3
import tomllib

import httpx2
import pytest
from agentenv_protocol import client as reference_client
from gateway_util import mcp_client, running_gateway, support_data, support_spec
from pydantic import ValidationError
from test_env_extensions import refusing_env

from agent_env.envs import changelog
from agent_env.envs.app import App, ToolError, tool
from agent_env.envs.app_instance import AppInstance
from agent_env.envs.context import Ctx
from agent_env.gateway import extensions
from agent_env.planning.tasks import parse_task
from agent_env.spec.run import RunStatus
from agent_env.step_types import catalog
from agent_env.stores import open_stores
from agent_env.temporal import launch

DESK = "desk-1"


@pytest.fixture
async def desk(tmp_path):
    async with running_gateway(tmp_path / "gw") as (gateway, base, admin):
        await admin.put_instance(support_spec(DESK))
        await admin.data(DESK, "data/add", {"parts": [{"kind": "data", "data": support_data()}]})
        async with httpx2.AsyncClient(base_url=f"{base}/envs/{DESK}", timeout=30) as http:
            yield gateway, base, admin, http


def bearer(token: str | None) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"} if token else {}


def email(to: str, subject: str, body: str) -> dict:
    return {"sender": "support@acme.example", "to": [to], "subject": subject, "body": body}


async def all_changes(http, token: str, after_id: int = 0) -> list[dict]:
    answer = await http.get("/changes", params={"after_id": after_id, "limit": 10_000}, headers=bearer(token))
    assert answer.status_code == 200, answer.text
    assert answer.json()["has_more"] is False
    return answer.json()["changes"]


async def test_the_card_declares_changes_with_the_frameworks_shape(desk):
    gateway, base, admin, http = desk
    card = (await http.get("/.well-known/agent-env.json", headers=bearer(gateway.admin_token))).json()
    op = reference_client.find_extension_method(card, extensions.CHANGES, "get")
    assert op == {
        "method": "GET",
        "endpoint": "/changes",
        "request": {
            "type": "object",
            "properties": {
                "after_id": {"type": "integer", "minimum": 0},
                "limit": {"type": "integer", "minimum": 1, "maximum": 10_000},
            },
        },
    }
    assert reference_client.find_extension(card, extensions.CHANGES)["required"] is False


async def test_a_tool_calls_changes_show_its_role_agent_and_tool(desk):
    gateway, base, admin, http = desk
    loaded = await all_changes(http, gateway.admin_token)
    assert loaded and all(c["actors"] == [{"kind": "data_plane", "operation": "load"}] for c in loaded)
    last = loaded[-1]["id"]

    sam = await admin.token(DESK, "sam")
    async with mcp_client(base, DESK, sam) as mcp:
        sent = await mcp.call_tool("send_email", email("ana@example.com", "Hi", "Refund soon"))
        assert not sent.is_error, sent.content
        await mcp.call_tool("list_tickets", {})  # reads write nothing
    made = await all_changes(http, gateway.admin_token, last)
    assert made, "sending an email changes the mail app"
    assert {(c["schema_name"], c["operation"]) for c in made} >= {("mail", "INSERT")}
    for change in made:
        assert change["actors"] == [
            {"kind": "tool_call", "tool": "send_email", "role": "support", "agent": "sam", "via": "mcp"}
        ]
    sent_row = next(c for c in made if c["schema_name"] == "mail" and c["operation"] == "INSERT")
    assert "ana@example.com" in sent_row["summary"] or "Hi" in sent_row["summary"]
    assert sent_row["virtual_time"] == "2026-02-16T09:30:00Z", "the world's time of the call"
    state = (await http.get("/state", headers=bearer(gateway.admin_token))).json()
    assert state["changelog_id"] == made[-1]["id"]


async def test_a_trigger_actions_changes_name_the_trigger(desk):
    """The run calls a tool for a trigger's action as the world's activity does: cause and idempotency key."""
    gateway, base, admin, http = desk
    last = (await all_changes(http, gateway.admin_token))[-1]["id"]
    outcome = await admin.call_as(
        DESK,
        "send_email",
        email("dana@example.com", "Re: order", "On its way"),
        role="support",
        idempotency_key="run-1/world/7/2",
        cause="trigger dana_replies",
    )
    assert "result" in outcome, outcome
    made = await all_changes(http, gateway.admin_token, last)
    assert made and all(
        c["actors"]
        == [
            {
                "kind": "trigger_action",
                "trigger_id": "dana_replies",
                "firing": 7,
                "action_index": 2,
                "tool": "send_email",
                "role": "support",
                "agent": None,
            }
        ]
        for c in made
    )
    # the run's own call for a step is a tool call with its cause
    await admin.call_as(DESK, "send_email", email("x@example.com", "s", "b"), role="support", cause="step notify")
    step_made = await all_changes(http, gateway.admin_token, made[-1]["id"])
    assert step_made[0]["actors"][0] == {
        "kind": "tool_call",
        "tool": "send_email",
        "role": "support",
        "agent": None,
        "via": "run",
        "cause": "step notify",
    }


async def test_pages_follow_after_id_and_every_row_comes_once(desk):
    gateway, base, admin, http = desk
    everything = await all_changes(http, gateway.admin_token)
    assert len(everything) > 5
    ids = [c["id"] for c in everything]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    assert {c["schema_name"] for c in everything} == {"mail", "helpdesk", "billing"}, "one sequence for all apps"
    paged, after = [], 0
    while True:
        page = (
            await http.get("/changes", params={"after_id": after, "limit": 3}, headers=bearer(gateway.admin_token))
        ).json()
        assert len(page["changes"]) <= 3
        paged += page["changes"]
        if not page["has_more"]:
            break
        after = page["changes"][-1]["id"]
    assert paged == everything
    for params in ({"after_id": -1}, {"limit": 0}, {"limit": 10_001}, {"after_id": "x"}):
        answer = await http.get("/changes", params=params, headers=bearer(gateway.admin_token))
        assert answer.status_code == 400 and "after_id" in answer.json()["error"], params


async def test_changes_are_the_operators_read(desk):
    gateway, base, admin, http = desk
    sam = await admin.token(DESK, "sam")
    for token in (None, sam, "aea_forged"):
        answer = await http.get("/changes", headers=bearer(token))
        assert answer.status_code in (401, 403) and "changes" not in answer.json(), token
    with pytest.raises(reference_client.ExtensionCallError) as refused:  # the reference client sends no credential
        card = (await http.get("/.well-known/agent-env.json", headers=bearer(gateway.admin_token))).json()
        await reference_client.invoke_extension(f"{base}/envs/{DESK}", card, extensions.CHANGES, method="get")
    assert refused.value.response.status_code == 401


async def test_the_protocols_client_finds_the_changes_and_pages_them_as_the_framework_does(desk):
    """The reference client reads the method off our card; the framework's capture loop (snapshot_env's: after_id,
    its page size, has_more; counting rows with one actor as attributed) reads every row, given the admin token."""
    gateway, base, admin, http = desk
    card = (await http.get("/.well-known/agent-env.json", headers=bearer(gateway.admin_token))).json()
    op = reference_client.find_extension_method(card, extensions.CHANGES, "get")
    rows, after_id, has_more = [], 0, True
    async with httpx2.AsyncClient(headers=bearer(gateway.admin_token)) as client:
        while has_more:
            answer = await client.request(
                op["method"], f"{base}/envs/{DESK}{op['endpoint']}", params={"after_id": after_id, "limit": 10_000}
            )
            answer.raise_for_status()
            page = answer.json()
            rows += page["changes"]
            after_id = page["changes"][-1]["id"] if page["changes"] else after_id
            has_more = page["has_more"]
    assert rows == await all_changes(http, gateway.admin_token)
    assert sum(len(c["actors"]) == 1 for c in rows) == len(rows), "each row written by exactly one transaction"
    for row in rows:
        assert set(row) >= {"id", "timestamp", "schema_name", "table_name", "operation", "row_id", "summary"}
        assert set(row) >= {"changed_fields", "actors"} and row["operation"] in ("INSERT", "UPDATE", "DELETE")


async def test_the_changelog_keeps_its_last_rows_within_its_bounds(tmp_path, monkeypatch):
    monkeypatch.setattr(changelog, "KEEP", 5)  # an instance serves, and its apps keep, its last 5 ids
    async with running_gateway(tmp_path / "gw") as (gateway, base, admin):
        await admin.put_instance(support_spec(DESK))
        await admin.data(DESK, "data/add", {"parts": [{"kind": "data", "data": support_data()}]})
        sam = await admin.token(DESK, "sam")
        async with mcp_client(base, DESK, sam) as mcp:
            for i in range(4):
                sent = await mcp.call_tool("send_email", email("a@example.com", f"s{i}", "x" * 40_000))
                assert not sent.is_error, sent.content
        async with httpx2.AsyncClient(base_url=f"{base}/envs/{DESK}", timeout=30) as http:
            served = await all_changes(http, gateway.admin_token)
            last = (await http.get("/state", headers=bearer(gateway.admin_token))).json()["changelog_id"]
    assert last > 5 and [c["id"] for c in served] == list(range(last - 4, last + 1))
    for change in served:  # a 40 kB body is recorded clipped
        assert len(json.dumps(change["changed_fields"]).encode()) <= changelog.FIELDS_BYTES + 256
    for app in ("mail", "helpdesk", "billing"):  # and on disk each app holds at most 5 (pruned as it writes)
        db = sqlite3.connect(tmp_path / "gw" / "instances" / DESK / "apps" / app / "app.sqlite")
        try:
            (kept,) = db.execute(f"SELECT COUNT(*) FROM {changelog.TABLE}").fetchone()
        finally:
            db.close()
        assert kept <= 5, (app, kept)


async def test_who_made_each_change_outlives_a_restart_and_ids_keep_rising_past_a_restore(tmp_path):
    """The actors are kept with the rows, in the apps' files: a restarted gateway serves them as they were."""
    async with running_gateway(tmp_path / "gw") as (gateway, base, admin):
        await admin.put_instance(support_spec(DESK))
        await admin.data(DESK, "data/add", {"parts": [{"kind": "data", "data": support_data()}]})
        saved = await admin.snapshot(DESK)
        sam = await admin.token(DESK, "sam")
        async with mcp_client(base, DESK, sam) as mcp:
            await mcp.call_tool("send_email", email("ana@example.com", "Hi", "Before the restart"))
        async with httpx2.AsyncClient(base_url=f"{base}/envs/{DESK}", timeout=30) as http:
            before = await all_changes(http, gateway.admin_token)
    async with running_gateway(tmp_path / "gw") as (gateway, base, admin):
        async with httpx2.AsyncClient(base_url=f"{base}/envs/{DESK}", timeout=30) as http:
            assert await all_changes(http, gateway.admin_token) == before
            await admin.restore(DESK, saved)  # the files as they were: rows up to the snapshot
            await admin.call_as(DESK, "send_email", email("bo@example.com", "s", "b"), role="support")
            after = await all_changes(http, gateway.admin_token)
    assert after[-1]["id"] > before[-1]["id"], "an id is never given twice, restores or not"
    assert after[-1]["actors"][0]["via"] == "run"


async def test_an_instance_whose_apps_keep_no_changelog_declares_none(tmp_path):
    """Apps at URLs keep their own state: the instance neither declares changes/v1 nor pretends to have changes."""
    async with running_gateway(tmp_path / "gw") as (gateway, base, admin):
        with refusing_env() as url:
            await admin.put_instance({"id": "far", "apps": [{"name": "stubborn", "url": url}], "roles": {"agent": {}}})
            async with httpx2.AsyncClient(base_url=f"{base}/envs/far", timeout=30) as http:
                card = (await http.get("/.well-known/agent-env.json", headers=bearer(gateway.admin_token))).json()
                assert reference_client.find_extension(card, extensions.CHANGES) is None
                answer = await http.get("/changes", headers=bearer(gateway.admin_token))
                assert answer.status_code == 404 and "keeps no changelog" in answer.json()["error"]
                state = (await http.get("/state", headers=bearer(gateway.admin_token))).json()
                assert state["changelog_id"] is None


class Ledger(App):
    name = "ledger"
    schema = "CREATE TABLE entries (id TEXT PRIMARY KEY, amount INTEGER NOT NULL, blob BLOB)"

    @tool
    def post(self, ctx: Ctx, id: str, amount: int, fail: bool = False) -> dict:
        """Post an entry (or set its amount), failing after the write when told to."""
        self.db.execute(
            "INSERT INTO entries VALUES (?, ?, x'00ff') ON CONFLICT(id) DO UPDATE SET amount = excluded.amount",
            (id, amount),
        )
        if fail:
            raise ToolError("refused after writing")
        return {"id": id}


def test_a_rolled_back_call_and_an_update_that_changes_nothing_leave_no_row(tmp_path):
    app = AppInstance(Ledger, tmp_path / "ledger")
    ctx = Ctx(role="clerk", agent="kim", actor={"kind": "tool_call", "tool": "post", "role": "clerk"})
    try:
        app.call("post", {"id": "E1", "amount": 5}, ctx)
        with pytest.raises(ToolError):
            app.call("post", {"id": "E2", "amount": 7, "fail": True}, ctx)  # its write is rolled back, row and all
        app.call("post", {"id": "E1", "amount": 5}, ctx)  # the same amount: no change
        app.call("post", {"id": "E1", "amount": 6}, ctx)
    finally:
        app.close()
    rows = changelog.read(app.path, "ledger", 0, 100)
    assert [(r["row_id"], r["operation"], r["summary"]) for r in rows] == [
        ("E1", "INSERT", 'Inserted: {"id": "E1", "amount": 5, "blob": "<2 bytes>"}'),
        ("E1", "UPDATE", "amount: '5' -> '6'"),
    ]
    assert rows[1]["changed_fields"] == {"amount": {"old": 5, "new": 6}}


# -- in a run: a trigger's action, a step's call, and snapshot_env keeping the changelog --

CHANGES_RUN = """
id = "changes"
[clock]
start = "2026-07-01T00:00:00Z"
mode = "frozen"

[[triggers]]
id = "at_one"
when = { type = "time", at = "+1h" }
actions = [{ type = "call_tool", env = "pad", tool = "write_note", arguments = { key = "one", text = "${clock.now}" } }]

[[steps]]
id = "pad"
type = "deploy_env"
config = { env_id = "notes" }

[[steps]]
id = "rules"
type = "register_env_triggers"
depends_on = ["pad"]

[[steps]]
id = "jump"
type = "sync_env_clock"
depends_on = ["rules"]
config = { time = "+2h" }

[[steps]]
id = "write"
type = "call_tool"
depends_on = ["jump"]
config = { env = "pad", tool = "write_note", arguments = { key = "two", text = "by a step" } }

[[steps]]
id = "saved"
type = "snapshot_env"
depends_on = ["write"]
config = { env = "pad", include_env_changes = true }
"""


async def test_snapshot_env_keeps_the_runs_changes_with_who_made_them(client, settings, worker):
    handle = await launch.start_run(client, settings, parse_task(tomllib.loads(CHANGES_RUN), "t"))
    state = await launch.wait_result(handle)
    assert state.status is RunStatus.PASSED, state
    entry = state.steps["saved"].outputs["env_changes"]
    assert "error" not in entry, entry
    key = f"runs/{state.run_id}/snapshots/saved.changes.jsonl"
    assert entry["object_key"] == key and entry["capture_step_id"] == "saved"
    assert entry["change_count"] == entry["attributed_count"] == 2 and entry["ambiguous_count"] == 0
    rows = [json.loads(line) for line in open_stores(settings).objects.get(key).decode().splitlines()]
    fired = next(e.seq for e in state.world.events if e.kind == "fired" and e.trigger == "at_one")
    firing = next(e.firing for e in state.world.events if e.kind == "action" and e.trigger == "at_one")
    assert firing == fired, "the firing is the world's event of the trigger's fire"
    assert sorted((r["row_id"], r["operation"], r["actors"]) for r in rows) == [
        (
            "one",
            "INSERT",
            [
                {
                    "kind": "trigger_action",
                    "trigger_id": "at_one",
                    "firing": firing,
                    "action_index": 0,
                    "tool": "write_note",
                    "role": rows[0]["actors"][0]["role"],
                    "agent": None,
                }
            ],
        ),
        (
            "two",
            "INSERT",
            [
                {
                    "kind": "tool_call",
                    "tool": "write_note",
                    "role": rows[1]["actors"][0]["role"],
                    "agent": rows[1]["actors"][0]["agent"],
                    "via": "run",
                }
            ],
        ),
    ]
    assert rows[0]["virtual_time"] == rows[0]["changed_fields"]["updated_at"], "the world's time of the write"


# -- the framework's other fields of snapshot_env: the instance by its id, its trajectory, the export's time --

BY_INSTANCE = (
    CHANGES_RUN
    + """
[[steps]]
id = "by_instance"
type = "snapshot_env"
depends_on = ["saved"]
config = { env_instance_id = "${run.id}.pad", include_env_trajectory = true, export_timeout_seconds = 60 }

[[steps]]
id = "foreign"
type = "snapshot_env"
depends_on = ["saved"]
on_failure = "continue"
config = { env_instance_id = "another-run.pad" }
"""
)


async def test_snapshot_env_takes_this_runs_instance_by_id_and_keeps_its_trajectory(client, settings, worker):
    handle = await launch.start_run(client, settings, parse_task(tomllib.loads(BY_INSTANCE), "t"))
    state = await launch.wait_result(handle)
    taken = state.steps["by_instance"]
    assert taken.status.value == "succeeded", taken.error or state.error
    assert taken.outputs["snapshot"] == f"runs/{state.run_id}/snapshots/by_instance.tar"
    entry = taken.outputs["env_trajectory"]
    key = f"runs/{state.run_id}/snapshots/by_instance.trajectory.jsonl"
    assert entry["object_key"] == key and entry["capture_step_id"] == "by_instance", entry
    calls = [json.loads(line) for line in open_stores(settings).objects.get(key).decode().splitlines()]
    assert len(calls) == entry["event_count"] >= 2
    assert "write_note" in json.dumps(calls), "the step's and the trigger's calls are in it"
    foreign = state.steps["foreign"]
    assert foreign.status.value == "failed" and "is no env instance of this run" in foreign.error


def test_snapshot_env_names_its_env_once():
    with pytest.raises(ValidationError, match="give `env`"):
        catalog.get("snapshot_env").config.model_validate({"env": "pad", "env_instance_id": "r.pad"})
    with pytest.raises(ValidationError, match="export_timeout_seconds"):
        catalog.get("snapshot_env").config.model_validate({"env": "pad", "export_timeout_seconds": 3600})
