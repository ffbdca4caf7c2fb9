"""The run's DAG engine (agent_env/workflows/dag.py) without Temporal: the real task DAGs of the recorded runs
(the built-in bundles' hello, refund, workplace and an episode), what becomes ready, what a step's end does to its
dependents and to the run."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from agent_env.spec.run import RunInput, RunState, RunStatus, Score, StepOutcome, StepStatus
from agent_env.spec.task import FailurePolicy
from agent_env.workflows.dag import Dag

pytestmark = pytest.mark.unit

HISTORIES = Path(__file__).parent / "histories"
T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
RECORDED = ["hello", "refund", "workplace", "episode"]


def _history(name: str) -> list[dict]:
    return json.loads((HISTORIES / f"{name}.json").read_text())["events"]


def _payload(attributes: dict, key: str) -> dict:
    return json.loads(base64.b64decode(attributes[key]["payloads"][0]["data"]))


def recorded_input(name: str, **policies: FailurePolicy) -> RunInput:
    """The task DAG a recorded run was started with (its workflow input), with `policies` for some steps."""
    inp = RunInput.model_validate(_payload(_history(name)[0]["workflowExecutionStartedEventAttributes"], "input"))
    for plan in inp.steps:
        if plan.id in policies:
            plan.on_failure = policies[plan.id]
    return inp


def dag_of(inp: RunInput) -> Dag:
    return Dag({s.id: s for s in inp.steps}, RunState.start(inp, T0))


def start_ready(dag: Dag) -> list[str]:
    started = []
    for plan in dag.ready():
        dag.start(plan.id, T0)
        started.append(plan.id)
    return started


def statuses(dag: Dag) -> dict[str, str]:
    return {sid: s.status.value for sid, s in dag.state.steps.items()}


@pytest.mark.parametrize("name", RECORDED)
def test_steps_start_in_the_order_the_recorded_run_scheduled_them(name):
    """Fed the recorded run's step activities' ends one by one, the engine starts the steps the recorded workflow
    scheduled, in its order, and the run passes as it did."""
    events = _history(name)
    scheduled = {
        int(e["eventId"]): a["activityId"]
        for e in events
        if (a := e.get("activityTaskScheduledEventAttributes")) and a["activityType"]["name"] == "agentenv.run_step"
    }
    recorded_starts = list(scheduled.values())
    recorded_ends = [
        scheduled[int(a["scheduledEventId"])]
        for e in events
        if (a := e.get("activityTaskCompletedEventAttributes")) and int(a["scheduledEventId"]) in scheduled
    ]
    dag = dag_of(recorded_input(name))
    started: list[str] = []

    def step_on() -> None:
        # Steps the workflow runs itself (world steps) or a trainer plays end without a run_step activity.
        while True:
            new = start_ready(dag)
            started.extend(new)
            own = [sid for sid in new if sid not in recorded_starts]
            for sid in own:
                dag.succeed(sid, T0, {})
            if not own:
                return

    step_on()
    for step_id in recorded_ends:
        dag.completed(step_id, T0 + timedelta(seconds=1), StepOutcome(outputs={"ok": True}, attempt=1))
        step_on()
    assert [sid for sid in started if sid in recorded_starts] == recorded_starts
    assert set(statuses(dag).values()) == {"succeeded"}
    dag.state.conclude()
    assert dag.state.status is RunStatus.PASSED and dag.error is None


def test_a_step_starts_only_when_all_it_depends_on_finished():
    dag = dag_of(recorded_input("hello"))  # notes -> greet_ada, greet_alan -> verify
    assert start_ready(dag) == ["notes"]
    assert start_ready(dag) == []  # nothing new while notes runs
    dag.completed("notes", T0, StepOutcome(outputs={"instance": "i-1"}, attempt=2, duration_ms=12.34567))
    notes = dag.step("notes")
    assert (notes.status, notes.attempts, notes.duration_ms, notes.outputs) == (
        StepStatus.SUCCEEDED,
        2,
        12.346,
        {"instance": "i-1"},
    )
    assert start_ready(dag) == ["greet_ada", "greet_alan"]
    assert dag.step("greet_ada").started_at == T0
    dag.completed("greet_ada", T0, StepOutcome())
    assert start_ready(dag) == []  # verify waits for greet_alan too
    dag.completed("greet_alan", T0, StepOutcome())
    assert start_ready(dag) == ["verify"]


def test_a_failing_step_fails_the_run_and_the_rest_is_skipped_when_it_stops():
    dag = dag_of(recorded_input("hello"))
    start_ready(dag)
    dag.fail("notes", "timed out (start-to-close, limit 5m)", T0)
    assert dag.error == "step 'notes' failed: timed out (start-to-close, limit 5m)"
    assert start_ready(dag) == []  # a failed run starts nothing more
    dag.skip_pending(None)
    assert statuses(dag) == {"notes": "failed", "greet_ada": "skipped", "greet_alan": "skipped", "verify": "skipped"}
    assert dag.step("verify").error == "skipped: the run stopped"
    dag.fail("greet_ada", "later", T0)
    assert dag.error == "step 'notes' failed: timed out (start-to-close, limit 5m)"  # the first failure names the run's
    dag.state.conclude()
    assert dag.state.status is RunStatus.ERROR


def test_continue_lets_dependents_run_and_the_run_go_on():
    dag = dag_of(recorded_input("hello", greet_ada=FailurePolicy.CONTINUE))
    start_ready(dag)
    dag.completed("notes", T0, StepOutcome())
    start_ready(dag)
    dag.fail("greet_ada", "no such user", T0)
    dag.completed("greet_alan", T0, StepOutcome())
    assert dag.error is None
    assert start_ready(dag) == ["verify"]


def test_skip_dependents_skips_only_that_branch():
    """hello: greet_ada fails and only verify after it is skipped; refund (a chain): the skip travels down it."""
    dag = dag_of(recorded_input("hello", greet_ada=FailurePolicy.SKIP_DEPENDENTS))
    start_ready(dag)
    dag.completed("notes", T0, StepOutcome())
    start_ready(dag)
    dag.fail("greet_ada", "no such user", T0)
    dag.completed("greet_alan", T0, StepOutcome())
    assert start_ready(dag) == [] and dag.error is None
    assert dag.step("verify").status is StepStatus.SKIPPED
    assert dag.step("verify").error == "skipped: 'greet_ada' failed"

    chain = dag_of(recorded_input("refund", case=FailurePolicy.SKIP_DEPENDENTS))
    start_ready(chain)
    chain.completed("desk", T0, StepOutcome())
    start_ready(chain)
    chain.fail("case", "bad rows", T0)
    assert start_ready(chain) == []  # skips travel down the chain in one pass
    assert statuses(chain) == {
        "desk": "succeeded",
        "case": "failed",
        "agent": "skipped",
        "work": "skipped",
        "grade": "skipped",
    }
    assert chain.step("work").error == "skipped: 'agent' skipped"


def test_a_cancelled_step_blocks_its_dependents():
    dag = dag_of(recorded_input("workplace"))
    for step_id in ["desk", "lock_refunds", "rules"]:
        assert start_ready(dag) == [step_id]
        dag.succeed(step_id, T0, {})
    assert start_ready(dag) == ["three_days"]
    dag.cancel("three_days", T0, "the world ended: done early")
    assert dag.step("three_days").error == "the world ended: done early"
    assert start_ready(dag) == []
    assert statuses(dag)["end_state"] == statuses(dag)["outcome"] == "skipped"
    assert dag.step("outcome").error == "skipped: 'three_days' cancelled"


def test_what_templates_see_and_what_ran():
    dag = dag_of(recorded_input("refund"))
    start_ready(dag)
    dag.completed("desk", T0, StepOutcome(outputs={"instance": "i-1"}, score=Score(value=0.5, passed=False)))
    start_ready(dag)
    views = dag.views()
    assert views["desk"] == {"outputs": {"instance": "i-1"}, "status": "succeeded", "score": 0.5, "passed": False}
    assert views["case"] == {"outputs": {}, "status": "running", "score": None, "passed": None}
    assert [plan.id for plan in dag.ran()] == ["desk", "case"]


def test_an_instruction_goes_only_to_a_deployed_agent_step():
    dag = dag_of(recorded_input("refund"))
    with pytest.raises(ValueError, match="'desk', which is not a deploy_agent step"):
        dag.deployed_agent("desk", "support")
    with pytest.raises(ValueError, match="has not deployed its agent"):
        dag.deployed_agent("agent", "support")
    dag.succeed("agent", T0, {"name": "support", "url": "http://127.0.0.1:1/"})
    with pytest.raises(ValueError, match="deployed 'support', not agent 'other'"):
        dag.deployed_agent("agent", "other")
    assert dag.deployed_agent("agent", "support")["url"] == "http://127.0.0.1:1/"


def test_a_run_carried_across_continue_as_new_goes_on_where_it_was():
    """continued.1 continued as new with greet_ada and greet_alan done: the next run starts verify, and only it."""
    events = _history("continued.1")
    carried = RunInput.model_validate(_payload(events[-1]["workflowExecutionContinuedAsNewEventAttributes"], "input"))
    assert carried.carried is not None
    dag = Dag({s.id: s for s in carried.steps}, carried.carried)
    assert start_ready(dag) == ["verify"]


def test_the_run_ends_cancelled_or_timed_out_whatever_its_steps_scored():
    dag = dag_of(recorded_input("hello"))
    start_ready(dag)
    dag.completed("notes", T0, StepOutcome(score=Score(value=1.0)))
    dag.cancel_run("abandoned by the trainer: enough")
    dag.state.conclude()
    assert (dag.state.status, dag.error) == (RunStatus.CANCELLED, "abandoned by the trainer: enough")

    timed = dag_of(recorded_input("hello"))
    timed.time_out("the run timed out (its limit is 1m)")
    assert start_ready(timed) == []
    timed.state.conclude()
    assert (timed.state.status, timed.error) == (RunStatus.ERROR, "the run timed out (its limit is 1m)")
