"""The explorer (`agent-env up`): its door (one-time login, session cookie and key, Host and Origin), and its API over
real runs — the `workplace` bundle (a world over three virtual days) and a refund run as `support` (whose
tool calls the gateway refuses) — executed by the real Temporal server, worker and gateway of the session.
The page itself is checked in a real browser elsewhere; here, what it reads and the hooks it is built on."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import sys
import time
from datetime import UTC, datetime, timedelta

import explorer_util
import httpx
import pytest
from typer.testing import CliRunner

from agent_env.config import Settings
from agent_env.explorer.auth import CODE_TTL, COOKIE, IDLE_TTL, KEY_HEADER, SESSION_TTL, Door
from agent_env.explorer.server import STATIC, create_app
from agent_env.spec.run import RunState, RunStatus, StepState, StepStatus
from agent_env.stores import keys, open_stores
from agent_env.temporal import launch

BASE = "http://127.0.0.1:8234"
finished_runs = explorer_util.finished_runs  # the workplace and refund runs, once a session


def explorer_client(app) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=BASE)


handed_key, sign_in = explorer_util.handed_key, explorer_util.sign_in


@pytest.fixture
async def explorer(settings, client, finished_runs):
    """The explorer app over the session's stores and Temporal, signed in."""
    door = Door()
    async with explorer_client(create_app(settings, door, temporal=client)) as http:
        await sign_in(http, door)
        yield http


# -- the door --


async def test_without_a_session_the_api_is_401_and_the_page_asks_for_the_link(settings):
    async with explorer_client(create_app(settings, Door())) as http:
        api = await http.get("/api/runs")
        assert api.status_code == 401 and "agent-env up" in api.json()["fix"]
        page = await http.get("/")
        assert page.status_code == 401 and 'data-testid="login"' in page.text
        assert "script-src 'self'" in page.headers["content-security-policy"]
        # the page's files hold no data: served to anyone who reaches the port
        script = await http.get("/static/app.js")
        assert script.status_code == 200 and "javascript" in script.headers["content-type"]
        assert (await http.get("/static/style.css")).status_code == 200
        assert 'src="/static/app.js"' in (await http.get("/static/index.html")).text


async def test_a_one_time_code_signs_in_once_and_the_admin_token_never_shows(settings):
    from agent_env.gateway.embedded import admin_token

    door = Door()
    code = door.new_code()
    async with explorer_client(create_app(settings, door)) as http:
        answer = await http.get(f"/login?code={code}")
        assert answer.status_code == 200 and "location" not in answer.headers
        cookie = answer.headers["set-cookie"]
        assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Path=/;" in cookie and code not in cookie
        assert f"Max-Age={int(SESSION_TTL)}" in cookie  # the browser forgets it when the server would
        key = handed_key(answer.text)  # in the page only: never in a URL or a cookie
        assert key not in cookie and 'src="/static/signin.js"' in answer.text
        assert (await http.get("/static/signin.html")).status_code == 404  # no page a link could open to hand a key
        page = await http.get("/")
        assert page.status_code == 200 and 'id="view"' in page.text
        assert (await http.get("/api/runs")).status_code == 401  # the cookie alone opens nothing
        assert (await http.get("/api/runs", headers={KEY_HEADER: key})).status_code == 200
        bodies = answer.text + page.text + (await http.get("/api/runs", headers={KEY_HEADER: key})).text
        assert admin_token(settings) not in bodies
    async with explorer_client(create_app(settings, door)) as again:  # another browser, the same link: refused
        assert (await again.get(f"/login?code={code}")).status_code == 401
        assert (await again.get("/login?code=guessed")).status_code == 401
        assert (await again.get("/login")).status_code == 401
        assert (await again.get("/api/runs", headers={KEY_HEADER: key})).status_code == 401  # the key alone neither


async def test_a_code_expires(settings):
    now = [0.0]
    door = Door(clock=lambda: now[0])
    code = door.new_code()
    now[0] += CODE_TTL + 1
    async with explorer_client(create_app(settings, door)) as http:
        assert (await http.get(f"/login?code={code}")).status_code == 401


async def test_other_hosts_and_origins_are_refused(settings):
    door = Door()
    async with explorer_client(create_app(settings, door)) as http:
        await sign_in(http, door)
        rebinding = await http.get("/api/runs", headers={"host": "evil.example"})
        assert rebinding.status_code == 421
        cross_site = await http.get("/api/runs", headers={"origin": "http://evil.example"})
        assert cross_site.status_code == 403
        assert (await http.get("/api/runs", headers={"origin": BASE})).status_code == 200


