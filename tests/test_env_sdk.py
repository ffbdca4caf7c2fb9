"""The environment SDK: tools from typed methods, transactions, idempotency, data plane, snapshots."""

from __future__ import annotations

import time
from datetime import UTC, datetime

import pytest

from agent_env.envs import App, Ctx, ToolError, tool
from agent_env.envs.app import ToolArgumentError
from agent_env.envs.app_instance import AppInstance, UnknownTool, load_app_class
from agent_env.envs.builtin.notes import Notes
from agent_env.errors import BadInput

NOW = datetime(2026, 3, 2, 9, 30, tzinfo=UTC)
CTX = Ctx(role="writer", agent="ada", virtual_now=NOW)


@pytest.fixture
def notes(tmp_path):
    inst = AppInstance(Notes, tmp_path / "notes")
    yield inst
    inst.close()


def test_schema_and_descriptions_come_from_the_method():
    spec = Notes.tools["write_note"]
    assert spec.description == "Write a note, replacing any note with the same key."
    assert spec.input_schema["required"] == ["key", "text"]
    assert spec.input_schema["properties"]["key"] == {
        "type": "string",
        "maxLength": 100,
        "description": 'the note\'s name, e.g. "ada"',
    }
    assert spec.input_schema["additionalProperties"] is False
    assert spec.wants_ctx and not spec.read_only
    assert Notes.tools["list_notes"].read_only and Notes.tools["list_notes"].input_schema["properties"] == {}


def test_calls_use_the_virtual_clock_and_caller(notes):
    assert notes.call("write_note", {"key": "ada", "text": "hi"}, CTX) == {
        "key": "ada",
        "updated_at": "2026-03-02T09:30:00Z",
    }
    assert notes.call("read_note", {"key": "ada"}, CTX) == {
        "key": "ada",
        "text": "hi",
        "author": "ada",
        "updated_at": "2026-03-02T09:30:00Z",
    }


def test_argument_errors_name_the_argument(notes):
    with pytest.raises(ToolArgumentError) as e:
        notes.call("write_note", {"key": 3, "txt": "x"}, CTX)
    msg = str(e.value)
    assert "key: Input should be a valid string" in msg
    assert "text: is required" in msg and "txt: is not an argument of this tool" in msg
    with pytest.raises(UnknownTool):
        notes.call("nope", {}, CTX)


def test_a_failing_call_changes_nothing(tmp_path):
    class Flaky(App):
        name = "flaky"
        schema = "CREATE TABLE t (v INTEGER);"

        @tool
        def write_then_fail(self, v: int) -> None:
            """Write, then fail."""
            self.db.execute("INSERT INTO t VALUES (?)", (v,))
            raise ToolError("nope")

    inst = AppInstance(Flaky, tmp_path / "f")
    with pytest.raises(ToolError):
        inst.call("write_then_fail", {"v": 1}, CTX)
    assert inst.export() == {"t": []}


def test_idempotency_key_makes_a_retried_call_take_effect_once(notes):
    keyed = Ctx(role="setup", virtual_now=NOW, idempotency_key="run-1/step-a")
    first = notes.call("write_note", {"key": "k", "text": "one"}, keyed)
    notes.call("write_note", {"key": "k", "text": "changed by someone"}, CTX)
    again = notes.call("write_note", {"key": "k", "text": "one"}, keyed)
    assert again == first
    assert notes.call("read_note", {"key": "k"}, CTX)["text"] == "changed by someone", "the retry did not run again"


def test_data_plane_load_export_reset(notes):
    notes.load({"notes": [{"key": "a", "text": "A", "updated_at": "2026-01-01T00:00:00Z"}]})
    assert notes.export()["notes"][0]["key"] == "a"
    with pytest.raises(ToolError, match="has no table 'nots'"):
        notes.load({"nots": []})
    with pytest.raises(ToolError, match="has no column 'colour'"):
        notes.load({"notes": [{"key": "b", "text": "B", "updated_at": "x", "colour": "red"}]})
    assert len(notes.export()["notes"]) == 1, "a rejected load adds nothing"
    notes.reset()
    assert notes.export() == {"notes": []}


def test_snapshot_restore_fork(notes, tmp_path):
    notes.call("write_note", {"key": "a", "text": "before"}, CTX)
    notes.snapshot(tmp_path / "snap.sqlite")
    notes.call("write_note", {"key": "a", "text": "after"}, CTX)
    notes.call("write_note", {"key": "b", "text": "new"}, CTX)
    forked = notes.fork(tmp_path / "fork")
    notes.restore(tmp_path / "snap.sqlite")
    assert notes.call("list_notes", {}, CTX)["notes"] == {"a": "before"}
    assert forked.call("list_notes", {}, CTX)["notes"] == {"a": "after", "b": "new"}
    forked.close()


