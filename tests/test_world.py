"""World dynamics in real runs: the clock, triggers of every kind, determinism, agents' calls."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta

import pytest
from gateway_util import mcp_client

from agent_env.errors import BadInput
from agent_env.gateway.embedded import connect as gateway_connect
from agent_env.planning.tasks import parse_task
from agent_env.spec.run import RunStatus, StepStatus
from agent_env.task_lookup import resolve_target
from agent_env.temporal import launch


async def run_spec(client, settings, spec, timeout=120):
    return await asyncio.wait_for(launch.wait_result(await launch.start_run(client, settings, spec)), timeout)


def comparable_events(state):
    return [(e.kind, e.trigger, e.virtual_time, e.detail) for e in state.world.events]


async def final_data(settings, state):
    async with gateway_connect(settings) as gateway:
        instance = state.steps["desk"].outputs["instance"]
        return (await gateway.data(instance, "data/get"))["parts"]


async def test_workplace_is_deterministic(client, settings, worker):
    first = await run_spec(client, settings, resolve_target("workplace"))
    second = await run_spec(client, settings, resolve_target("workplace"))
    for state in (first, second):
        assert state.status is RunStatus.PASSED, state.error
        assert state.score == 1.0
    assert comparable_events(first) == comparable_events(second), "same events, same order, same virtual times"
    assert await final_data(settings, first) == await final_data(settings, second), "same final state"
    events = first.world.events
    fired = [(e.trigger, e.virtual_time) for e in events if e.kind == "fired"]
    day = datetime(2026, 3, 2, 14, 30, tzinfo=UTC)
    assert [t for t, _ in fired].count("morning_rush") == 3
    assert [v for t, v in fired if t == "morning_rush"] == [day, day + timedelta(days=1), day + timedelta(days=2)]
    assert ("deadline", datetime(2026, 3, 4, 22, 0, tzinfo=UTC)) in fired
    order = [t for t, _ in fired]
    assert order.index("dana_replies") > order.index("sam_writes_dana"), "Dana answers after she is written to"
    assert order.index("refunds_unlocked") > order.index("lee_verifies")
    actions = [e.detail for e in events if e.kind == "action"]
    assert all("error" not in a for a in actions), [a for a in actions if "error" in a]
    assert any(e.kind == "cancelled" and e.detail["triggers"] == ["refund_reminder"] for e in events)
    assert first.steps["three_days"].outputs["now"] == "2026-03-05T13:00:00Z"


AGENT_TASK = """
id = "agents_provoke"
[clock]
start = "2026-05-01T09:00:00Z"
mode = "frozen"

[[triggers]]
id = "pong"
when = {{ type = "tool_call", env = "pad", tool = "write_note", where = [{{ path = "arguments.key", equals = "ping" }}], barrier = "5s" }}
actions = [{{ type = "call_tool", env = "pad", tool = "write_note", arguments = {{ key = "pong", text = "${{match.arguments.text}}!" }} }}]
repeat = true

[[triggers]]
id = "later"
when = {{ type = "tool_call", env = "pad", tool = "write_note", agents = ["agent"], where = [{{ path = "arguments.key", equals = "later" }}] }}
actions = [{{ type = "call_tool", env = "pad", tool = "write_note", arguments = {{ key = "later_done", text = "${{clock.now}}" }} }}]

[[steps]]
id = "pad"
type = "deploy_env"
config = {{ env_id = "notes" }}

[[steps]]
id = "rules"
type = "register_env_triggers"
depends_on = ["pad"]

