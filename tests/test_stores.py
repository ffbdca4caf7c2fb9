from __future__ import annotations

import threading

import pytest

from agentenv.errors import BadInput, NotFound
from agentenv.stores.local import FileObjectStore, SqliteDocumentStore


@pytest.fixture
def docs(tmp_path):
    store = SqliteDocumentStore(tmp_path / "docs.sqlite")
    yield store
    store.close()


def test_documents_upsert_get_delete(docs):
    docs.put("runs", "r1", {"status": "running", "n": 1})
    docs.put("runs", "r1", {"status": "passed", "n": 2})
    assert docs.get("runs", "r1") == {"status": "passed", "n": 2}
    assert docs.get("runs", "nope") is None
    assert docs.get("other", "r1") is None
    assert docs.delete("runs", "r1") and not docs.delete("runs", "r1")


def test_documents_query_filters_orders_and_limits(docs):
    for i, status in enumerate(["passed", "failed", "passed", "passed"]):
        docs.put("runs", f"run-{i}", {"run_id": f"run-{i}", "status": status, "at": i})
    passed = docs.query("runs", where={"status": "passed"}, order_by="at", descending=True)
    assert [d["run_id"] for d in passed] == ["run-3", "run-2", "run-0"]
    assert [d["run_id"] for d in docs.query("runs", order_by="at", limit=2)] == ["run-0", "run-1"]
    assert [d["run_id"] for d in docs.query("runs", key_prefix="run-1")] == ["run-1"]


def test_documents_reject_injection_in_names(docs):
    with pytest.raises(ValueError):
        docs.query("runs", where={"status') = 1 OR (1": "x"})
    with pytest.raises(ValueError):
        docs.put("Runs; DROP", "k", {})


def test_documents_are_shared_across_connections_and_threads(tmp_path):
    path = tmp_path / "shared.sqlite"
    a, b = SqliteDocumentStore(path), SqliteDocumentStore(path)
    threads = [threading.Thread(target=lambda i=i: a.put("c", f"k{i}", {"i": i})) for i in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(b.query("c")) == 20


def test_objects_round_trip_and_list(tmp_path):
    store = FileObjectStore(tmp_path / "objects")
    store.put("runs/r1/a.json", b"{}")
    store.put("runs/r1/b.bin", b"\x00\x01")
    store.put("runs/r2/a.json", b"[]")
    assert store.get("runs/r1/b.bin") == b"\x00\x01"
    assert store.list("runs/r1/") == ["runs/r1/a.json", "runs/r1/b.bin"]
    assert store.exists("runs/r2/a.json") and store.delete("runs/r2/a.json") and not store.exists("runs/r2/a.json")
    with pytest.raises(NotFound):
        store.get("runs/r2/a.json")


@pytest.mark.parametrize("key", ["../escape", "/etc/passwd", "a/../../b", "a//b", "a\\b", "", "./a", "a/\x00"])
def test_object_keys_cannot_escape_the_root(tmp_path, key):
    store = FileObjectStore(tmp_path / "objects")
    with pytest.raises(BadInput):
        store.put(key, b"x")
    assert not (tmp_path / "escape").exists()
