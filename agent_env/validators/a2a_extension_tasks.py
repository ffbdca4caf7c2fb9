"""Validators of an A2A agent's extensions about its tasks' state: `trajectory/v1` (after a task, get answers
a well-formed trajectory of it) and `snapshot/v1` (save and load). Each applies only when the agent's card
declares its extension; otherwise its report holds one optional finding, `<name>.declared`.

snapshot/v1 moves an agent's state through object grants (short-lived URLs of the run's object store the agent
reads and writes): the validator checks the declaration, that both operations refuse a request without objects,
and then the save → load round trip through grants (`a2a_object_checks`), as trajectory/v1's objects variant.
"""

from __future__ import annotations

import uuid

from agent_env.agents.client import AgentClient, AgentReplyInvalid, AgentTimedOut, AgentUnreachable
from agent_env.agents.extensions import TRAJECTORY
from agent_env.gateway_client.wire import JsonObject
from agent_env.validators.a2a_extensions import answered, open_extension, same_origin
from agent_env.validators.a2a_object_checks import Rooms, outside_a_run, snapshot_round_trip, task_objects
from agent_env.validators.a2a_wire import SNAPSHOT, ExtensionProbe, ProbeAnswer
from agent_env.validators.report import Finding, ValidationReport

TRAJECTORY_PROMPT = "This is a protocol check: answer with one short sentence."
TRAJECTORY_STATES = {"pending", "running", "completed", "failed", "canceled"}

# -- trajectory/v1 --


async def verify_trajectory(
    agent: AgentClient, *, prompt: str = TRAJECTORY_PROMPT, deadline_s: float = 120.0, rooms: Rooms = outside_a_run
) -> ValidationReport:
    """`trajectory/v1`: after one task (a turn with `prompt`), get {task_id} answers {"trajectory": [...]};
    an unknown task is a 404; the cursor read (`after`) and the objects variant (the trajectory written through a
    grant on the run's store, from `rooms`) are checked when the card offers them."""
    report, probe = await open_extension(agent, "verify_a2a_trajectory", TRAJECTORY, "trajectory")
    if probe is None:
        return report
    report.checks.append(same_origin(probe, "trajectory", {"get": "POST"}))
    if not report.passed:
        return report
    try:
        reply = await agent.ask(prompt, {}, context_id=f"agent-env-validator-{uuid.uuid4().hex}", deadline_s=deadline_s)
    except (AgentUnreachable, AgentTimedOut, AgentReplyInvalid) as e:
        report.checks.append(
            Finding.failed(
                "trajectory.task", f"the task whose trajectory was to be read did not end: {e}", "answer A2A turns"
            )
        )
        return report
    if not reply.task_id:
        report.checks.append(
            Finding.failed(
                "trajectory.task", "the turn was answered without a task id", "answer a turn with an A2A task"
            )
        )
        return report
    report.checks.append(Finding.ok("trajectory.task"))
    got = await probe.call("get", "POST", {"task_id": reply.task_id})
    report.checks.append(
        answered(
            "trajectory.get",
            got,
            'serve the get operation: POST {"task_id"} answers the ended task\'s {"trajectory": [...]} (the '
            "reference framework answers 404 for a task that recorded no events: record at least its turn)",
        )
    )
    if got.ok:
        report.checks.append(_well_formed(got, reply.task_id))
    unknown = await probe.call("get", "POST", {"task_id": f"agent-env-validator-unknown-{uuid.uuid4().hex}"})
    report.checks.append(
        Finding.ok("trajectory.unknown_task", required=False)
        if unknown.status == 404
        else Finding.failed(
            "trajectory.unknown_task",
            unknown.said() + " for a task it never ran (wanted 404)",
            "answer 404 for a task id the agent has no trajectory of",
            required=False,
        )
    )
    if probe.offers("get", "after"):
        report.checks.append(await _events_read(probe, reply.task_id))
    if probe.offers("get", "objects"):
        report.checks.append(await task_objects(agent, rooms, reply.task_id))
    return report