[[steps]]
id = "hold"
type = "wait_file"
depends_on = ["rules"]
config = {{ path = "{gate}" }}
"""


async def test_agents_calls_fire_triggers_through_the_run(client, settings, worker, tmp_path):
    gate = tmp_path / "gate"
    handle = await launch.start_run(
        client, settings, parse_task(__import__("tomllib").loads(AGENT_TASK.format(gate=gate)), "t")
    )
    for _ in range(200):
        state = await launch.query_state(handle)
        if state.steps["hold"].status is StepStatus.RUNNING:
            break
        await asyncio.sleep(0.05)
    instance = state.steps["pad"].outputs["instance"]
    async with gateway_connect(settings) as gateway:
        token = await gateway.token(instance, "agent")
        base = gateway.base_url
    async with mcp_client(base, instance, token) as mcp:
        latencies = []
        for i in range(3):
            t = time.perf_counter()
            await mcp.call_tool("write_note", {"key": "ping", "text": f"hello {i}"})
            latencies.append(time.perf_counter() - t)
            pong = await mcp.call_tool("read_note", {"key": "pong"})
            assert pong.structured_content["text"] == f"hello {i}!", "with a barrier the effect is there on return"
        await mcp.call_tool("write_note", {"key": "later", "text": "x"})
        for _ in range(100):  # no barrier: it comes soon after
            later = await mcp.call_tool("read_note", {"key": "later_done"})
            if not later.is_error:
                break
            await asyncio.sleep(0.05)
        assert later.structured_content["text"] == "2026-05-01T09:00:00Z"
        await mcp.call_tool("write_note", {"key": "later", "text": "again"})  # `later` fires once only
    gate.touch()
    final = await launch.wait_result(handle)
    assert final.status is RunStatus.PASSED
    fired = [e for e in final.world.events if e.kind == "fired"]
    assert [e.trigger for e in fired] == ["pong", "pong", "pong", "later"]
    assert fired[0].detail["match"]["agent"] == "agent" and fired[0].detail["match"]["arguments"]["key"] == "ping"
    assert max(latencies) < 5, "the barrier waited for the run, not for its timeout"


PACED = """
id = "paced"
[clock]
start = "2026-06-01T00:00:00Z"
mode = "paced"
rate = 3600

[[triggers]]
id = "tick"
when = { type = "time", at = "+1h", every = "1h", count = 2 }
actions = [{ type = "call_tool", env = "pad", tool = "write_note", arguments = { key = "tick${trigger.fires}", text = "${clock.now}" } }]

[[steps]]
id = "pad"
type = "deploy_env"
config = { env_id = "notes" }

[[steps]]
id = "rules"
type = "register_env_triggers"
depends_on = ["pad"]

[[steps]]
id = "wait"
type = "wait_clock"
depends_on = ["rules"]
config = { until = "+2h30m" }

