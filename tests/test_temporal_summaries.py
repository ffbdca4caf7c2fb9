"""The Temporal UI names everything: read back through the Temporal API (describe, history, the metadata query
the UI uses) from real runs on the dev server.

Every scheduled activity and every local activity's marker carries a summary naming its step id and type, or
its world action and trigger; the run has a static summary and details (task, version, description, steps);
while it waits, its current details name the running steps and the virtual time.
"""

from __future__ import annotations

import asyncio
import json
import re
import tomllib

from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.api.sdk.v1 import WorkflowMetadata
from temporalio.converter import default as default_converter

from agent_env.planning.tasks import parse_task
from agent_env.spec.run import RunStatus, StepStatus
from agent_env.spec.verbs import VERBS
from agent_env.task_lookup import resolve_target
from agent_env.temporal import launch
from agent_env.workflows.details import MAX_SUMMARY

METADATA_QUERY = "__temporal_workflow_metadata"  # what the UI asks for a workflow's current details
WORLD_ACTION = re.compile(
    r"^(call_tool|instruct|set_tools) \S+ on \S+ \(trigger (\w+), virtual \d{4}-\d\d-\d\dT[\d:]+Z\)$"
)


def summary_of(event: HistoryEvent) -> str | None:
    if not event.HasField("user_metadata") or not event.user_metadata.HasField("summary"):
        return None
    return default_converter().payload_converter.from_payload(event.user_metadata.summary, str)


def local_activity(event: HistoryEvent) -> dict:
    """A local activity marker's own record: its activity type and id."""
    return json.loads(event.marker_recorded_event_attributes.details["data"].payloads[0].data)


async def scheduled_activities(handle) -> list[tuple[str, str, str | None]]:
    """(activity type, activity id, summary) of every activity and local activity of the run, in order."""
    out = []
    async for event in handle.fetch_history_events():
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            attrs = event.activity_task_scheduled_event_attributes
            out.append((attrs.activity_type.name, attrs.activity_id, summary_of(event)))
        elif event.event_type == EventType.EVENT_TYPE_MARKER_RECORDED and (
            event.marker_recorded_event_attributes.marker_name == "core_local_activity"
        ):
            record = local_activity(event)
            out.append((record["activity_type"], record["activity_id"], summary_of(event)))
    return out


async def current_details(handle) -> str:
    metadata = await handle.query(METADATA_QUERY, result_type=WorkflowMetadata)
    return metadata.current_details


async def test_a_workplace_run_names_every_step_and_world_action(client, settings, worker):
    spec = resolve_target("workplace")
    handle = await launch.start_run(client, settings, spec)
    state = await asyncio.wait_for(launch.wait_result(handle), 120)
    assert state.status is RunStatus.PASSED, state.error

    described = await handle.describe()
    assert await described.static_summary() == f"workplace v{spec.version}"
    static = await described.static_details()
    assert "`workplace`" in static and f"`{spec.version}`" in static and spec.description in static
    assert "`three_days` (wait_clock)" in static, "the steps are listed"

    types = {s.id: s.type for s in spec.steps}
    activities = await scheduled_activities(handle)
    kinds = {kind for kind, _, _ in activities}
    assert {"agentenv.push_world", "agentenv.record_run"} <= kinds
    assert not kinds & {"agentenv.run_step", "agentenv.world_action"}, "a new run schedules named types only"
    triggers_named, verbs = set(), set()
    for kind, activity_id, summary in activities:
        assert summary, f"{kind} {activity_id} has no summary"
        assert len(summary) <= MAX_SUMMARY
        assert "ORD-100" not in summary and "@" not in summary, f"arguments leaked into a summary: {summary}"
        if kind.startswith("agentenv.step."):  # what the timeline shows: the step's type
            assert kind == f"agentenv.step.{types[activity_id]}"
            assert summary == f"{activity_id} ({types[activity_id]})"
        elif kind.startswith("agentenv.world."):  # ... and the world action's verb
            match = WORLD_ACTION.match(summary)
            assert match, summary
            assert kind == f"agentenv.world.{match[1]}"
            triggers_named.add(match[2])
            verbs.add(match[1])
    assert {"morning_rush", "sam_triages", "dana_replies", "deadline"} <= triggers_named
    assert {"call_tool", "set_tools"} <= verbs
    # every step that ran as an activity, a regular one (ActivityTaskScheduled) or a local one (its marker)
    ran = {activity_id for kind, activity_id, _ in activities if kind.startswith("agentenv.step.")}
    assert ran == {s.id for s in spec.steps if s.type not in VERBS or not VERBS[s.type].in_workflow}
    assert "call_tool send_email on desk (trigger morning_rush, virtual 2026-03-02T14:30:00Z)" in [
        s for _, _, s in activities
    ]
    assert (await current_details(handle)).startswith("**Finished** passed, score 1")