def api_routes(workplace: RunState, refund: RunState) -> list[str]:
    """One URL of every API route, each naming something that exists (so with both secrets it answers 200)."""
    run, failed = f"/api/runs/{workplace.run_id}", f"/api/runs/{refund.run_id}"
    return [
        "/api/runs",
        run,
        f"{run}/world",
        f"{failed}/calls",
        f"{failed}/calls/0",
        f"{failed}/transcripts/work",
        f"{run}/artifacts",
        f"{run}/artifacts/snapshots/end_state.tar",
        "/api/registry",
        "/api/episodes",
    ]


async def test_a_replayed_cookie_alone_reads_nothing(settings, client, finished_runs):
    """The red team's finding: a browser sends the explorer's cookie to every port of 127.0.0.1, so a page on an
    agent's own server receives it. Replayed from there (a plain HTTP client, over a real port), it is a 401 on
    every API route; with the key the sign-in handed the page, the same requests answer."""
    door = Door()
    with explorer_util.serving(create_app(settings, door, temporal=client)) as base:
        async with httpx.AsyncClient(base_url=base) as operator:
            key = await sign_in(operator, door)
            session = operator.cookies[COOKIE]
        routes = api_routes(*finished_runs)
        async with httpx.AsyncClient(base_url=base, headers={"cookie": f"{COOKIE}={session}"}) as replay:
            for route in routes:
                for headers in ({}, {KEY_HEADER: ""}, {KEY_HEADER: "guessed"}, {KEY_HEADER: key[:-1]}):
                    answer = await replay.get(route, headers=headers)
                    assert answer.status_code == 401, (route, headers, answer.text)
                    assert "agent-env up" in answer.json()["fix"] and KEY_HEADER in answer.json()["fix"]
            for route in routes:
                answer = await replay.get(route, headers={KEY_HEADER: key})
                assert answer.status_code == 200, (route, answer.text)


async def test_one_sessions_key_does_not_open_another(settings):
    door = Door()
    async with (
        explorer_client(create_app(settings, door)) as first,
        explorer_client(create_app(settings, door)) as second,
    ):
        first_key, second_key = await sign_in(first, door), await sign_in(second, door)
        assert first_key != second_key
        assert (await first.get("/api/runs")).status_code == 200
        assert (await second.get("/api/runs")).status_code == 200
        assert (await first.get("/api/runs", headers={KEY_HEADER: second_key})).status_code == 401
        assert (await second.get("/api/runs", headers={KEY_HEADER: first_key})).status_code == 401


async def test_a_session_ends_when_idle_and_at_its_limit(settings):
    now = [0.0]
    door = Door(clock=lambda: now[0])
    async with explorer_client(create_app(settings, door)) as idle:
        await sign_in(idle, door)
        now[0] += IDLE_TTL - 1
        assert (await idle.get("/api/runs")).status_code == 200  # a request keeps it alive ...
        now[0] += IDLE_TTL - 1
        assert (await idle.get("/api/runs")).status_code == 200
        now[0] += IDLE_TTL + 1  # ... a pause longer than IDLE_TTL ends it
        assert (await idle.get("/api/runs")).status_code == 401
        assert (await idle.get("/")).status_code == 401  # and the page is the sign-in page again
        now[0] += IDLE_TTL - 1  # gone for good: requests after it do not revive it
        assert (await idle.get("/api/runs")).status_code == 401
    async with explorer_client(create_app(settings, door)) as busy:
        await sign_in(busy, door)
        opened = now[0]
        while now[0] + IDLE_TTL / 2 <= opened + SESSION_TTL:  # in use all along ...
            now[0] += IDLE_TTL / 2
            assert (await busy.get("/api/runs")).status_code == 200
        now[0] = opened + SESSION_TTL + 1  # ... it still ends SESSION_TTL after sign-in
        assert (await busy.get("/api/runs")).status_code == 401
        await sign_in(busy, door)  # a new link gets in again
        assert (await busy.get("/api/runs")).status_code == 200


def test_the_sign_in_page_says_how_long_a_session_lasts():
    text = " ".join((STATIC / "login.html").read_text().split())
    assert f"{int(IDLE_TTL // 60)} minutes without a look" in text and f"{int(SESSION_TTL // 3600)} hours" in text
    assert "new tab" in text


# -- the API over real runs --


