"""The local backends (SQLite documents, file objects, the Docker daemon's images, the secret file) against the
store conformance suite, plus what only the local backends promise."""

from __future__ import annotations

import os
import sys
import threading

import pytest
from store_conformance import *  # noqa: F403 - the suite's tests, collected here against the local backends
from store_conformance import docker_daemon

from agent_env.errors import BadInput
from agent_env.stores.local import FileObjectStore, SqliteDocumentStore
from agent_env.stores.local_images import DockerImageStore
from agent_env.stores.secrets import FileSecretStore


@pytest.fixture
def documents(tmp_path):
    store = SqliteDocumentStore(tmp_path / "docs.sqlite")
    yield store
    store.close()


@pytest.fixture
def objects(tmp_path):
    return FileObjectStore(tmp_path / "objects")


@pytest.fixture
def secrets(tmp_path):
    return FileSecretStore(tmp_path / "home")


@pytest.fixture
def images(image_name):
    client = docker_daemon()
    store = DockerImageStore()
    yield store
    store.close()
    for image in client.images.list(name=f"agentenv/{image_name}"):
        for tag in image.tags:
            if tag.startswith(f"agentenv/{image_name}:"):
                client.images.remove(tag)


def test_local_images_pull_gives_a_tag_the_daemon_holds(images, local_image, image_name):
    client = docker_daemon()
    assert images.push(local_image, image_name, "2") == f"agentenv/{image_name}:2"
    ref = images.pull(image_name, "2")
    assert client.images.get(ref).id == client.images.get(local_image).id


def test_local_images_without_a_daemon_name_the_fix(monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    with pytest.raises(BadInput) as refused:
        DockerImageStore().exists("app", "1")
    assert "Docker daemon" in refused.value.problem and "DOCKER_HOST" in (refused.value.fix or "")


def test_documents_are_shared_across_connections_and_threads(tmp_path):
    path = tmp_path / "shared.sqlite"
    a, b = SqliteDocumentStore(path), SqliteDocumentStore(path)
    threads = [threading.Thread(target=lambda i=i: a.put("c", f"k{i}", {"i": i})) for i in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(b.query("c")) == 20
    assert not b.create("c", "k3", {}) and b.create("c", "k99", {}) and a.get("c", "k99") == {}
    a.close()
    b.close()


def test_objects_never_leave_temp_files_or_write_outside(tmp_path):
    store = FileObjectStore(tmp_path / "objects")
    store.put("a/b", b"1")
    assert not store.create("a/b", b"2")
    with pytest.raises(BadInput):
        store.put("../escape", b"x")
    assert not (tmp_path / "escape").exists()
    assert [p.name for p in (tmp_path / "objects" / "a").iterdir()] == ["b"]


_SCANNED: list[str] | None = None  # the folders os.scandir opens while a test records them (audit hooks stay)


def _record_scandir(event: str, args: tuple) -> None:
    if _SCANNED is not None and event == "os.scandir":
        _SCANNED.append(os.fspath(args[0]))


sys.addaudithook(_record_scandir)


def test_objects_listed_by_prefix_read_only_the_prefix_folder(tmp_path):
    """Every run's objects share the store, and a run lists its own (its env servers, its transcripts) often: a
    list must not walk the whole store, which grows with every run kept."""
    global _SCANNED
    store = FileObjectStore(tmp_path / "objects")
    for run in range(20):
        store.put(f"runs/r{run}/env-servers/a.json", b"{}")
        store.put(f"runs/r{run}/transcripts/t.json", b"{}")
    store.put("other/x", b"1")
    _SCANNED = []
    try:
        assert store.list("runs/r1/env-servers/") == ["runs/r1/env-servers/a.json"]
        by_run = store.list("runs/r1")  # a prefix, not a folder: r10 to r19 too
        assert len(by_run) == 22 and by_run[:3] == [
            "runs/r1/env-servers/a.json",
            "runs/r1/transcripts/t.json",
            "runs/r10/env-servers/a.json",
        ]
        assert store.list("runs/nothing/") == [] and store.list("runs/../other/") == [] and store.list("a//b") == []
        one_run = list(_SCANNED)
    finally:
        _SCANNED = None
    root = tmp_path / "objects"
    assert one_run[0] == str(root / "runs" / "r1" / "env-servers"), one_run
    assert not [p for p in one_run if not p.startswith(str(root / "runs"))], one_run  # never `other/`, nor the root
    assert len(store.list()) == 41 and store.list("other/") == ["other/x"]


def test_documents_found_by_run_id_or_ordered_by_expiry_are_read_through_an_index(tmp_path):
    """A gateway keeps every finished run's instances; a run's end looks its own up, the expiry sweep the few
    that expire: neither may read the whole collection (it would grow with every run served)."""
    store = SqliteDocumentStore(tmp_path / "docs.sqlite")
    for n in range(50):
        store.put("gateway_instances", f"i{n}", {"id": f"i{n}", "run_id": f"r{n // 2}"})
    plans = []
    trace = store._db.set_trace_callback  # the SQL the store runs, then its query plan
    ran: list[str] = []
    trace(ran.append)
    assert [d["id"] for d in store.query("gateway_instances", where={"run_id": "r3"})] == ["i6", "i7"]
    store.page("gateway_instances", order_by="expires_at", descending=True, limit=10)
    trace(None)
    for sql in ran:
        if sql.startswith("SELECT"):
            plans.append(" ".join(row[-1] for row in store._db.execute(f"EXPLAIN QUERY PLAN {sql}")))
    assert "USING INDEX documents_run_id" in plans[0], plans
    assert "USING INDEX documents_expires_at" in plans[1] and "TEMP B-TREE" not in plans[1], plans
