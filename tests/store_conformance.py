"""The contract every store backend keeps: one suite, run against each backend by its own test file.

How a backend's test file plugs in (tests/test_stores_local.py is the model):

    from store_conformance import *  # noqa: F403 - the suite's test functions, collected in this module

    @pytest.fixture
    def documents(): ...   # a fresh, empty DocumentStore (close it after the test)
    @pytest.fixture
    def objects(): ...     # a fresh, empty ObjectStore
    @pytest.fixture
    def secrets(): ...     # a fresh, empty SecretStore
    @pytest.fixture
    def images(): ...      # an ImageStore, or pytest.skip("... needs <the missing capability>")
    @pytest.fixture
    def local_image(): ... # the reference of a small image in the local Docker daemon, for `images.push`

The image tests push only to the name the `image_name` fixture gives (request it to clean up after them).

Optional: override `max_stream_memory` (bytes that `put_file`/`get_file` of a 20 MiB file may allocate at
peak, measured with tracemalloc; 8 MiB unless overridden) if the backend's SDK buffers more by design.
A backend with only some kinds imports only those tests, e.g. every `test_documents_*` name.
`tests/` is on sys.path under pytest's default import mode, so `store_conformance` imports as a module.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import os
import tarfile
import threading
import tracemalloc
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from agent_env.errors import BadInput, NotFound
from agent_env.stores import QueryBuilder
from agent_env.stores.base import MissingSecret

__all__ = [
    "docker_daemon",
    "local_image",
    "image_name",
    "max_stream_memory",
    "test_documents_round_trip",
    "test_documents_create_only_when_absent",
    "test_documents_racing_creates_have_one_winner",
    "test_documents_query_filters_on_dotted_fields",
    "test_documents_query_orders_limits_and_prefixes",
    "test_documents_query_orders_missing_fields_first_and_ties_by_key",
    "test_documents_pages_concatenate_to_the_query",
    "test_documents_bad_cursors_are_refused",
    "test_documents_query_builder_is_the_query",
    "test_documents_reject_injection_in_names",
    "test_objects_round_trip_and_overwrite",
    "test_objects_create_only_when_absent",
    "test_objects_racing_creates_have_one_winner",
    "test_objects_missing_keys",
    "test_objects_list_by_prefix_sorted",
    "test_objects_keys_cannot_escape",
    "test_objects_large_files_are_streamed",
    "test_objects_get_file_of_a_missing_key_leaves_the_file",
    "test_images_push_pull_and_versions",
    "test_images_missing_and_invalid",
    "test_secrets_set_get_delete_names",
    "test_secrets_missing_names_the_fix",
    "test_secrets_environment_overrides",
    "test_secrets_invalid_names_are_refused",
]

MiB = 1 << 20


def docker_daemon():
    """A client of the local Docker daemon; without one the image tests skip, naming why (CI, which sets
    AGENT_ENV_REQUIRE_DOCKER=1, fails instead)."""
    try:
        import docker

        client = docker.from_env()
        client.ping()
        return client
    except Exception as e:  # noqa: BLE001 - any reason means: no daemon to test against
        if os.environ.get("AGENT_ENV_REQUIRE_DOCKER"):
            raise
        pytest.skip(f"the image store tests need a reachable Docker daemon (run scripts/docker-setup): {e}")


@pytest.fixture(scope="session")
def local_image():
    """A tiny image built FROM scratch (no network needed), to push."""
    client = docker_daemon()
    context = io.BytesIO()
    with tarfile.open(fileobj=context, mode="w") as tar:
        for name, data in [("Dockerfile", b"FROM scratch\nCOPY hello.txt /hello.txt\n"), ("hello.txt", b"hi\n")]:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    context.seek(0)
    client.images.build(fileobj=context, custom_context=True, tag="agentenv-tests/tiny:latest", rm=True)
    return "agentenv-tests/tiny:latest"


@pytest.fixture
def max_stream_memory() -> int:
    return 8 * MiB


@pytest.fixture
def image_name() -> str:
    """The image name the image tests push to, unique per test (a backend's fixtures may clean it up)."""
    return f"conformance/app-{uuid.uuid4().hex[:12]}"


def race(n: int, attempt: Callable[[int], bool]) -> list[bool]:
    """Run `attempt(i)` in n threads released together; their results, by i."""
    barrier, results = threading.Barrier(n), [False] * n

    def run(i: int) -> None:
        barrier.wait()
        results[i] = attempt(i)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


# Documents


def test_documents_round_trip(documents):
    doc = {"status": "running", "n": 1, "nested": {"list": [1, "two", None], "ok": True}, "pi": 3.5}
    documents.put("runs", "r1", doc)
    assert documents.get("runs", "r1") == doc
    documents.put("runs", "r1", {"status": "passed"})  # upsert replaces the whole document
    assert documents.get("runs", "r1") == {"status": "passed"}
    assert documents.get("runs", "nope") is None
    assert documents.get("other", "r1") is None  # collections are apart
    assert documents.delete("runs", "r1") and not documents.delete("runs", "r1")
    assert documents.get("runs", "r1") is None


def test_documents_create_only_when_absent(documents):
    assert documents.create("envs", "hello@1", {"v": 1})
    assert not documents.create("envs", "hello@1", {"v": 2})
    assert documents.get("envs", "hello@1") == {"v": 1}  # the loser changed nothing
    assert documents.create("other", "hello@1", {"v": 3})  # the same key in another collection
    documents.delete("envs", "hello@1")
    assert documents.create("envs", "hello@1", {"v": 4})


def test_documents_racing_creates_have_one_winner(documents):
    won = race(8, lambda i: documents.create("envs", "raced", {"writer": i}))
    assert won.count(True) == 1
    assert documents.get("envs", "raced") == {"writer": won.index(True)}


def _fill(documents) -> None:
    rows = [
        ("run-0", {"status": "passed", "at": 0, "meta": {"owner": "ann", "size": 3}}),
        ("run-1", {"status": "failed", "at": 1, "meta": {"owner": "bob", "size": 1}}),
        ("run-2", {"status": "passed", "at": 2, "meta": {"owner": "bob", "size": 2}}),
        ("run-3", {"status": "passed", "at": 3, "meta": {"owner": "ann"}}),
        ("job-4", {"status": "passed", "at": 4, "meta": {"owner": "ann", "size": 2}}),
    ]
    for key, doc in rows:
        documents.put("runs", key, {"id": key, **doc})
    documents.put("other", "run-9", {"id": "run-9", "status": "passed", "at": 9})


def _ids(docs: list[dict[str, Any]]) -> list[str]:
    return [d["id"] for d in docs]


def test_documents_query_filters_on_dotted_fields(documents):
    _fill(documents)
    assert _ids(documents.query("runs", where={"status": "passed"})) == ["job-4", "run-0", "run-2", "run-3"]
    assert _ids(documents.query("runs", where={"meta.owner": "bob"})) == ["run-1", "run-2"]
    assert _ids(documents.query("runs", where={"meta.owner": "ann", "meta.size": 2})) == ["job-4"]
    assert documents.query("runs", where={"status": "unknown"}) == []
    assert documents.query("runs", where={"meta.owner.deeper": "ann"}) == []
    assert documents.query("empty") == []


def test_documents_query_orders_limits_and_prefixes(documents):
    _fill(documents)
    passed = documents.query("runs", where={"status": "passed"}, order_by="at", descending=True)
    assert _ids(passed) == ["job-4", "run-3", "run-2", "run-0"]
    assert _ids(documents.query("runs", order_by="at", limit=2)) == ["run-0", "run-1"]
    assert _ids(documents.query("runs", key_prefix="run-1")) == ["run-1"]
    assert _ids(documents.query("runs", key_prefix="run-", order_by="at", descending=True, limit=3)) == [
        "run-3",
        "run-2",
        "run-1",
    ]
    assert _ids(documents.query("runs", key_prefix="nothing")) == []
    assert _ids(documents.query("runs")) == ["job-4", "run-0", "run-1", "run-2", "run-3"]  # key order
    assert _ids(documents.query("runs", descending=True, limit=2)) == ["run-3", "run-2"]


def test_documents_query_orders_missing_fields_first_and_ties_by_key(documents):
    _fill(documents)
    by_size = documents.query("runs", order_by="meta.size")
    assert _ids(by_size) == ["run-3", "run-1", "job-4", "run-2", "run-0"]  # no size first; 2s by key
    assert _ids(documents.query("runs", order_by="meta.size", descending=True)) == _ids(by_size)[::-1]


QUERIES: list[dict[str, Any]] = [
    {},
    {"descending": True},
    {"where": {"status": "passed"}},
    {"where": {"meta.owner": "ann"}, "order_by": "at"},
    {"order_by": "meta.size"},
    {"order_by": "meta.size", "descending": True},
    {"order_by": "status", "descending": True},
    {"key_prefix": "run-", "order_by": "at", "descending": True},
    {"where": {"status": "nobody"}},
]


@pytest.mark.parametrize("query", QUERIES, ids=str)
def test_documents_pages_concatenate_to_the_query(documents, query):
    _fill(documents)
    for n in range(20):  # more documents than one page, some sharing an order value
        documents.put("runs", f"run-x{n:02}", {"id": f"run-x{n:02}", "status": "passed", "at": n % 4})
    expected = documents.query("runs", **query)
    for size in (1, 2, 7, 100):
        seen: list[dict[str, Any]] = []
        cursor, pages = None, 0
        while True:
            page = documents.page("runs", **query, limit=size, after=cursor)
            assert len(page.items) <= size
            seen += page.items
            pages += 1
            assert pages <= len(expected) + 1, "the pages do not end"
            if page.next is None:
                break
            assert page.items, "a page with a next cursor must not be empty"
            cursor = page.next
        assert seen == expected, f"page size {size}"


def test_documents_bad_cursors_are_refused(documents):
    _fill(documents)
    first = documents.page("runs", order_by="at", limit=2)
    assert first.next is not None
    for bad in ["garbage", "!!!!", "eyJxIjoxfQ", first.next[:-3]]:
        with pytest.raises(ValueError):
            documents.page("runs", order_by="at", limit=2, after=bad)
    # A cursor works only with the query it came from: not another collection, filter or order.
    for other in [
        {"collection": "other", "order_by": "at"},
        {"collection": "runs", "order_by": "status"},
        {"collection": "runs", "order_by": "at", "where": {"status": "failed"}},
        {"collection": "runs", "order_by": "at", "descending": True},
    ]:
        with pytest.raises(ValueError):
            documents.page(other.pop("collection"), **other, limit=2, after=first.next)
    with pytest.raises(ValueError):
        documents.page("runs", limit=0)


def _builder(query: dict[str, Any]) -> QueryBuilder:
    built = QueryBuilder("runs")
    for field, value in query.get("where", {}).items():
        built = built.where(field, "==", value)
    if "key_prefix" in query:
        built = built.key_prefix(query["key_prefix"])
    if "order_by" in query:
        built = built.order_by(query["order_by"], descending=query.get("descending", False))
    elif query.get("descending"):
        built = dataclasses.replace(built, descending=True)  # key order, reversed
    return built


@pytest.mark.parametrize("query", QUERIES, ids=str)
def test_documents_query_builder_is_the_query(documents, query):
    """The public QueryBuilder runs as the store's own query and pages (agent_env.stores.query)."""
    _fill(documents)
    built = _builder(query)
    assert built.execute(documents) == documents.query("runs", **query)
    assert built.limit(2).execute(documents) == documents.query("runs", **query, limit=2)
    assert [d for page in built.pages(documents, size=2) for d in page.items] == documents.query("runs", **query)


def test_documents_reject_injection_in_names(documents):
    with pytest.raises(ValueError):
        documents.query("runs", where={"status') = 1 OR (1": "x"})
    with pytest.raises(ValueError):
        documents.query("runs", order_by="at DESC; DROP TABLE documents")
    with pytest.raises(ValueError):
        documents.put("Runs; DROP", "k", {})
    with pytest.raises(ValueError):
        documents.query("runs", where={"meta": {"owner": "ann"}})  # equality is on scalars


# Objects


def test_objects_round_trip_and_overwrite(objects):
    objects.put("runs/r1/a.json", b"{}")
    objects.put("runs/r1/b.bin", bytes(range(256)))
    assert objects.get("runs/r1/b.bin") == bytes(range(256))
    objects.put("runs/r1/a.json", b"[]")
    assert objects.get("runs/r1/a.json") == b"[]"
    objects.put("empty", b"")
    assert objects.get("empty") == b"" and objects.exists("empty")
    assert objects.exists("runs/r1/a.json") and not objects.exists("runs/r1")  # a prefix is not an object
    assert objects.delete("runs/r1/a.json") and not objects.delete("runs/r1/a.json")
    assert not objects.exists("runs/r1/a.json")


def test_objects_create_only_when_absent(objects):
    assert objects.create("artifacts/x", b"first")
    assert not objects.create("artifacts/x", b"second")
    assert objects.get("artifacts/x") == b"first"
    objects.delete("artifacts/x")
    assert objects.create("artifacts/x", b"third")


def test_objects_racing_creates_have_one_winner(objects):
    won = race(8, lambda i: objects.create("raced/key", f"writer {i}".encode() * 1000))
    assert won.count(True) == 1
    assert objects.get("raced/key") == f"writer {won.index(True)}".encode() * 1000
    assert objects.list() == ["raced/key"]  # no leftovers of the losers


def test_objects_missing_keys(objects):
    with pytest.raises(KeyError) as missing:
        objects.get("runs/none/a.json")
    assert "runs/none/a.json" in str(missing.value)
    assert isinstance(missing.value, NotFound)
    assert not objects.exists("runs/none/a.json") and not objects.delete("runs/none/a.json")


def test_objects_list_by_prefix_sorted(objects):
    for key in ["runs/r2/a", "runs/r1/b", "runs/r1/a", "runs/r10/a", "artifacts/z", "runs-other"]:
        objects.put(key, b"x")
    assert objects.list("runs/r1/") == ["runs/r1/a", "runs/r1/b"]
    assert objects.list("runs/r1") == ["runs/r1/a", "runs/r1/b", "runs/r10/a"]  # a prefix, not a folder
    assert objects.list() == sorted(["runs/r2/a", "runs/r1/b", "runs/r1/a", "runs/r10/a", "artifacts/z", "runs-other"])
    assert objects.list("nothing/") == []
    assert objects.list("runs/r1/a") == ["runs/r1/a"]  # a whole key is a prefix of itself
    assert objects.list("runs/r1/a/") == [] and objects.list("runs/nothing/deeper/") == []
    assert objects.list("runs/r") == ["runs/r1/a", "runs/r1/b", "runs/r10/a", "runs/r2/a"]


@pytest.mark.parametrize("key", ["../escape", "/etc/passwd", "a/../../b", "a//b", "a\\b", "", "./a", "a/\x00", "a/"])
def test_objects_keys_cannot_escape(objects, key, tmp_path):
    source = tmp_path / "source"
    source.write_bytes(b"x")
    for write in (
        lambda: objects.put(key, b"x"),
        lambda: objects.create(key, b"x"),
        lambda: objects.put_file(key, source),
    ):
        with pytest.raises(BadInput):
            write()
    for read in (lambda: objects.get(key), lambda: objects.exists(key), lambda: objects.get_file(key, tmp_path / "o")):
        with pytest.raises(BadInput):
            read()


def test_objects_large_files_are_streamed(objects, tmp_path, max_stream_memory):
    size = 20 * MiB
    source, copy = tmp_path / "big.bin", tmp_path / "down" / "big.copy"
    digest = hashlib.sha256()
    with open(source, "wb") as f:
        block = os.urandom(MiB)
        for i in range(size // MiB):
            chunk = bytes([i]) + block[1:]
            digest.update(chunk)
            f.write(chunk)
    copy.parent.mkdir()
    tracemalloc.start()
    try:
        objects.put_file("big/file.bin", source)
        _, put_peak = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        objects.get_file("big/file.bin", copy)
        _, get_peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert put_peak < max_stream_memory, f"put_file held {put_peak} bytes of a {size}-byte file"
    assert get_peak < max_stream_memory, f"get_file held {get_peak} bytes of a {size}-byte file"
    with open(copy, "rb") as f:
        assert hashlib.file_digest(f, "sha256").hexdigest() == digest.hexdigest()
    assert objects.list("big/") == ["big/file.bin"]
    assert sorted(p.name for p in copy.parent.iterdir()) == ["big.copy"]  # no temp file left beside it


def test_objects_get_file_of_a_missing_key_leaves_the_file(objects, tmp_path):
    target = tmp_path / "downloads" / "kept.txt"
    target.parent.mkdir()
    target.write_text("mine")
    with pytest.raises(KeyError):
        objects.get_file("nothing/here", target)
    assert target.read_text() == "mine"
    assert [p.name for p in target.parent.iterdir()] == ["kept.txt"]


# Images


def test_images_push_pull_and_versions(images, local_image, image_name):
    name = image_name
    assert images.versions(name) == []
    assert not images.exists(name, "1.9")
    for version in ("1.9", "1.10", "0.1"):
        stored = images.push(local_image, name, version)
        assert isinstance(stored, str) and stored
    assert images.exists(name, "1.10")
    assert images.versions(name) == ["0.1", "1.9", "1.10"]  # numbers sort as numbers
    ref = images.pull(name, "1.9")
    assert isinstance(ref, str) and ref
    images.push(local_image, name, "1.9")  # pushing a version again is allowed (same content)
    assert images.versions(name) == ["0.1", "1.9", "1.10"]


def test_images_missing_and_invalid(images, local_image, image_name):
    name = image_name
    with pytest.raises(NotFound):
        images.pull(name, "1")
    with pytest.raises(NotFound):
        images.push("agentenv-conformance/no-such-image:never", name, "1")
    for bad_name, bad_version in [("Upper", "1"), ("../x", "1"), ("ok", "-1"), ("ok", "a/b"), ("", "1")]:
        with pytest.raises(BadInput):
            images.push(local_image, bad_name, bad_version)
        with pytest.raises(BadInput):
            images.exists(bad_name, bad_version)


# Secrets


def test_secrets_set_get_delete_names(secrets):
    assert secrets.names() == []
    secrets.set("openai-key", "sk-1")
    secrets.set("gateway.token", "t-2")
    assert secrets.get("openai-key") == "sk-1"
    secrets.set("openai-key", "sk-3")  # set again replaces
    assert secrets.get("openai-key") == "sk-3"
    assert secrets.names() == ["gateway.token", "openai-key"]
    assert secrets.has("gateway.token") and not secrets.has("nothing")
    assert secrets.resolve("secret:gateway.token") == "t-2" and secrets.resolve("plain") == "plain"
    assert secrets.delete("openai-key") and not secrets.delete("openai-key")
    assert secrets.names() == ["gateway.token"]
    secrets.set("openai-key", "sk-4")  # a name set again right after its delete
    assert secrets.get("openai-key") == "sk-4"


def test_secrets_missing_names_the_fix(secrets):
    with pytest.raises(MissingSecret) as missing:
        secrets.get("never-set")
    assert isinstance(missing.value, BadInput)
    assert "never-set" in missing.value.problem
    assert "agent-env secrets set never-set" in (missing.value.fix or "")
    assert "AGENT_ENV_SECRET_NEVER_SET" in (missing.value.fix or "")


def test_secrets_environment_overrides(secrets, monkeypatch):
    secrets.set("shared", "from-store")
    monkeypatch.setenv("AGENT_ENV_SECRET_SHARED", "from-env")
    monkeypatch.setenv("AGENT_ENV_SECRET_ONLY_ENV", "env-only")
    assert secrets.get("shared") == "from-env"
    assert secrets.get("only-env") == "env-only"
    monkeypatch.delenv("AGENT_ENV_SECRET_SHARED")
    assert secrets.get("shared") == "from-store"


@pytest.mark.parametrize("name", ["", "a b", "../x", "x" * 65, "semi;colon"])
def test_secrets_invalid_names_are_refused(secrets, name):
    with pytest.raises(BadInput):
        secrets.set(name, "v")
