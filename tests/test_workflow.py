"""The task-run workflow on a real Temporal dev server, with an in-process worker."""

from __future__ import annotations

import asyncio

from agent_env.planning.tasks import parse_task
from agent_env.spec.run import RunState, RunStatus, StepStatus
from agent_env.temporal import launch


def step(id, type="echo", **kw):
    return {"id": id, "type": type, **kw}


def task(*steps, id="t"):
    return {"id": id, "version": "3", "steps": list(steps)}


def check(id, depends_on, *checks, **config):
    return step(id, "check", depends_on=depends_on, config={"checks": list(checks), **config})


async def wait_for_state(handle, predicate, timeout=20.0) -> RunState:
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        state = await launch.query_state(handle)
        if predicate(state):
            return state
        assert asyncio.get_running_loop().time() < deadline, f"state never matched: {state}"
        await asyncio.sleep(0.05)


async def test_hello_passes_with_score_one(run_task):
    from agent_env.task_lookup import resolve_target

    state = await run_task(resolve_target("hello").model_dump(mode="json"))
    assert state.status is RunStatus.PASSED
    assert state.score == 1.0
    assert state.steps["notes"].outputs["instance"] == f"{state.run_id}.notes"
    assert state.steps["greet_ada"].outputs["result"]["key"] == "ada"
    assert state.steps["verify"].outputs["values"]["both greetings are stored"] == 2
    assert state.steps["verify"].score.value == 1.0
    assert all(s.status is StepStatus.SUCCEEDED for s in state.steps.values())
    for s in state.steps.values():
        assert s.started_at and s.finished_at and s.finished_at >= s.started_at and s.duration_ms is not None


async def test_independent_steps_run_concurrently(client, settings, worker, tmp_path):
    gate_a, gate_b = tmp_path / "a", tmp_path / "b"
    spec = parse_task(
        task(
            step("a", "wait_file", config={"path": str(gate_a)}),
            step("b", "wait_file", config={"path": str(gate_b)}),
            step("c", depends_on=["a", "b"], config={"value": "after both"}),
        ),
        "x",
    )
    handle = await launch.start_run(client, settings, spec)
    # Both independent steps are running at the same time, and the dependent one waits for both.
    state = await wait_for_state(
        handle, lambda s: s.steps["a"].status == "running" and s.steps["b"].status == "running"
    )
    assert state.steps["c"].status is StepStatus.PENDING
    gate_a.touch()
    state = await wait_for_state(handle, lambda s: s.steps["a"].status == "succeeded")
    assert state.steps["c"].status is StepStatus.PENDING, "c must wait for b too"
    gate_b.touch()
    final = await launch.wait_result(handle)
    assert final.steps["c"].status is StepStatus.SUCCEEDED
    assert final.steps["c"].started_at >= max(final.steps["a"].finished_at, final.steps["b"].finished_at)


async def test_outputs_flow_to_later_steps(run_task):
    state = await run_task(
        task(
            step("a", config={"value": {"n": 2, "names": ["Ada", "Alan"]}}),
            step("b", depends_on=["a"], config={"value": "first: ${steps.a.outputs.value.names.0}"}),
            check(
                "v",
                ["a", "b"],
                {"name": "typed", "value": "${steps.a.outputs.value.n}", "equals": 2},
                {"name": "text", "value": "${steps.b.outputs.value}", "equals": "first: Ada"},
                {"name": "run id", "value": "${run.id}", "matches": "^t-"},
            ),
        )
    )
    assert state.status is RunStatus.PASSED, state
    assert state.steps["b"].outputs == {"value": "first: Ada"}


async def test_low_score_fails_the_run_but_not_the_workflow(run_task):
    state = await run_task(
        task(
            step("a", config={"value": 3}),
            check(
                "v",
                ["a"],
                {"name": "is two", "value": "${steps.a.outputs.value}", "equals": 2},
                {"name": "is odd", "value": "${steps.a.outputs.value}", "one_of": [1, 3]},
            ),
        )
    )
    assert state.status is RunStatus.FAILED
    assert state.score == 0.5
    rows = {c.name: c for c in state.steps["v"].score.criteria}
    assert not rows["is two"].passed and rows["is two"].detail == "expected equals 2, got 3"