async def test_a_running_run_is_read_live_from_its_workflow(explorer, client, settings):
    from agent_env.planning.tasks import parse_task

    nap = parse_task({"id": "explorer-nap", "steps": [{"id": "nap", "type": "sleep", "config": {"seconds": 2}}]}, "t")
    handle = await launch.start_run(client, settings, nap)
    for _ in range(100):  # until the worker has started the step
        run = (await explorer.get(f"/api/runs/{handle.id}")).json()
        if run["steps"][0]["status"] == "running":
            break
        await asyncio.sleep(0.05)
    assert run["live"] is True and run["status"] == "running" and run["steps"][0]["started_at"]
    listed = (await explorer.get("/api/runs", params={"status": "running", "task": "explorer-nap"})).json()
    assert handle.id in {r["run_id"] for r in listed["runs"]}
    await launch.wait_result(handle)
    done = (await explorer.get(f"/api/runs/{handle.id}")).json()
    assert done["live"] is False and done["status"] == "passed" and done["steps"][0]["took_ms"] >= 2000


async def test_runs_filter_by_task_status_score_and_time(explorer, finished_runs):
    workplace, refund = finished_runs

    async def ids(**params) -> set[str]:
        answer = await explorer.get("/api/runs", params=params)
        assert answer.status_code == 200, answer.text
        return {r["run_id"] for r in answer.json()["runs"]}

    assert workplace.run_id in await ids(task="workplace") and refund.run_id not in await ids(task="workplace")
    assert refund.run_id in await ids(status="failed") and workplace.run_id not in await ids(status="failed")
    assert workplace.run_id in await ids(min_score="0.9") and refund.run_id not in await ids(min_score="0.9")
    assert refund.run_id in await ids(max_score="0.6", task="refund")
    assert not await ids(since=(datetime.now(UTC) + timedelta(hours=1)).isoformat())
    assert workplace.run_id in await ids(since=(workplace.started_at - timedelta(seconds=1)).isoformat())
    naive_utc = (workplace.started_at - timedelta(seconds=1)).replace(tzinfo=None).isoformat()
    assert workplace.run_id in await ids(since=naive_utc)
    row = (await explorer.get("/api/runs", params={"task": "workplace", "limit": 1})).json()["runs"][0]
    assert row.keys() >= {"run_id", "task_id", "status", "score", "started_at", "took_s"}
    assert (await explorer.get("/api/runs", params={"status": "bogus"})).status_code == 400
    assert (await explorer.get("/api/runs", params={"limit": 100_000})).status_code == 400  # bounded


async def test_a_run_shows_its_steps_scores_and_where_temporal_has_it(explorer, finished_runs, settings):
    workplace, _ = finished_runs
    run = (await explorer.get(f"/api/runs/{workplace.run_id}")).json()
    steps = {s["id"]: s for s in run["steps"]}
    assert list(steps) == list(workplace.steps)
    assert all(s["status"] == "succeeded" and s["took_ms"] is not None and s["started_at"] for s in steps.values())
    assert [steps[s]["depth"] for s in ("desk", "lock_refunds", "rules", "three_days", "outcome")] == [0, 1, 2, 3, 4]
    criteria = steps["outcome"]["score"]["criteria"]
    assert {c["name"] for c in criteria} >= {"Dana's ticket is solved"} and all(c["passed"] for c in criteria)
    assert run["temporal_url"] == settings.run_url(workplace.run_id)
    assert run["world"]["clock"]["zone"] == "America/New_York"
    assert run["status"] == "passed" and run["live"] is False
    assert (await explorer.get("/api/runs/no-such-run")).status_code == 404


async def test_the_world_timeline_has_firings_at_their_virtual_times(explorer, finished_runs):
    workplace, _ = finished_runs
    base = f"/api/runs/{workplace.run_id}/world"
    everything = (await explorer.get(base, params={"limit": 500})).json()
    assert everything["total"] == len(workplace.world.events)
    kinds = {e["kind"] for e in everything["events"]}
    assert {"clock", "trigger", "action", "persona", "rules"} <= kinds
    fired = (await explorer.get(base, params={"kind": "trigger"})).json()["events"]
    triages = next(e for e in fired if e["trigger"] == "sam_triages")
    assert triages["virtual_time"] == "2026-03-02T15:00:00+00:00"  # Monday 10:00 in New York: start + 2h
    assert triages["summary"] == "sam_triages fired"
    dana = next(e for e in everything["events"] if e["kind"] == "persona")
    assert dana["detail"]["agent"] == "dana" and dana["trigger"] == "dana_replies"
    page = (await explorer.get(base, params={"offset": 2, "limit": 3})).json()
    assert [e["seq"] for e in page["events"]] == [e["seq"] for e in everything["events"][2:5]]
    assert (await explorer.get(base, params={"limit": 100_000})).status_code == 400  # a bounded page
    assert (await explorer.get(base, params={"kind": "gossip"})).status_code == 400


