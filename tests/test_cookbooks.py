"""The cookbook bundles end to end: real runs, agents over A2A in the gateway, models and judges played
by the fake model server (conftest), the same code paths a real endpoint would take."""

from __future__ import annotations

import json

import pytest

from agent_env.bundles import BUILTIN_ROOT
from agent_env.spec.run import RunStatus
from agent_env.stores import open_stores
from agent_env.task_lookup import resolve_target
from agent_env.temporal import launch


async def run_bundle(client, settings, name: str, change=None):
    spec = resolve_target(name)
    if change:
        change({s.id: s for s in spec.steps})
    return await launch.wait_result(await launch.start_run(client, settings, spec))


async def test_refund(client, settings, worker):
    state = await run_bundle(client, settings, "refund")
    assert state.status is RunStatus.PASSED and state.score == 1, state
    assert list(state.steps) == ["desk", "case", "agent", "work", "grade"]
    work = state.steps["work"].outputs
    assert (work["tool_calls"], work["refused"]) == (6, 0)
    assert {c.name for c in state.steps["grade"].score.criteria} == {"refund", "verified", "told-dana", "solved"}


async def test_refund_as_support_is_refused_and_graded_down(client, settings, worker):
    def as_support(steps):
        steps["agent"].config["role"] = "support"

    state = await run_bundle(client, settings, "refund", as_support)
    assert state.status is RunStatus.FAILED, state
    work = state.steps["work"].outputs
    assert work["refused"] == 2  # verify_order and issue_refund: refused by the gateway, recorded
    transcript = json.loads(open_stores(settings).objects.get(work["transcript"]))
    refused = sorted(c["tool"] for c in transcript["tool_calls"] if c.get("refused"))
    assert refused == ["issue_refund", "verify_order"]
    verdicts = {c.name: c.passed for c in state.steps["grade"].score.criteria}
    assert verdicts["refund"] is False and state.score < 0.8


async def test_invoice_queue(client, settings, worker):
    state = await run_bundle(client, settings, "invoice-queue")
    assert state.status is RunStatus.PASSED and state.score == 1, state
    decisions = state.steps["decisions"]
    assert len(decisions.outputs["results"]) == 8
    assert all(r["result"] for r in decisions.outputs["results"])
    texts = [r["description"] for r in decisions.outputs["results"]]
    assert "'INV-3003: held'" in " ".join(texts)


async def test_invoice_queue_catches_a_wrong_and_a_missing_decision(client, settings, worker):
    def sloppy(steps):
        clerk = steps["clerk"].config
        clerk.update(
            {
                "agent": None,
                "as": "ap-clerk",
                "record": {
                    "name": "ap-clerk-sloppy",
                    "type": "llm",
                    "role": "ap_clerk",
                    "config": {"max_tool_calls": 60},
                },
            }
        )

    state = await run_bundle(client, settings, "invoice-queue", sloppy)
    assert state.status is RunStatus.FAILED, state
    rows = state.steps["decisions"].outputs["results"]
    failed = [r["description"] for r in rows if not r["result"] and r["id"] != "enough-calls"]
    assert failed == [
        "The clerk's decision 'INV-3003: approved' is what the AP policy requires, as the answer key says."
    ]
    rows = {c.name: c for c in state.steps["decisions"].score.criteria}
    assert rows["enough-calls"].passed is False
    assert state.steps["decisions"].score.value == pytest.approx(6 / 8)
    assert state.steps["queue"].score.value == 0
    assert state.score == pytest.approx((3 * 6 / 8) / 4)


async def test_escalation(client, settings, worker):
    state = await run_bundle(client, settings, "escalation")
    assert state.status is RunStatus.PASSED and state.score == 1, state
    talk = state.steps["talk"].outputs
    assert talk["turns"] == 2 and talk["messages"] == 5
    transcript = json.loads(open_stores(settings).objects.get(talk["transcript"]))
    speakers = [m["speaker"] for m in transcript["messages"]]
    assert speakers == ["morgan", "sam", "morgan", "sam", "morgan"]
    assert transcript["messages"][-1]["text"].endswith("[resolved]")
    assert [c["tool"] for c in transcript["tool_calls"]] == ["get_ticket", "get_order", "assign_ticket", "add_comment"]
    assert state.steps["judge"].outputs["hosted"], "the judge is an agent the run deployed"
    assert {c.name for c in state.steps["grade"].score.criteria} >= {"escalated", "satisfied"}


async def test_escalation_graded_by_the_judge_model(client, settings, worker):
    from agent_env.planning.tasks import load_task

    spec = load_task(BUILTIN_ROOT / "escalation" / "tasks" / "escalation-model-judged.toml")
    state = await launch.wait_result(await launch.start_run(client, settings, spec))
    assert state.status is RunStatus.PASSED and state.score == 1, state
    assert "judge" not in state.steps and state.steps["grade"].score.value == 1