def _well_formed(got: ProbeAnswer, task_id: str) -> Finding:
    body = got.json_object
    trajectory = (body or {}).get("trajectory")
    if isinstance(trajectory, list):
        return Finding.ok("trajectory.well_formed")
    return Finding.failed(
        "trajectory.well_formed",
        f'get {{task_id: {task_id!r}}} answered {got.text[:200]!r}: no "trajectory" list',
        'answer get with a JSON object {"trajectory": [<event>, ...]}, the task\'s events in order',
    )


async def _events_read(probe: ExtensionProbe, task_id: str) -> Finding:
    """The cursor read the card offers: {task_id, after: 0} answers a page of the task's events."""
    got = await probe.call("get", "POST", {"task_id": task_id, "after": 0})
    page = got.json_object or {}
    problems = [
        what
        for what, fine in (
            ("task_id", page.get("task_id") == task_id),
            ("events (a list)", isinstance(page.get("events"), list)),
            ("next (an integer)", isinstance(page.get("next"), int) and not isinstance(page.get("next"), bool)),
            ("has_more (a boolean)", isinstance(page.get("has_more"), bool)),
            (f"state (one of {sorted(TRAJECTORY_STATES)})", page.get("state") in TRAJECTORY_STATES),
        )
        if not fine
    ]
    if got.ok and not problems:
        return Finding.ok("trajectory.events")
    return Finding.failed(
        "trajectory.events",
        got.said() + (f" (wanted {', '.join(problems)})" if got.ok else ""),
        'the card offers get {"task_id", "after"}: answer {"context_id", "task_id", "state", "events", "next", '
        '"has_more"}, or do not list "after" on the card',
    )


# -- snapshot/v1 --


async def verify_snapshot(
    agent: AgentClient, *, rooms: Rooms = outside_a_run, deadline_s: float = 120.0
) -> ValidationReport:
    """`snapshot/v1`: the card declares save (POST) and load (PUT); both are served and refuse a request
    without objects (4xx, not 404/405); then a conversation saved through write grants on the run's store (`rooms`) and loaded
    into a fresh one through read grants goes on from the saved state."""
    report, probe = await open_extension(agent, "verify_a2a_snapshot", SNAPSHOT, "snapshot")
    if probe is None:
        return report
    report.checks.append(same_origin(probe, "snapshot", {"save": "POST", "load": "PUT"}))
    if not report.passed:
        return report
    missing = [name for name in ("save", "load") if not probe.declares(name)]
    report.checks.append(
        Finding.ok("snapshot.declaration", required=False)
        if not missing
        else Finding.failed(
            "snapshot.declaration",
            f"the card's params.methods do not list {missing}",
            'list them: "methods": {"save": {"method": "POST", ...}, "load": {"method": "PUT", ...}}',
            required=False,
        )
    )
    save = await probe.call("save", "POST", {"context_id": f"agent-env-validator-{uuid.uuid4().hex[:8]}"})
    report.checks.append(_refuses("snapshot.save", save, '{"context_id", "objects": {"trajectory": <write grant>}}'))
    load = await probe.call("load", "PUT", {})
    report.checks.append(_refuses("snapshot.load", load, '{"objects": {"trajectory": <read grant>}}'))
    if report.passed:  # (an operation not served: no round trip to try)
        report.checks.extend(await snapshot_round_trip(agent, rooms, deadline_s))
    return report


def _refuses(name: str, got: ProbeAnswer, shape: JsonObject | str) -> Finding:
    """An operation sent a body without its objects: served (not 404/405) and refused as a bad request."""
    if got.status in (400, 422):
        return Finding.ok(name)
    if got.status in (404, 405):
        problem = got.said() + ": the operation the card declares is not served"
    elif got.ok:
        problem = got.said() + ": it accepted a request without objects"
    else:
        problem = got.said() + " (wanted 400 for a request without objects)"
    return Finding.failed(
        name, problem, f"serve {got.method} {got.url} taking {shape} and answer 400 to a body that is not one"
    )