async def test_fail_policy_stops_the_run(run_task, tmp_path):
    state = await run_task(
        task(
            step("bad", "fail", config={"message": "the world is on fire"}),
            step("slow", "wait_file", config={"path": str(tmp_path / "never")}),
            step("after", depends_on=["bad"]),
        )
    )
    assert state.status is RunStatus.ERROR
    assert state.error == "step 'bad' failed: the world is on fire"
    assert state.steps["bad"].status is StepStatus.FAILED
    assert state.steps["slow"].status is StepStatus.CANCELLED, "running steps are cancelled"
    assert state.steps["after"].status is StepStatus.SKIPPED


async def test_continue_and_skip_dependents_policies(run_task):
    state = await run_task(
        task(
            step("tolerated", "fail", on_failure="continue"),
            step("runs_anyway", depends_on=["tolerated"], config={"value": "${steps.tolerated.status}"}),
            step("optional", "fail", on_failure="skip_dependents"),
            step("skipped", depends_on=["optional"]),
            step("skipped_too", depends_on=["skipped"]),
            step("other_branch"),
        )
    )
    assert state.status is RunStatus.PASSED, "tolerated failures do not error the run"
    assert state.steps["runs_anyway"].outputs == {"value": "failed"}
    assert state.steps["skipped"].status is StepStatus.SKIPPED and "optional" in state.steps["skipped"].error
    assert state.steps["skipped_too"].status is StepStatus.SKIPPED
    assert state.steps["other_branch"].status is StepStatus.SUCCEEDED


async def test_retries_recover_transient_failures(run_task):
    state = await run_task(task(step("f", "flaky", config={"fail_times": 2})))
    assert state.status is RunStatus.PASSED
    assert state.steps["f"].attempts == 3 and state.steps["f"].outputs == {"attempt": 3}


async def test_retries_are_bounded(run_task):
    state = await run_task(task(step("f", "flaky", retries=1, config={"fail_times": 5})))
    assert state.status is RunStatus.ERROR
    assert "transient failure on attempt 2" in state.steps["f"].error


async def test_deliberate_failures_are_not_retried(run_task):
    state = await run_task(task(step("f", "fail", retries=5, config={"message": "no"})))
    assert state.steps["f"].error == "no"
    assert state.finished_at is not None and (state.finished_at - state.started_at).total_seconds() < 1.0


async def test_step_timeout_is_enforced(run_task, tmp_path):
    state = await run_task(task(step("w", "wait_file", timeout="1s", retries=0, config={"path": str(tmp_path / "x")})))
    assert state.status is RunStatus.ERROR
    assert "timed out" in state.steps["w"].error and "1s" in state.steps["w"].error


async def test_the_whole_run_has_a_time_limit(run_task):
    state = await run_task(
        {
            "id": "limited",
            "timeout": "1s",
            "steps": [
                {"id": "quick", "type": "echo", "config": {"value": 1}},
                {"id": "long", "type": "sleep", "depends_on": ["quick"], "config": {"seconds": 60}},
                {"id": "after", "type": "echo", "depends_on": ["long"], "config": {"value": 2}},
            ],
        },
        timeout=30,
    )
    assert state.status is RunStatus.ERROR and state.error == "the run timed out (its limit is 1s)"
    assert [state.steps[s].status for s in ("quick", "long", "after")] == ["succeeded", "cancelled", "skipped"]


async def test_bad_reference_at_run_time_fails_clearly(run_task):
    state = await run_task(
        task(
            step("a", config={"value": 1}), step("b", depends_on=["a"], config={"value": "${steps.a.outputs.missing}"})
        )
    )
    assert state.status is RunStatus.ERROR
    assert "has no 'missing'" in state.steps["b"].error and "value" in state.steps["b"].error


async def test_resolved_config_is_validated_by_the_step_type(run_task):
    state = await run_task(
        task(
            step("a", config={"value": "soon"}),
            step("s", "sleep", depends_on=["a"], config={"seconds": "${steps.a.outputs.value}"}),
        )
    )
    assert state.status is RunStatus.ERROR
    assert "config.seconds" in state.steps["s"].error


async def test_outputs_too_large_for_history_are_refused(run_task):
    state = await run_task(task(step("h", "huge")))
    assert state.status is RunStatus.ERROR
    assert "the limit is 64 KiB" in state.steps["h"].error and "object store" in state.steps["h"].error