async def test_tool_calls_are_paged_and_refusals_marked(explorer, finished_runs):
    _, refund = finished_runs
    base = f"/api/runs/{refund.run_id}/calls"
    first = (await explorer.get(base, params={"limit": 2})).json()
    total = first["total"]
    assert total >= 6 and len(first["calls"]) == 2 and first["refused"] == 2
    second = (await explorer.get(base, params={"limit": 2, "offset": 2})).json()
    assert [c["n"] for c in first["calls"] + second["calls"]] == [0, 1, 2, 3]
    refused = (await explorer.get(base, params={"refused": "true"})).json()
    assert sorted(c["tool"] for c in refused["calls"]) == ["issue_refund", "verify_order"]
    call = refused["calls"][0]
    assert call["refused"] is True and call["agent"] == "refunds" and call["role"] == "support"
    assert call["virtual_time"] and call["real_time"] and "not available to role" in call["error"]
    whole = (await explorer.get(f"{base}/{call['n']}")).json()
    assert whole["arguments"] == call["arguments"]
    assert (await explorer.get(base, params={"limit": 100_000})).status_code == 400  # a bounded page
    assert (await explorer.get(f"{base}/{total}")).status_code == 404


async def test_a_prompt_keeps_its_conversation(explorer, finished_runs):
    _, refund = finished_runs
    doc = (await explorer.get(f"/api/runs/{refund.run_id}/transcripts/work")).json()
    assert [m["side"] for m in doc["messages"]] == ["user", "agent"]
    assert doc["agent"] == "refunds" and doc["refused"] == 2
    assert (await explorer.get(f"/api/runs/{refund.run_id}/transcripts/grade")).status_code == 404


async def test_artifacts_download_as_attachments(explorer, finished_runs, settings):
    workplace, _ = finished_runs
    run = (await explorer.get(f"/api/runs/{workplace.run_id}")).json()
    paths = {a["path"] for a in run["artifacts"]}
    assert "snapshots/end_state.tar" in paths and any(p.startswith("trajectories/") for p in paths)
    download = await explorer.get(f"/api/runs/{workplace.run_id}/artifacts/snapshots/end_state.tar")
    assert download.status_code == 200
    assert download.headers["content-disposition"] == 'attachment; filename="end_state.tar"'
    assert download.headers["content-type"] == "application/octet-stream"
    stores = open_stores(settings)
    try:
        assert download.content == stores.objects.get(keys.snapshot(workplace.run_id, "end_state"))
    finally:
        stores.close()
    escape = await explorer.get(f"/api/runs/{workplace.run_id}/artifacts/..%2F..%2Fplans")
    assert escape.status_code in (400, 404)
    assert (await explorer.get(f"/api/runs/{workplace.run_id}/artifacts/nothing/here")).status_code == 404


async def test_registry_and_episodes(explorer):
    registry = (await explorer.get("/api/registry")).json()
    assert set(registry) == {"envs", "agents", "tasks", "evals"}
    assert "episodes" in (await explorer.get("/api/episodes")).json()


# -- a run with 10,000 tool calls (unit: a temp store, no server) --