async def test_a_run_planned_before_named_activities_takes_them_through_a_patch(client, settings, worker):
    """A run an older planner started (behaviour 1) asks its history: a fresh one records the patch and runs
    its steps under named types; recorded histories without the marker replay the old way (test_replay)."""
    inp = launch.plan(resolve_target("hello"), launch.new_run_id("hello"), settings)
    inp.behaviour = 1
    handle = await launch.start(client, settings, inp)
    state = await asyncio.wait_for(launch.wait_result(handle), 60)
    assert state.status is RunStatus.PASSED, state.error
    markers = [
        event.marker_recorded_event_attributes
        async for event in handle.fetch_history_events()
        if event.event_type == EventType.EVENT_TYPE_MARKER_RECORDED
    ]
    patches = [m.details["patch-data"].payloads[0].data for m in markers if m.marker_name == "core_patch"]
    assert any(b"named-activities" in p for p in patches), patches
    kinds = [kind for kind, _, _ in await scheduled_activities(handle)]
    assert any(k.startswith("agentenv.step.") for k in kinds) and "agentenv.run_step" not in kinds, kinds


WAITING = """
id = "named"
version = "7"
description = "A note pad, a trigger at 09:30 and a step the test holds."

[clock]
start = "2026-05-01T09:00:00Z"
mode = "event_driven"

[[triggers]]
id = "nine_thirty"
when = {{ type = "time", at = "+30m" }}
actions = [{{ type = "call_tool", env = "pad", tool = "write_note", arguments = {{ key = "k", text = "secret text" }} }}]

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

[[steps]]
id = "hour"
type = "wait_clock"
depends_on = ["hold"]
config = {{ seconds = 3600 }}
"""


async def test_a_waiting_run_shows_its_running_steps_and_virtual_time(client, settings, worker, tmp_path):
    gate = tmp_path / "gate"
    spec = parse_task(tomllib.loads(WAITING.format(gate=gate)), "named")
    handle = await launch.start_run(client, settings, spec)
    for _ in range(400):
        state = await launch.query_state(handle)
        if state.steps["hold"].status is StepStatus.RUNNING:
            break
        await asyncio.sleep(0.05)
    assert state.steps["hold"].status is StepStatus.RUNNING
    details = await current_details(handle)
    assert f"- `hold` (wait_file) since {state.steps['hold'].started_at.isoformat().replace('+00:00', 'Z')}" in details
    assert "**Virtual time** 2026-05-01T09:00:00Z (event_driven" in details
    assert "step `hold`" in details and "trigger `nine_thirty` at 2026-05-01T09:30:00Z" in details, details

    described = await handle.describe()
    assert await described.static_summary() == "named v7"
    assert spec.description in (await described.static_details() or "")

    gate.touch()
    final = await asyncio.wait_for(launch.wait_result(handle), 60)
    assert final.status is RunStatus.PASSED, final.error
    summaries = [s for _, _, s in await scheduled_activities(handle)]
    assert "hold (wait_file)" in summaries
    assert "call_tool write_note on pad (trigger nine_thirty, virtual 2026-05-01T09:30:00Z)" in summaries
    assert not any("secret text" in (s or "") for s in summaries), "arguments never enter a summary"
    assert (await current_details(handle)).startswith("**Finished** passed")


async def test_the_runs_time_limit_is_a_named_timer(client, settings, worker):
    limited = {
        "id": "limited",
        "timeout": "1s",
        "steps": [{"id": "long", "type": "sleep", "config": {"seconds": 60}}],
    }
    handle = await launch.start_run(client, settings, parse_task(limited, "limited"))
    state = await asyncio.wait_for(launch.wait_result(handle), 30)
    assert state.status is RunStatus.ERROR and state.error == "the run timed out (its limit is 1s)"
    timers = [
        summary_of(event)
        async for event in handle.fetch_history_events()
        if event.event_type == EventType.EVENT_TYPE_TIMER_STARTED
    ]
    assert timers == ["the run's time limit (1s)"]


PACED = """
id = "paced"
[clock]
start = "2026-06-01T00:00:00Z"
mode = "paced"
rate = 3600

[[triggers]]
id = "soon"
when = { type = "time", at = "+30m" }
actions = [{ type = "call_tool", env = "pad", tool = "write_note", arguments = { key = "k", text = "t" } }]

[[steps]]
id = "pad"
type = "deploy_env"
config = { env_id = "notes" }

[[steps]]
id = "rules"
type = "register_env_triggers"
depends_on = ["pad"]
"""


async def test_a_paced_clocks_waits_are_named(client, settings, worker):
    handle = await launch.start_run(client, settings, parse_task(tomllib.loads(PACED), "paced"))
    state = await asyncio.wait_for(launch.wait_result(handle), 60)
    assert state.status is RunStatus.PASSED, state.error
    activities = await scheduled_activities(handle)
    paces = [s for kind, _, s in activities if kind == "agentenv.pace"]
    assert paces and all(
        re.fullmatch(r"pace the clock \d+\.\d\ds from virtual 2026-06-01T00:[\d:.]+Z", s) for s in paces
    )
    assert "call_tool write_note on pad (trigger soon, virtual 2026-06-01T00:30:00Z)" in [s for _, _, s in activities]
