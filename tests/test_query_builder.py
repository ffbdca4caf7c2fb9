"""QueryBuilder (agent_env.stores.query): the same query gives the same documents, order and pages on the local,
AWS (DynamoDB on moto's server) and GCP (Firestore's fake client) document stores; what no backend can do is
refused when it is asked for, naming it and the fix."""

from __future__ import annotations

import dataclasses
from typing import Any

import moto_util
import pytest

from agent_env.errors import BadInput
from agent_env.stores import QueryBuilder
from agent_env.stores.local import SqliteDocumentStore

endpoint = moto_util.endpoint  # the module's moto server, started only if an AWS test runs


@pytest.fixture(params=["local", pytest.param("aws", marks=pytest.mark.processes), "gcp"])
def documents(request, tmp_path):
    if request.param == "local":
        store: Any = SqliteDocumentStore(tmp_path / "docs.sqlite")
    elif request.param == "aws":
        pytest.importorskip("boto3", reason="the AWS stores need boto3 (the dev extra)")
        pytest.importorskip("moto.server", reason="the AWS store tests need moto's server (the dev extra)")
        from agent_env.config import Settings
        from agent_env.stores.backends import open_store

        url = request.getfixturevalue("endpoint")
        options = {"backend": "aws", "endpoint_url": url, "table": moto_util.unique("table")}
        settings = Settings.model_validate({"state_dir": str(tmp_path), "stores": {"documents": options}})
        store = open_store("documents", settings)
    else:
        pytest.importorskip("google.cloud.firestore", reason="the GCP stores need the gcp extra (the dev extra)")
        from fakes.gcp import FakeFirestoreClient

        from agent_env.stores.gcp_documents import FirestoreDocumentStore

        store = FirestoreDocumentStore(FakeFirestoreClient(), prefix=moto_util.unique("qb").replace("-", "_") + "_")
    yield store
    store.close()


RUNS = [
    ("run-0", {"status": "passed", "started_at": "2026-01-01", "score": {"value": 1.0, "judge": "exact"}}),
    ("run-1", {"status": "failed", "started_at": "2026-01-02", "score": {"value": 0.0, "judge": "exact"}}),
    ("run-2", {"status": "passed", "started_at": "2026-01-03", "score": {"value": 0.5, "judge": "rubric"}}),
    ("run-3", {"status": "passed", "started_at": "2026-01-04"}),
    ("job-4", {"status": "running", "started_at": "2026-01-05", "score": {"value": 0.5, "judge": "rubric"}}),
]


def fill(documents) -> None:
    for key, doc in RUNS:
        documents.put("runs", key, {"id": key, **doc})
    documents.put("other", "run-9", {"id": "run-9", "status": "passed"})


def ids(docs: list[dict[str, Any]]) -> list[str]:
    return [d["id"] for d in docs]


def test_filters_order_limit_and_prefix(documents):
    fill(documents)
    runs = QueryBuilder("runs")
    passed = runs.where("status", "==", "passed")
    assert ids(passed.execute(documents)) == ["run-0", "run-2", "run-3"]  # key order without order_by
    assert ids(passed.order_by("started_at", descending=True).execute(documents)) == ["run-3", "run-2", "run-0"]
    assert ids(passed.order_by("started_at", descending=True).limit(2).execute(documents)) == ["run-3", "run-2"]
    rubric = runs.where("score.judge", "==", "rubric").where("score.value", "==", 0.5)
    assert ids(rubric.execute(documents)) == ["job-4", "run-2"]
    assert ids(runs.order_by("score.value").execute(documents)) == ["run-3", "run-1", "job-4", "run-2", "run-0"]
    assert ids(runs.key_prefix("run-").order_by("started_at", descending=True).limit(3).execute(documents)) == [
        "run-3",
        "run-2",
        "run-1",
    ]
    assert runs.where("status", "==", "nobody").execute(documents) == []
    assert QueryBuilder("empty").execute(documents) == []


def test_first(documents):
    fill(documents)
    latest = QueryBuilder("runs").order_by("started_at", descending=True).first(documents)
    assert latest is not None and latest["id"] == "job-4"
    assert QueryBuilder("runs").where("status", "==", "nobody").first(documents) is None


def test_pages_concatenate_to_the_query_and_stop_at_the_limit(documents):
    fill(documents)
    for n in range(12):
        documents.put(
            "runs", f"run-x{n:02}", {"id": f"run-x{n:02}", "status": "passed", "started_at": f"2026-02-{n % 3}"}
        )
    query = QueryBuilder("runs").where("status", "==", "passed").order_by("started_at", descending=True)
    everything = query.execute(documents)
    assert len(everything) == 15
    for size in (1, 4, 100):
        pages = list(query.pages(documents, size=size))
        assert [d for p in pages for d in p.items] == everything
        assert all(len(p.items) <= size for p in pages) and pages[-1].next is None
    limited = list(query.limit(6).pages(documents, size=4))
    assert [len(p.items) for p in limited] == [4, 2] and limited[-1].next is None
    assert [d for p in limited for d in p.items] == everything[:6]
    # One page at a time, following the cursor by hand (a web page's "next").
    first = query.page(documents, size=10)
    second = query.page(documents, size=10, after=first.next)
    assert first.items + second.items == everything and second.next is None