async def test_a_run_with_10000_calls_pages_quickly(tmp_path):
    settings = Settings(state_dir=tmp_path)
    stores = open_stores(settings)
    run_id, instance = "big-run", "big-run.desk"
    started = datetime(2026, 3, 2, 13, tzinfo=UTC)
    state = RunState(
        run_id=run_id,
        task_id="big",
        task_version="1",
        status=RunStatus.PASSED,
        started_at=started,
        finished_at=started + timedelta(minutes=5),
        steps={
            "desk": StepState(id="desk", type="deploy_env", status=StepStatus.SUCCEEDED, outputs={"instance": instance})
        },
    )
    stores.documents.put(keys.RUNS, run_id, state.model_dump(mode="json"))
    entries = [
        {
            "seq": i + 1,
            "instance": instance,
            "agent": f"agent-{i % 7}",
            "role": "support",
            "tool": "get_ticket",
            "arguments": {"ticket_id": f"TCK-{i}", "note": "x" * 200},
            **(
                {"error": "not available to role 'support'"}
                if i % 10 == 0
                else {"result": {"id": i, "body": "y" * 500}}
            ),
            "refused": i % 10 == 0,
            "virtual_time": (started + timedelta(seconds=i)).isoformat(),
            "real_time": (started + timedelta(milliseconds=i)).isoformat(),
            "duration_ms": 1.0,
        }
        for i in range(10_000)
    ]
    stores.objects.put(keys.trajectory(run_id, instance), "".join(json.dumps(e) + "\n" for e in entries).encode())
    door = Door()
    try:
        async with explorer_client(create_app(settings, door, stores=stores)) as http:
            await sign_in(http, door)
            t0 = time.perf_counter()
            first = await http.get(f"/api/runs/{run_id}/calls", params={"limit": 100})
            first_s = time.perf_counter() - t0
            assert first.status_code == 200 and first.json()["total"] == 10_000
            t0 = time.perf_counter()
            for offset in (100, 5_000, 9_900):
                page = (await http.get(f"/api/runs/{run_id}/calls", params={"limit": 100, "offset": offset})).json()
                assert [c["n"] for c in page["calls"]] == list(range(offset, offset + 100))
            later_s = (time.perf_counter() - t0) / 3
            refused = (await http.get(f"/api/runs/{run_id}/calls", params={"refused": "true", "limit": 500})).json()
            assert refused["total"] == 1_000 and len(refused["calls"]) == 500
            assert (await http.get(f"/api/runs/{run_id}/calls", params={"limit": 501})).status_code == 400
    finally:
        stores.close()
    # Reading and ordering 10,000 calls once, then a page is a slice (2-core CI box: generous bounds).
    print(f"10,000 calls: first page {first_s * 1000:.0f} ms, then {later_s * 1000:.1f} ms a page")
    assert first_s < 3.0, first_s
    assert later_s < 0.25, later_s


async def test_agent_env_up_serves_the_explorer_behind_a_one_time_link(server, finished_runs, settings):
    """The real command: it finds Temporal and the gateway running, starts the background worker for its task
    queue (it outlives the explorer), prints a link that signs in once, and stops on Ctrl-C."""
    from agent_env.gateway.embedded import admin_token

    workplace, _ = finished_runs
    env = {**os.environ, "AGENT_ENV_TASK_QUEUE": "agentenv-explorer-up-tests"}
    command = [sys.executable, "-m", "agent_env", "up", "--port", "0", "--no-open"]
    proc = await asyncio.create_subprocess_exec(
        *command, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, env=env
    )
    assert proc.stdout is not None
    output = ""
    try:
        while (link := re.search(r"(http://127\.0\.0\.1:\d+)/login\?code=(\S+)", output)) is None:
            line = (await asyncio.wait_for(proc.stdout.readline(), 60)).decode()
            assert line, output
            output += line
        base, code = link.groups()
        async with httpx.AsyncClient(base_url=base) as http:
            assert (await http.get("/api/runs")).status_code == 401
            answer = await http.get(f"/login?code={code}")
            assert answer.status_code == 200 and COOKIE in http.cookies
            assert (await http.get("/api/runs")).status_code == 401  # the cookie alone
            http.headers[KEY_HEADER] = handed_key(answer.text)
            runs = await http.get("/api/runs", params={"task": "workplace"})
            assert workplace.run_id in {r["run_id"] for r in runs.json()["runs"]}
        async with httpx.AsyncClient(base_url=base) as other:
            assert (await other.get(f"/login?code={code}")).status_code == 401
    finally:
        proc.send_signal(signal.SIGINT)
        rest, _ = await asyncio.wait_for(proc.communicate(), 30)
        output += rest.decode()
        stop = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "agent_env", "worker", "stop", stdout=asyncio.subprocess.PIPE, env=env
        )
        stopped = (await asyncio.wait_for(stop.communicate(), 60))[0].decode()
    assert proc.returncode in (0, 130), output
    assert re.search(r"background worker started \(pid (\d+)\)", output), output
    assert "stopped" in stopped, stopped  # the worker `up` started was still running after the explorer stopped
    assert admin_token(settings) not in output


def test_up_explains_itself():
    from agent_env.cli.commands import app

    answer = CliRunner().invoke(app, ["up", "--help"])
    assert answer.exit_code == 0
    for words in ("one-time link", "--port", "--no-open", "worker", "explorer"):
        assert words in answer.output


def test_the_page_carries_the_hooks_the_browser_test_uses():
    script = "".join(p.read_text() for p in STATIC.glob("*.js"))
    for hook in ('testid: "run-row"', "runId:", 'testid: "step"', "stepId:", 'testid: "world-event"', "kind: e.kind"):
        assert hook in script, hook
    for hook in ('testid: "tool-call"', "refused: String(c.refused)", 'testid: "criterion"', "virtualTime("):
        assert hook in script, hook
    assert "innerHTML" not in script  # data becomes text, never markup