async def test_query_cancel_and_records(client, settings, worker, tmp_path):
    from agent_env.stores import open_stores

    spec = parse_task(
        task(
            step("w", "wait_file", config={"path": str(tmp_path / "never")}),
            step("after", depends_on=["w"]),
            id="cancel_me",
        ),
        "x",
    )
    handle = await launch.start_run(client, settings, spec)
    live = await wait_for_state(handle, lambda s: s.steps["w"].status == "running")
    assert live.status is RunStatus.RUNNING
    stores = open_stores(settings)
    assert stores.documents.get("runs", handle.id)["status"] == "running", "recorded at start"
    await handle.cancel()
    final = await launch.wait_result(handle)
    assert final.status is RunStatus.CANCELLED
    assert final.steps["w"].status is StepStatus.CANCELLED and final.steps["after"].status is StepStatus.SKIPPED
    record = stores.documents.get("runs", handle.id)
    assert record["status"] == "cancelled" and record["steps"]["w"]["status"] == "cancelled"
    desc = await handle.describe()
    assert desc.status.name == "CANCELED"


async def test_runs_are_findable_by_search_attributes(client, run_task):
    state = await run_task(task(step("a"), check("v", ["a"], {"name": "ok", "value": 1, "equals": 1}), id="findme"))
    query = 'AgentEnvTaskId="findme" AND AgentEnvStatus="passed" AND AgentEnvScore=1.0 AND AgentEnvTaskVersion="3"'
    for _ in range(50):  # visibility is eventually consistent
        found = [w.id async for w in client.list_workflows(query)]
        if state.run_id in found:
            break
        await asyncio.sleep(0.1)
    assert state.run_id in found
    desc = await client.get_workflow_handle(state.run_id).describe()
    memo = await desc.memo()
    assert memo["task"]["id"] == "findme" and memo["result"]["status"] == "passed"
    assert memo["result"]["steps"] == {"a": "succeeded", "v": "succeeded"}


async def test_failed_run_still_returns_its_state_and_is_red_in_temporal(client, run_task):
    state = await run_task(task(step("bad", "fail")))
    assert state.status is RunStatus.ERROR
    desc = await client.get_workflow_handle(state.run_id).describe()
    assert desc.status.name == "FAILED"


async def test_unknown_step_type_on_the_worker_fails_without_retrying(client, settings, worker):
    """A task validated where a plugin exists but run by a worker without it fails fast and clearly."""
    from agent_env.spec.run import StepPlan

    spec = parse_task(task(step("a")), "x")
    inp = launch.plan(spec, launch.new_run_id("t"), settings)
    inp.steps = [StepPlan(**{**inp.steps[0].model_dump(), "type": "not_installed", "retries": 5})]
    handle = await client.start_workflow(
        launch.WORKFLOW, inp, id=inp.run_id, task_queue=settings.temporal.task_queue, result_type=RunState
    )
    state = await launch.wait_result(handle)
    assert state.steps["a"].error == "unknown step type 'not_installed' on this worker"


async def test_long_runs_continue_as_new_and_keep_their_state(client, settings, worker):
    """Past the history limit the run drains its running steps and continues in a fresh history."""
    steps = [
        step(
            f"s{i}", "scratchpad_write", config={"key": f"k{i}", "text": str(i)}, depends_on=[f"s{i - 1}"] if i else []
        )
        for i in range(12)
    ]
    steps.append(step("read", "scratchpad_read", depends_on=["s11"]))
    steps.append(
        check(
            "v",
            ["read", "s0"],
            {"name": "all written", "value": "${steps.read.outputs.count}", "equals": 12},
            {"name": "first", "value": "${steps.s0.outputs.key}", "equals": "k0"},
        )
    )
    inp = launch.plan(parse_task(task(*steps, id="long"), "x"), launch.new_run_id("long"), settings)
    inp.continue_as_new_at = 20
    handle = await client.start_workflow(
        launch.WORKFLOW, inp, id=inp.run_id, task_queue=settings.temporal.task_queue, result_type=RunState
    )
    state = await launch.wait_result(client.get_workflow_handle(inp.run_id, result_type=RunState))
    assert state.status is RunStatus.PASSED, state
    assert [state.steps[f"s{i}"].outputs["key"] for i in range(12)] == [f"k{i}" for i in range(12)]
    latest = await client.get_workflow_handle(inp.run_id).describe()
    assert latest.run_id != handle.first_execution_run_id, "the run continued as new"
    assert state.started_at < latest.start_time, "the run's start time was carried over, not reset"
