"""Poison inputs never wedge a run: absurd numbers fail clearly and fast, huge data stays out of history,
slow agents are asked once, and hits a run refuses are parked with their error."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import free_port
from gateway_util import mcp_client

from agent_env.errors import BadInput
from agent_env.gateway.embedded import connect as gateway_connect
from agent_env.planning.tasks import parse_task
from agent_env.spec.run import RunStatus, StepStatus
from agent_env.spec.world_state import MAX_FIELD_BYTES, TriggerHit, clip_fields, json_size
from agent_env.temporal import launch

AGENT_ENV = str(Path(sys.executable).parent / "agent-env")
BOX = {"id": "box", "type": "deploy_env", "config": {"env_id": "box", "agents": {"sam": "all", "dana": "all"}}}
BOX_ENV = 'name = "box"\ndata = []\n[[apps]]\napp = "poison_app:Poison"\n[roles.all]\ntools = ["*"]\n'


def box_env() -> dict:
    return json.loads(json.dumps(BOX))


def task_of(data: dict, root: Path):
    """The task in a bundle whose env `box` is the poison app (found by the gateway on PYTHONPATH)."""
    (root / "envs" / "box").mkdir(parents=True, exist_ok=True)
    (root / "envs" / "box" / "env.toml").write_text(BOX_ENV)
    return parse_task(data, "t", root)


def test_an_absurd_timeout_is_a_clear_error_not_a_traceback(tmp_path):
    task = tmp_path / "t.toml"
    task.write_text('id = "t"\ntimeout = "99999999999d"\n[[steps]]\nid = "a"\ntype = "echo"\n')
    done = subprocess.run(
        [AGENT_ENV, "run", str(task)],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "AGENT_ENV_TASK_QUEUE": "agentenv-poison-tests"},
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr and "OverflowError" not in done.stderr
    assert "timeout" in done.stderr and "100 years" in done.stderr
    for bad in ("99999999999d", 1e300, float("inf")):
        with pytest.raises(BadInput, match="100 years"):
            parse_task({"id": "t", "steps": [{"id": "a", "type": "echo", "timeout": bad}]}, "t")


async def test_wait_clock_fed_an_absurd_number_fails_the_run_within_seconds(client, settings, worker, tmp_path):
    task = {
        "id": "absurd",
        "clock": {"start": "2026-01-01T00:00:00Z", "mode": "event_driven"},
        "steps": [
            box_env(),
            {
                "id": "n",
                "type": "call_tool",
                "depends_on": ["box"],
                "config": {"env": "box", "tool": "number", "arguments": {"value": 1e300}},
            },
            {
                "id": "wait",
                "type": "wait_clock",
                "depends_on": ["n"],
                "config": {"seconds": "${steps.n.outputs.result.value}"},
            },
        ],
    }
    started = time.monotonic()
    handle = await launch.start_run(client, settings, task_of(task, tmp_path))
    state = await asyncio.wait_for(launch.wait_result(handle), 10)
    assert time.monotonic() - started < 10
    assert state.status is RunStatus.ERROR
    assert state.steps["wait"].status is StepStatus.FAILED
    assert "1e+300" in state.error and "`seconds`" in state.error, state.error


PERSONA_TASK = {
    "id": "floods",
    "clock": {"start": "2026-01-01T00:00:00Z", "mode": "frozen"},
    "personas": {"dana": {"agent": "dana", "email": "dana@example.com"}},
    "triggers": [
        {
            "id": "dana_hears",
            "when": {"type": "persona", "env": "box", "persona": "dana", "says": {"contains": "hello"}},
            "actions": [
                {
                    "type": "call_tool",
                    "env": "box",
                    "tool": "send_email",
                    "agent": "dana",
                    "arguments": {
                        "sender": "dana@example.com",
                        "to": ["sam@example.com"],
                        "body": "re: ${match.arguments.body}",
                    },
                }
            ],
        },
        {
            "id": "flood",
            "when": {"type": "tool_call", "env": "box", "tool": "ping", "barrier": "10s"},
            "actions": [{"type": "call_tool", "env": "box", "tool": "big", "arguments": {"megabytes": 5}}],
        },
        {
            "id": "seen_big",
            "when": {"type": "tool_call", "env": "box", "tool": "big", "agents": ["sam"], "barrier": "10s"},
            "actions": [{"type": "call_tool", "env": "box", "tool": "ping"}],
        },
    ],
    "steps": [
        box_env(),
        {"id": "rules", "type": "register_env_triggers", "depends_on": ["box"]},
        {"id": "hold", "type": "wait_file", "depends_on": ["rules"], "config": {"path": "GATE"}},
    ],
}


async def largest_event(handle) -> int:
    history = await handle.fetch_history()
    return max(event.ByteSize() for event in history.events)


async def test_huge_results_and_emails_leave_the_run_healthy(client, settings, worker, tmp_path):
    gate = tmp_path / "gate"
    task = json.loads(json.dumps(PERSONA_TASK).replace("GATE", str(gate)))
    handle = await launch.start_run(client, settings, task_of(task, tmp_path))
    for _ in range(400):
        state = await launch.query_state(handle)
        if state.steps["hold"].status is StepStatus.RUNNING or state.status.finished:
            break
        await asyncio.sleep(0.05)
    assert state.steps["hold"].status is StepStatus.RUNNING, state
    instance = state.steps["box"].outputs["instance"]
    async with gateway_connect(settings) as gateway:
        token = await gateway.token(instance, "sam")
        base = gateway.base_url
    async with mcp_client(base, instance, token) as mcp:
        sent = await mcp.call_tool(
            "send_email", {"sender": "sam@example.com", "to": ["dana@example.com"], "body": "hello " + "y" * 2_000_000}
        )
        assert not sent.is_error, sent
        await mcp.call_tool("ping", {})  # its action's result is 5 MB
        big = await mcp.call_tool("big", {"megabytes": 5})  # a trigger matches this 5 MB result
        assert len(big.structured_content["text"]) == 5_000_000
        for _ in range(200):  # the e-mail's hit has no barrier: it comes soon after
            fired = {e.trigger for e in (await launch.query_state(handle)).world.events if e.kind == "fired"}
            if {"dana_hears", "flood", "seen_big"} <= fired:
                break
            await asyncio.sleep(0.05)
    gate.touch()
    final = await asyncio.wait_for(launch.wait_result(handle), 60)
    assert final.status is RunStatus.PASSED, final.error
    fired = {e.trigger: e for e in final.world.events if e.kind == "fired"}
    body = fired["dana_hears"].detail["match"]["arguments"]["body"]
    assert body.startswith("hello yyy") and "clipped: 2000006 bytes" in body
    actions = [e.detail for e in final.world.events if e.kind == "action"]
    assert all("error" not in a for a in actions), actions
    assert any("clipped: 5000000 bytes" in json.dumps(a) for a in actions), "the action's 5 MB result, clipped"
    assert "clipped: 5000000 bytes" in fired["seen_big"].detail["match"]["result"]["text"]
    assert await largest_event(handle) < 256 * 1024, "no payload near Temporal's limit"


def test_clipped_matches_keep_their_shape_and_say_how_big_they_were():
    match = {
        "agent": "sam",
        "tool": "send_email",
        "arguments": {"to": ["dana@example.com"], "body": "z" * 3_000_000},
        "result": {"rows": [{"n": i, "text": "q" * 500} for i in range(10_000)]},
    }
    clipped = clip_fields(match)
    assert clipped["agent"] == "sam" and clipped["arguments"]["to"] == ["dana@example.com"]
    assert clipped["arguments"]["body"].endswith("[clipped: 3000000 bytes]")
    assert all(json_size(v) <= MAX_FIELD_BYTES for v in clipped.values())
    assert clip_fields({"small": {"a": [1, 2]}}) == {"small": {"a": [1, 2]}}, "small values are untouched"


async def test_a_refused_hit_is_parked_with_its_error(client, settings, worker, tmp_path):
    from agent_env.gateway.delivery import Delivery
    from agent_env.stores.local import SqliteDocumentStore

    gate = tmp_path / "gate"
    task = json.loads(json.dumps(PERSONA_TASK).replace("GATE", str(gate)))
    handle = await launch.start_run(client, settings, task_of(task, tmp_path))
    for _ in range(400):
        state = await launch.query_state(handle)
        if state.steps["hold"].status is StepStatus.RUNNING:
            break
        await asyncio.sleep(0.05)
    delivery = Delivery(SqliteDocumentStore(tmp_path / "docs.sqlite"), settings)
    try:
        hit = TriggerHit(
            trigger="no_such_trigger", instance=state.steps["box"].outputs["instance"], virtual_time=state.started_at
        )
        started = time.monotonic()
        assert await delivery.send(handle.id, hit, barrier_s=10) is None
        assert time.monotonic() - started < 5, "refused once, not retried"
        parked = delivery.parked(handle.id)
        assert len(parked) == 1 and "no trigger 'no_such_trigger'" in parked[0]["parked"]["error"]
        assert delivery.resend_pending() == 0, "a parked hit is not sent again"
    finally:
        await delivery.close()
        gate.touch()
    assert (await asyncio.wait_for(launch.wait_result(handle), 30)).status is RunStatus.PASSED


@pytest.mark.slow
async def test_a_slow_agent_turn_is_asked_exactly_once(client, settings, worker):
    """A 60 s turn of an agent the run asks (the other side is played by a trainer) is asked once: the
    asking activity heartbeats while it waits."""
    import uvicorn
    from starlette.applications import Starlette

    from agent_env.agents.sdk import Agent, Answer, Turn, a2a_routes

    class Slow(Agent):
        name = "slow"
        asked = 0

        async def answer(self, turn: Turn) -> Answer:
            Slow.asked += 1
            await asyncio.sleep(60)
            return Answer(text="done, slowly")

    port = free_port()
    url = f"http://127.0.0.1:{port}/"
    routes, _ = a2a_routes(Slow(), url)
    server = uvicorn.Server(uvicorn.Config(Starlette(routes=routes), host="127.0.0.1", port=port, log_level="warning"))
    serving = asyncio.create_task(server.serve())
    try:
        while not server.started:
            await asyncio.sleep(0.01)
        task = {
            "id": "slow",
            "steps": [
                {
                    "id": "slow",
                    "type": "deploy_agent",
                    "config": {"record": {"name": "slow", "type": "a2a", "config": {"url": url}}},
                },
                {"id": "boss", "type": "deploy_agent", "config": {"record": {"name": "boss", "type": "trainer"}}},
                {
                    "id": "talk",
                    "type": "prompt_agent",
                    "depends_on": ["slow", "boss"],
                    "timeout": "5m",
                    "config": {
                        "agent": "slow",
                        "prompt": "take your time",
                        "turn_deadline": "90s",
                        "conversation": {"partner": "boss", "max_turns": 1},
                    },
                },
            ],
        }
        handle = await launch.start_run(client, settings, parse_task(task, "t"))
        state = await asyncio.wait_for(launch.wait_result(handle), 150)
        assert state.status is RunStatus.PASSED, state.error
        assert state.steps["talk"].outputs["answer"] == "done, slowly"
        assert Slow.asked == 1, f"asked {Slow.asked} times"
    finally:
        server.should_exit = True
        await serving


async def test_parked_hits_are_listed_by_the_gateway(tmp_path):
    """A hit the gateway parked never reaches the run's history; the admin API (what `runs show` reads)
    lists it with its error, for its run only."""
    from datetime import UTC, datetime

    from gateway_util import running_gateway

    async with running_gateway(tmp_path / "gw") as (gateway, base, admin):
        hit = TriggerHit(trigger="t", instance="i", virtual_time=datetime(2026, 1, 1, tzinfo=UTC))
        gateway.delivery._park("u-1", "run-a", hit, "the run refused it: no trigger 't'")
        listed = await admin.parked_hits("run-a")
        assert [(p["hit"]["trigger"], p["parked"]["error"]) for p in listed] == [
            ("t", "the run refused it: no trigger 't'")
        ]
        assert await admin.parked_hits("run-b") == []