def test_a_cursor_only_moves_within_its_own_query(documents):
    fill(documents)
    query = QueryBuilder("runs").order_by("started_at")
    first = query.page(documents, size=2)
    assert first.next is not None
    for other in (query.where("status", "==", "passed"), query.order_by("started_at", descending=True)):
        with pytest.raises(BadInput) as refused:
            other.page(documents, size=2, after=first.next)
        assert "another query" in refused.value.problem and "`next`" in (refused.value.fix or "")
    with pytest.raises(BadInput):
        query.page(documents, size=2, after="garbage")


# What the builder refuses (no store needed: it refuses as the query is built)


def test_the_builder_is_immutable():
    base = QueryBuilder("runs")
    refined = base.where("status", "==", "passed").order_by("started_at", descending=True).limit(5)
    assert base == QueryBuilder("runs") and refined != base
    assert refined.filters == (("status", "passed"),) and refined.sort_field == "started_at"
    assert refined.descending and refined.max_results == 5
    assert refined.limit(10).max_results == 10 and refined.max_results == 5
    with pytest.raises(dataclasses.FrozenInstanceError):
        refined.collection = "other"  # type: ignore[misc]
    assert hash(refined) == hash(base.where("status", "==", "passed").order_by("started_at", descending=True).limit(5))
    assert refined.where("status", "==", "passed") is refined  # the same filter again changes nothing


@pytest.mark.parametrize("op", [">=", ">", "<", "<=", "!=", "in", "array-contains", "="])
def test_operators_other_than_equality_name_the_fix(op):
    with pytest.raises(BadInput) as refused:
        QueryBuilder("runs").where("score.value", op, 0.5)  # type: ignore[arg-type]
    assert repr(op) in refused.value.problem and "'score.value'" in refused.value.problem
    assert "equality only" in refused.value.problem
    assert ".order_by('score.value')" in (refused.value.fix or "")


@pytest.mark.parametrize("field", ["", "a-b", "a..b", ".a", "a.", "tags[0]", "1st", "status') = 1 OR (1", "a b"])
def test_fields_must_be_dotted_identifiers(field):
    for build in (
        lambda: QueryBuilder("runs").where(field, "==", "x"),
        lambda: QueryBuilder("runs").order_by(field),
        lambda: QueryBuilder("runs", filters=((field, "x"),)),
        lambda: QueryBuilder("runs", sort_field=field),
    ):
        with pytest.raises(BadInput) as refused:
            build()
        assert repr(field) in refused.value.problem and "meta.owner" in (refused.value.fix or "")


@pytest.mark.parametrize("value", [None, ["a"], {"owner": "ann"}, b"x"])
def test_filters_compare_to_scalars(value):
    with pytest.raises(BadInput) as refused:
        QueryBuilder("runs").where("meta", "==", value)
    assert "string, number or bool" in refused.value.problem and "order by it" in (refused.value.fix or "")


def test_one_value_per_field_and_one_order_field():
    passed = QueryBuilder("runs").where("status", "==", "passed")
    with pytest.raises(BadInput) as refused:
        passed.where("status", "==", "failed")
    assert "'passed'" in refused.value.problem and "'failed'" in refused.value.problem
    with pytest.raises(BadInput):
        passed.where("status", "==", 1)  # not the same value
    with pytest.raises(BadInput):
        QueryBuilder("runs", filters=(("status", "a"), ("status", "a")))
    ordered = QueryBuilder("runs").order_by("started_at")
    assert ordered.order_by("started_at", descending=True).descending  # the same field: a new direction
    with pytest.raises(BadInput) as refused:
        ordered.order_by("status")
    assert "one field" in refused.value.problem and "in Python" in (refused.value.fix or "")


@pytest.mark.parametrize("n", [0, -1, True, 2.5, "5"])
def test_limits_are_whole_numbers(n):
    with pytest.raises(BadInput):
        QueryBuilder("runs").limit(n)  # type: ignore[arg-type]


@pytest.mark.parametrize("collection", ["Runs", "", "runs; DROP", "a" * 65, "9lives"])
def test_collections_are_checked(collection):
    with pytest.raises(BadInput) as refused:
        QueryBuilder(collection)
    assert "'runs'" in (refused.value.fix or "")


def test_page_sizes_and_limits(tmp_path):
    store = SqliteDocumentStore(tmp_path / "docs.sqlite")
    try:
        for size in (0, 10_001, True):
            with pytest.raises(BadInput):
                QueryBuilder("runs").page(store, size=size)
            with pytest.raises(BadInput):
                next(QueryBuilder("runs").pages(store, size=size))
        with pytest.raises(BadInput) as refused:
            QueryBuilder("runs").limit(20).page(store)
        assert "size=20" in (refused.value.fix or "")
        assert list(QueryBuilder("runs").pages(store)) == [QueryBuilder("runs").page(store)]  # empty: one page
    finally:
        store.close()