[[steps]]
id = "check"
type = "check_state"
depends_on = ["wait"]
[steps.config]
env = "pad"
[[steps.config.checks]]
name = "the first tick was stamped at exactly 01:00"
tool = "read_note"
arguments = { key = "tick1" }
path = "updated_at"
equals = "2026-06-01T01:00:00Z"
[[steps.config.checks]]
name = "the second at exactly 02:00"
tool = "read_note"
arguments = { key = "tick2" }
path = "updated_at"
equals = "2026-06-01T02:00:00Z"
"""


async def test_paced_clock_fires_at_exact_virtual_times(client, settings, worker):
    started = time.monotonic()
    state = await run_spec(client, settings, parse_task(__import__("tomllib").loads(PACED), "t"))
    wall = time.monotonic() - started
    assert state.status is RunStatus.PASSED, [c.detail for c in state.steps["check"].score.criteria]
    assert [e.virtual_time.strftime("%H:%M") for e in state.world.events if e.kind == "fired"] == ["01:00", "02:00"]
    assert 2.3 < wall < 8, f"2.5 virtual hours at 3600x take about 2.5 real seconds, took {wall:.2f}"


def bad(task_toml: str) -> str:
    with pytest.raises(BadInput) as e:
        parse_task(__import__("tomllib").loads(task_toml), "t")
    return str(e.value)


BASE = """
id = "t"
[clock]
start = "2026-01-01T00:00:00Z"
[[steps]]
id = "pad"
type = "deploy_env"
config = { env_id = "notes" }
"""


def trigger(when: str, actions: str = '[{ type = "end_run" }]', tid: str = "t1") -> str:
    return f'[[triggers]]\nid = "{tid}"\nwhen = {when}\nactions = {actions}\n'


def test_trigger_spec_errors_name_the_field():
    assert "triggers[0].when.tool: environment 'pad' has no tool 'write_nte'" in bad(
        BASE + trigger('{ type = "tool_call", env = "pad", tool = "write_nte" }')
    )
    assert "must start with arguments, result, agent, role or tool" in bad(
        BASE
        + trigger(
            '{ type = "tool_call", env = "pad", tool = "write_note", where = [{ path = "args.key", equals = 1 }] }'
        )
    )
    assert "triggers[0].when.at: 'tomorrow' is not a time" in bad(BASE + trigger('{ type = "time", at = "tomorrow" }'))
    assert "triggers[0].when.at: '+P1D': write the offset" in bad(BASE + trigger('{ type = "time", at = "+P1D" }'))
    cycle = bad(
        BASE + trigger('{ type = "time", after = "b" }', tid="a") + trigger('{ type = "time", after = "a" }', tid="b")
    )
    assert "cycle of `after` references a → b → a" in cycle
    assert "'nowhere' is not a deploy_env step" in bad(
        BASE + trigger('{ type = "time", at = "+1h" }', '[{ type = "call_tool", env = "nowhere", tool = "x" }]')
    )
    assert "no persona 'dana'" in bad(BASE + trigger('{ type = "persona", env = "pad", persona = "dana" }'))
    assert "needs `count` or `until`" in bad(BASE + trigger('{ type = "time", at = "+1h", every = "1h" }'))
    assert "needs an offset" in bad(BASE.replace('"2026-01-01T00:00:00Z"', '"2026-01-01T00:00:00"'))
    assert "'ghost' is not a trigger" in bad(
        BASE + '[[steps]]\nid = "r"\ntype = "register_env_triggers"\nconfig = { triggers = ["ghost"] }\n'
    )
    no_clock = BASE.replace('[clock]\nstart = "2026-01-01T00:00:00Z"\n', "")
    assert "wait_clock needs the task's clock" in bad(
        no_clock + '[[steps]]\nid = "w"\ntype = "wait_clock"\nconfig = { seconds = 5 }\n'
    )
    assert "relative to the clock's start, but the task has no [clock]" in bad(
        no_clock + trigger('{ type = "time", at = "+1h" }')
    )


CLOCK_MOVES = """
id = "moves"
[clock]
start = "2026-07-01T00:00:00Z"
mode = "frozen"

[[triggers]]
id = "at_one"
when = { type = "time", at = "+1h" }
actions = [{ type = "call_tool", env = "pad", tool = "write_note", arguments = { key = "one", text = "${clock.now}" } }]

[[triggers]]
id = "stop"
when = { type = "time", at = "+5h" }
actions = [{ type = "end_run", reason = "closing time" }]

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
id = "go"
type = "sync_env_clock"
depends_on = ["jump"]
config = { mode = "event_driven" }

[[steps]]
id = "wait"
type = "wait_clock"
depends_on = ["go"]
config = { until = "+1d" }

[[steps]]
id = "never"
type = "call_tool"
depends_on = ["wait"]
config = { env = "pad", tool = "list_notes" }
"""


async def test_setting_the_clock_passes_through_events_and_end_run_stops_the_run(client, settings, worker):
    state = await run_spec(client, settings, parse_task(__import__("tomllib").loads(CLOCK_MOVES), "t"))
    events = [(e.kind, e.trigger, e.virtual_time.strftime("%H:%M"), e.detail) for e in state.world.events]
    fired = [(t, v) for k, t, v, _ in events if k == "fired"]
    assert fired == [("at_one", "01:00"), ("stop", "05:00")], "moving the clock to 02:00 fired 01:00 on the way"
    clock_changes = [d for k, _, _, d in events if k == "clock"]
    assert [c.get("by") for c in clock_changes] == [None, "step jump", "step go"], "every clock change is recorded"
    note = next(d for k, t, _, d in events if k == "action" and t == "at_one")["result"]
    assert note["updated_at"] == "2026-07-01T01:00:00Z"
    assert ("ended", "stop", "05:00", {"reason": "closing time"}) in events
    assert state.steps["wait"].status is StepStatus.CANCELLED and "closing time" in state.steps["wait"].error
    assert state.steps["never"].status is StepStatus.SKIPPED
    assert state.status is RunStatus.PASSED, "ending the world is not an error"