def test_state_survives_reopening(tmp_path):
    first = AppInstance(Notes, tmp_path / "n")
    first.call("write_note", {"key": "a", "text": "kept"}, CTX)
    first.close()
    again = AppInstance(Notes, tmp_path / "n")
    assert again.call("read_note", {"key": "a"}, CTX)["text"] == "kept"
    again.close()


def test_new_instances_start_empty_from_the_prepared_file_and_in_wal_mode(tmp_path):
    """New instances are written from one template per schema: each starts empty, whatever another wrote."""
    first = AppInstance(Notes, tmp_path / "a")
    first.call("write_note", {"key": "a", "text": "only here"}, CTX)
    second = AppInstance(Notes, tmp_path / "b")
    try:
        assert second.call("list_notes", {}, CTX)["count"] == 0
        assert second.db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert not list((tmp_path / "b").glob(".*.part")), "the file is made whole, then moved into place"
    finally:
        first.close()
        second.close()


def test_snapshot_and_restore_of_10k_rows_are_cheap(notes, tmp_path):
    notes.load({"notes": [{"key": f"k{i}", "text": "x" * 50, "updated_at": "t"} for i in range(10_000)]})
    t = time.perf_counter()
    notes.snapshot(tmp_path / "big.sqlite")
    notes.restore(tmp_path / "big.sqlite")
    assert time.perf_counter() - t < 5  # a sanity bound; the real figure is in bench/
    assert notes.call("list_notes", {}, CTX)["count"] == 10_000


def test_app_declaration_errors():
    with pytest.raises(TypeError, match="needs a docstring"):

        class NoDoc(App):
            name = "nodoc"

            @tool
            def f(self) -> None:
                pass

    with pytest.raises(TypeError, match="needs a type annotation"):

        class NoType(App):
            name = "notype"

            @tool
            def f(self, x) -> None:
                """F."""

    with pytest.raises(BadInput, match="MODULE:Class"):
        load_app_class("agent_env.envs.builtin.notes")
    with pytest.raises(BadInput, match="not an agent-env App"):
        load_app_class("agent_env.envs.builtin.notes:ToolError")
    assert load_app_class("agent_env.envs.builtin.notes:Notes") is Notes


class Shop(App):
    name = "shop"
    schema = """
    CREATE TABLE orders (id TEXT PRIMARY KEY);
    CREATE TABLE items (id TEXT PRIMARY KEY, order_id TEXT NOT NULL REFERENCES orders(id) DEFERRABLE INITIALLY DEFERRED,
                        qty INTEGER CHECK (qty > 0));
    """

    @tool
    def add_item(self, id: str, order_id: str) -> dict:
        """Add an item to an order."""
        self.db.execute("INSERT INTO items VALUES (?, ?, 1)", (id, order_id))
        return {"id": id}


def test_foreign_keys_work_with_the_default_data_plane(tmp_path):
    shop = AppInstance(Shop, tmp_path / "shop")
    data = {"items": [{"id": "i1", "order_id": "o1", "qty": 1}], "orders": [{"id": "o1"}]}  # children first
    shop.load(data)
    assert shop.export() == {"items": [{"id": "i1", "order_id": "o1", "qty": 1}], "orders": [{"id": "o1"}]}
    shop.reset()  # deletes in whatever order, constraints checked at the end
    shop.load(data)
    with pytest.raises(ToolError, match="breaks a constraint"):
        shop.load({"items": [{"id": "i2", "order_id": "nope", "qty": 1}]})  # fails at COMMIT
    with pytest.raises(ToolError, match=r"shop.items row 0: CHECK constraint failed"):
        shop.load({"items": [{"id": "i3", "order_id": "o1", "qty": 0}]})
    # a failed commit left no transaction open: the instance keeps working
    with pytest.raises(Exception):  # noqa: B017 - the deferred FK fails at COMMIT
        shop.call("add_item", {"id": "i4", "order_id": "missing"}, CTX)
    assert shop.call("add_item", {"id": "i5", "order_id": "o1"}, CTX) == {"id": "i5"}
    shop.close()


def test_stamped_times_are_normalised_to_utc():
    ctx = Ctx.from_meta({"agentenv.io/now": "2026-03-02T11:30:00+02:00"})
    assert ctx.now_iso() == "2026-03-02T09:30:00Z"
