"""No store call blocks an event loop: async code reaches the (synchronous) store backends only through the
seam of agent_env/stores/aio.py (`await stores.aio.objects.get(...)`, `await in_thread(helper, ...)`).

Held two ways: every `async def` of the package is read, and a synchronous store call in one fails here naming
the line; and a real slow backend (the "slow" plugin of tests/plugins, registered in the `agent_env.stores`
entry-point group) holds a store call while the gateway served on the same loop answers `/ready` and another
run's store call completes.
"""

from __future__ import annotations

import ast
import asyncio
from pathlib import Path

import httpx2
import pytest
from agentenv_teststeps import slow_stores
from gateway_util import running_gateway, support_spec

from agent_env.config import load_settings
from agent_env.gateway.release import retire_instance, trajectory_key
from agent_env.stores import in_thread, open_stores

ROOT = Path(__file__).parent.parent
PACKAGE = ROOT / "agent_env"

# The store interfaces' methods (stores/base.py), by the attribute a `Stores` holds each store under.
METHODS = {
    "documents": {"put", "create", "get", "delete", "query", "page"},
    "objects": {"put", "create", "get", "exists", "delete", "list", "put_file", "get_file"},
    "images": {"push", "pull", "exists", "versions"},
    "secrets": {"get", "set", "delete", "names", "has", "resolve"},
}
OPENERS = {"open_stores", "open_secrets", "hex_secret"}  # they open backends: a client, a connection


def _store_call(call: ast.Call) -> bool:
    """`x.objects.get(...)`, `objects.put(...)` (a store held in a name), `open_stores(...)`."""
    func = call.func
    if isinstance(func, ast.Name):
        return func.id in OPENERS
    if not isinstance(func, ast.Attribute):
        return False
    held = func.value
    if isinstance(held, ast.Attribute) and held.attr in METHODS:
        owner = held.value  # (a Docker SDK client has `.images` too)
        return func.attr in METHODS[held.attr] and not (
            isinstance(owner, ast.Name | ast.Attribute) and getattr(owner, "id", getattr(owner, "attr", "")) == "client"
        )
    if isinstance(held, ast.Name) and held.id in (*METHODS, "store"):
        return func.attr in set().union(*METHODS.values())
    return False


def blocking_store_calls(tree: ast.AST, name: str) -> list[str]:
    """Synchronous store calls made by the body of an `async def` itself (not by functions defined in it,
    which may run in a thread): an awaited call is the seam's, never a synchronous one."""
    found = []
    for fn in ast.walk(tree):
        if not isinstance(fn, ast.AsyncFunctionDef):
            continue
        awaited = {id(n.value) for n in ast.walk(fn) if isinstance(n, ast.Await)}
        todo = list(ast.iter_child_nodes(fn))
        while todo:
            node = todo.pop()
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda | ast.ClassDef):
                continue
            if isinstance(node, ast.Call) and id(node) not in awaited and _store_call(node):
                found.append(f"{name}:{node.lineno} in async {fn.name}: {ast.unparse(node)[:90]}")
            todo.extend(ast.iter_child_nodes(node))
    return sorted(found)


@pytest.mark.unit
def test_no_async_function_calls_a_store_synchronously():
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if PACKAGE / "stores" in path.parents:  # the seam itself, and the backends
            continue
        found += blocking_store_calls(ast.parse(path.read_text()), str(path.relative_to(ROOT)))
    assert not found, (
        "synchronous store calls on an event loop (a slow backend stops every request and run of the process "
        "meanwhile): await `stores.aio.<kind>.<method>(...)`, or `await in_thread(helper, ...)` for a helper "
        "that makes several:\n  " + "\n  ".join(found)
    )


@pytest.mark.unit
def test_the_check_sees_a_blocking_call_and_lets_the_seam_pass():
    code = """
async def bad(ctx, stores, settings):
    ctx.stores.objects.put("k", b"")
    docs = stores.documents.query("runs")
    secrets = open_secrets(settings)
    return secrets.get("x"), docs

async def good(ctx, stores, settings, client):
    await ctx.stores.aio.objects.put("k", b"")
    objects = ctx.stores.aio.objects
    await objects.list("runs/")
    stores = await in_thread(open_stores, settings)
    client.images.get("python:3.11")  # the Docker SDK's, not a store
    def in_a_thread():
        return stores.objects.get("k")
    return await in_thread(in_a_thread)
"""
    found = blocking_store_calls(ast.parse(code), "x.py")
    assert [line.split(" in ")[0] for line in found] == ["x.py:3", "x.py:4", "x.py:5", "x.py:6"], found
    assert all("in async bad" in line for line in found)


@pytest.fixture
def slow_settings(monkeypatch, tmp_path):
    """Settings whose object store is the slow plugin, holding calls on keys of the run "held-run"."""
    monkeypatch.delenv("AGENT_ENV_CONFIG", raising=False)
    monkeypatch.delenv("AGENT_ENV_HOME", raising=False)
    (tmp_path / ".agentenv").mkdir()
    (tmp_path / ".agentenv" / "config.toml").write_text(
        'state_dir = "state"\n[stores.objects]\nbackend = "slow"\nhold = "held-run"\nmax_hold_s = 30\n'
    )
    slow_stores.RELEASE.clear()
    yield load_settings(tmp_path)
    slow_stores.RELEASE.set()  # nothing stays held past the test


async def test_a_slow_store_call_holds_a_thread_not_the_loop(slow_settings, tmp_path):
    stores = open_stores(slow_settings)
    assert type(stores.objects).__name__ == "SlowObjectStore"
    try:
        async with running_gateway(tmp_path / "gw") as (_gateway, base, admin):
            await admin.put_instance(support_spec("desk-held", run_id="held-run"))
            await admin.put_instance(support_spec("desk-other", run_id="other-run"))
            # Retiring keeps the instance's trajectory in the object store: for "held-run" that put is held.
            held = asyncio.create_task(retire_instance(admin, stores, "held-run", "desk-held"))
            assert await asyncio.to_thread(slow_stores.IN_FLIGHT.wait, 30), "the held store call never started"
            async with httpx2.AsyncClient(base_url=base, timeout=30) as http:
                ready = await http.get("/ready")
            other = await retire_instance(admin, stores, "other-run", "desk-other")  # another run's store call
            still_held = slow_stores.IN_FLIGHT.is_set() and not held.done()
            slow_stores.RELEASE.set()
            kept = await held
        assert still_held, "the gateway answered only after the slow store call ended: it blocked the event loop"
        assert ready.status_code == 200 and ready.json() == {"ready": True}
        assert other["trajectory"] == trajectory_key("other-run", "desk-other")
        assert kept["trajectory"] == trajectory_key("held-run", "desk-held")
        assert await stores.aio.objects.exists(kept["trajectory"]), "the held call completed once let go"
    finally:
        stores.close()


async def test_in_thread_runs_on_the_stores_threads_and_keeps_the_context():
    import contextvars
    import threading

    who = contextvars.ContextVar("who", default="nobody")
    who.set("the caller")
    name, seen = await in_thread(lambda: (threading.current_thread().name, who.get()))
    assert name.startswith("agent-env-store") and name != threading.current_thread().name
    assert seen == "the caller", "a trace span set by the caller is seen by the store call"
