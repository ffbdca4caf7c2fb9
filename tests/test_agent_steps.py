"""Agent and grading steps in real runs: real A2A to agents hosted by the real gateway, the fake model
server for model-driven agents and judges (same client code as a real endpoint)."""

from __future__ import annotations

import json

import pytest

from agent_env.errors import BadInput
from agent_env.planning.tasks import parse_task
from agent_env.spec.run import RunStatus, StepStatus
from agent_env.stores import open_stores
from agent_env.temporal import launch

DESK = {"id": "desk", "type": "deploy_env", "config": {"env_id": "support-desk"}}


def scripted(name: str, *turns: list[dict], role: str | None = None) -> dict:
    return {"name": name, "type": "scripted", "role": role, "config": {"turns": [list(t) for t in turns]}}


def task(*steps: dict, **extra) -> dict:
    return {"id": "agents-test", "steps": list(steps), **extra}


async def test_agent_in_a_role_is_refused_outside_it_and_the_run_records_it(run_task, settings):
    sam = scripted(
        "sam",
        [
            {"tool": "get_ticket", "arguments": {"ticket_id": "TCK-1004"}},
            {
                "tool": "issue_refund",
                "arguments": {"order_id": "ORD-1001", "charge_id": "CH-5002", "amount_cents": 4900, "reason": "twice"},
            },
            {"say": '{"ticket": "TCK-1004", "refunded": false, "note": "not my role"}'},
        ],
        role="support",
    )
    state = await run_task(
        task(
            DESK,
            {"id": "sam", "type": "deploy_agent", "depends_on": ["desk"], "config": {"record": sam, "env": "desk"}},
            {
                "id": "ask",
                "type": "prompt_agent",
                "depends_on": ["sam"],
                "config": {"agent": "sam", "prompt": "Handle ticket TCK-1004", "system_prompt": "You are support."},
            },
            {
                "id": "answer",
                "type": "check_response",
                "depends_on": ["ask"],
                "config": {
                    "response": "${steps.ask.outputs.answer}",
                    "checks": [
                        {"name": "names the ticket", "contains": "TCK-1004"},
                        {"name": "says it did not refund", "path": "refunded", "equals": False},
                        {"name": "no apology", "not_contains": "sorry"},
                        {"name": "json field missing", "path": "amount", "equals": 1, "weight": 2},
                    ],
                    "pass_threshold": 0.5,
                },
            },
            {"id": "keep", "type": "collect_artifacts", "depends_on": ["ask"], "config": {"envs": ["desk"]}},
        )
    )
    assert state.status is RunStatus.PASSED, state
    kept = state.steps["keep"].outputs
    prefix = f"runs/{state.run_id}/"
    assert kept["artifacts"] == [
        prefix + "artifacts/desk/trajectory.jsonl",
        prefix + "artifacts/desk/data.json",
        prefix + "transcripts/ask.json",
    ]
    objects = open_stores(settings).objects
    assert json.loads(objects.get(kept["manifest"]))["artifacts"] == kept["artifacts"]
    lines = objects.get(kept["artifacts"][0]).decode().splitlines()
    assert [json.loads(line)["tool"] for line in lines] == ["get_ticket", "issue_refund"]
    assert "billing" in json.dumps(json.loads(objects.get(kept["artifacts"][1])))
    deployed = state.steps["sam"].outputs
    assert (
        deployed["hosted"]
        and deployed["role"] == "support"
        and deployed["url"].endswith(f"/agents/{state.run_id}.sam/")
    )
    ask = state.steps["ask"].outputs
    assert (ask["turns"], ask["tool_calls"], ask["refused"]) == (1, 2, 1)
    assert ask["answer"].startswith('{"ticket": "TCK-1004"')
    transcript = json.loads(open_stores(settings).objects.get(ask["transcript"]))
    assert [m["speaker"] for m in transcript["messages"]] == ["run", "sam"]
    refused = [c for c in transcript["tool_calls"] if c["refused"]]
    assert [(c["agent"], c["tool"], c["role"]) for c in refused] == [("sam", "issue_refund", "support")]
    score = state.steps["answer"].score
    assert score.value == pytest.approx(3 / 5) and score.passed
    rows = {c.name: c for c in score.criteria}
    assert "nothing at 'amount'" in rows["json field missing"].detail
    assert "aet_" not in json.dumps(state.model_dump(mode="json")), "role tokens never reach the run's record"


async def test_llm_agent_uses_tools_through_the_fake_model_and_the_judge_grades(run_task):
    tester = {"name": "tester", "type": "llm", "role": "support", "config": {"system_prompt": "You are support."}}
    state = await run_task(
        task(
            DESK,
            {
                "id": "tester",
                "type": "deploy_agent",
                "depends_on": ["desk"],
                "config": {"record": tester, "env": "desk"},
            },
            {
                "id": "work",
                "type": "prompt_agent",
                "depends_on": ["tester"],
                "config": {"agent": "tester", "prompt": "Dana says she was charged twice. Ticket TCK-1004."},
            },
            {
                "id": "grade",
                "type": "rubrics_verifier",
                "depends_on": ["work"],
                "config": {
                    "prompt_id": "work",
                    "score_aggregator": "weighted_average",
                    "state": [
                        {
                            "env": "desk",
                            "tool": "get_order",
                            "arguments": {"order_id": "ORD-1001"},
                            "role": "billing_lead",
                        }
                    ],
                    "criteria": [
                        {
                            "id": "read-ticket",
                            "description": "The agent read the ticket ('Charged twice for order ORD-1001').",
                            "weight": 2,
                        },
                        {"id": "refused", "description": "The refund attempt was refused ('not available to role')."},
                        {"id": "refunded", "description": "A refund was issued ('RF-0002')."},
                    ],
                    "pass_threshold": 0.7,
                },
            },
            {
                "id": "total",
                "type": "aggregate_verifiers",
                "depends_on": ["grade", "work"],
                "config": {
                    "inputs": [{"step": "grade", "weight": 1}],
                    "score_aggregator": "weighted_average",
                    "pass_threshold": 0.7,
                },
            },
        )
    )
    assert state.status is RunStatus.PASSED, state
    work = state.steps["work"].outputs
    assert (work["tool_calls"], work["refused"]) == (2, 1)
    assert work["answer"] == "Looked at TCK-1004; the refund was not mine to issue."
    grade = state.steps["grade"]
    verdicts = {r["id"]: r["result"] for r in grade.outputs["results"]}
    assert verdicts == {"read-ticket": True, "refused": True, "refunded": False}
    assert grade.outputs["verifier_id"] == "grade" and grade.outputs["score"] == pytest.approx(3 / 4)
    assert grade.score.value == pytest.approx(3 / 4)
    assert "missing: RF-0002" in {c.name: c for c in grade.score.criteria}["refunded"].detail
    assert state.score == pytest.approx(0.75) and state.steps["total"].score.value == pytest.approx(0.75)


async def test_judge_answers_that_cannot_be_used_are_retried_then_fail_clearly(run_task):
    grade = {"criteria": [{"id": "c1", "description": "The material mentions 'hello'."}], "reference": "hello there"}
    flaky = await run_task(
        task(
            {
                "id": "grade",
                "type": "rubrics_verifier",
                "config": {**grade, "judge_model": {"model": "fake-judge-flaky"}},
            }
        )
    )
    assert flaky.status is RunStatus.PASSED, flaky
    assert flaky.steps["grade"].outputs["asked"] == 2
    garbage = await run_task(
        task(
            {
                "id": "grade",
                "type": "rubrics_verifier",
                "retries": 0,
                "config": {**grade, "attempts": 2, "judge_model": {"model": "fake-garbage"}},
            }
        )
    )
    assert garbage.status is RunStatus.ERROR
    assert garbage.steps["grade"].error == (
        "the judge's answer could not be used after 2 attempt(s): it is not JSON; "
        "its last answer began: 'I think it went well overall!'"
    )


async def test_conversation_with_a_persona_until_it_is_satisfied(run_task, settings):
    support = scripted(
        "support",
        [{"say": "Sorry to hear that. Which order?"}],
        [{"say": "I have refunded the duplicate charge on ORD-1001."}],
        role="support",
    )
    dana = {
        "name": "dana",
        "type": "persona",
        "role": "customer",
        "config": {
            "brief": "Dana, charged twice for ORD-1001.",
            "replies": [
                {"contains": "which order", "say": "ORD-1001, the skillet."},
                {"matches": "refund(ed)?", "say": "Thank you! That settles it. [resolved]"},
            ],
            "default_reply": "Hello?",
        },
    }
    state = await run_task(
        task(
            DESK,
            {
                "id": "support",
                "type": "deploy_agent",
                "depends_on": ["desk"],
                "config": {"record": support, "env": "desk"},
            },
            {"id": "dana", "type": "deploy_agent", "depends_on": ["desk"], "config": {"record": dana, "env": "desk"}},
            {
                "id": "talk",
                "type": "prompt_agent",
                "depends_on": ["support", "dana"],
                "config": {
                    "agent": "support",
                    "prompt": "I was charged twice!",
                    "conversation": {"partner": "dana", "max_turns": 5, "stop_when": {"contains": "[resolved]"}},
                },
            },
        )
    )
    assert state.status is RunStatus.PASSED, state
    talk = state.steps["talk"].outputs
    assert talk["turns"] == 2 and talk["messages"] == 5
    transcript = json.loads(open_stores(settings).objects.get(talk["transcript"]))
    assert [(m["speaker"], m["text"]) for m in transcript["messages"]] == [
        ("dana", "I was charged twice!"),
        ("support", "Sorry to hear that. Which order?"),
        ("dana", "ORD-1001, the skillet."),
        ("support", "I have refunded the duplicate charge on ORD-1001."),
        ("dana", "Thank you! That settles it. [resolved]"),
    ]


@pytest.mark.parametrize("on_timeout", ["fail", "score_zero"])
async def test_an_agent_that_never_answers_meets_the_deadline(run_task, on_timeout):
    slow = {"name": "slow", "type": "llm", "config": {"model": {"model": "fake-slow-30"}}}
    state = await run_task(
        task(
            {"id": "slow", "type": "deploy_agent", "config": {"record": slow}},
            {
                "id": "ask",
                "type": "prompt_agent",
                "depends_on": ["slow"],
                "retries": 0,
                "config": {"agent": "slow", "prompt": "anything", "turn_deadline": "1s", "on_timeout": on_timeout},
            },
        ),
        timeout=30,
    )
    ask = state.steps["ask"]
    if on_timeout == "fail":
        assert state.status is RunStatus.ERROR and ask.status is StepStatus.FAILED
        assert "did not answer within 1s" in ask.error
    else:
        assert state.status is RunStatus.FAILED and ask.status is StepStatus.SUCCEEDED
        assert ask.score.value == 0 and ask.outputs["timed_out"] and state.score == 0


async def test_aggregates_all_pass_and_any_pass(run_task):
    def checks(name: str, ok: bool) -> dict:
        return {"id": name, "type": "check", "config": {"checks": [{"name": name, "value": ok, "truthy": True}]}}

    state = await run_task(
        task(
            checks("good", True),
            checks("bad", False),
            {
                "id": "all",
                "type": "aggregate_verifiers",
                "depends_on": ["good", "bad"],
                "config": {"inputs": ["good", "bad"], "score_aggregator": "all_pass"},
            },
            {
                "id": "any",
                "type": "aggregate_verifiers",
                "depends_on": ["all"],
                "config": {"inputs": ["good", "bad"], "score_aggregator": "any_pass"},
            },
        )
    )
    assert state.steps["all"].score.value == 0 and state.steps["any"].score.value == 1
    assert state.status is RunStatus.PASSED and state.score == 1, "the last aggregate is the run's score"


def test_aggregate_inputs_must_be_upstream_steps():
    with pytest.raises(BadInput, match="refers to step 'b'.*add 'b' to depends_on"):
        parse_task(
            task(
                {"id": "a", "type": "check", "config": {"checks": [{"name": "x", "value": 1, "truthy": True}]}},
                {"id": "b", "type": "check", "config": {"checks": [{"name": "x", "value": 1, "truthy": True}]}},
                {"id": "agg", "type": "aggregate_verifiers", "depends_on": ["a"], "config": {"inputs": ["a", "b"]}},
            ),
            "t",
        )


def test_a_missing_api_key_fails_before_the_run_starts(settings, monkeypatch):
    monkeypatch.setenv("AGENT_ENV_MODEL_API_KEY", "secret:nowhere")
    from agent_env.config import load_settings

    mine = load_settings()
    spec = parse_task(
        task({"id": "grade", "type": "rubrics_verifier", "config": {"criteria": [{"id": "a", "description": "x"}]}}),
        "t",
    )
    with pytest.raises(
        BadInput,
        match=r"(?s)'judge' model's API key secret:nowhere is not set.*agent-env secrets set "
        r"nowhere.*AGENT_ENV_SECRET_NOWHERE",
    ):
        launch.plan(spec, "r-1", mine)
    llm = parse_task(task({"id": "a", "type": "deploy_agent", "config": {"record": {"name": "x", "type": "llm"}}}), "t")
    with pytest.raises(BadInput, match="'agent' model's API key secret:nowhere"):
        launch.plan(llm, "r-2", mine)


PERSONA_WORLD = """
id = "persona-world"
[clock]
start = "2026-02-16T09:00:00Z"
mode = "event_driven"

[personas.dana]
agent = "dana"
email = "dana@example.com"

[[triggers]]
id = "dana_answers"
when = {{ type = "persona", env = "desk", persona = "dana", says = {{ contains = "order" }} }}
[[triggers.actions]]
type = "instruct"
env = "desk"
agent = "dana"
by = "dana"
delay = "30m"
instruction = "Support asked you which order it is. Answer them by email."
reply = {{ type = "call_tool", env = "desk", tool = "send_email", agent = "dana", arguments = {{ sender = "dana@example.com", to = ["support@acme.example"], subject = "Re: your order", body = "(templated) ORD-1001, money back please." }} }}

[[steps]]
id = "desk"
type = "deploy_env"
config = {{ env_id = "support-desk", agents = {{ sam = "support", dana = "customer" }} }}

[[steps]]
id = "dana"
type = "deploy_agent"
depends_on = ["desk"]
config = {{ env = "desk", record = {{ name = "dana-persona", type = "persona", role = "customer", config = {{ llm = true, brief = "Dana, charged twice.", model = {{ model = "{model}" }} }} }}, as = "dana" }}

[[steps]]
id = "rules"
type = "register_env_triggers"
depends_on = ["dana"]

[[steps]]
id = "ask"
type = "call_tool"
depends_on = ["rules"]
config = {{ env = "desk", agent = "sam", tool = "send_email", arguments = {{ sender = "support@acme.example", to = ["dana@example.com"], subject = "Your charge", body = "Which order was charged twice?" }} }}

[[steps]]
id = "later"
type = "wait_clock"
depends_on = ["ask"]
config = {{ seconds = 7200 }}

[[steps]]
id = "inbox"
type = "call_tool"
depends_on = ["later"]
config = {{ env = "desk", role = "support", tool = "list_messages", arguments = {{ mailbox = "support@acme.example" }} }}
"""


@pytest.mark.parametrize("model", ["fake", "fake-unknown"])
async def test_a_world_trigger_instructs_a_persona_agent_which_acts_or_falls_back(client, settings, worker, model):
    import tomllib

    spec = parse_task(tomllib.loads(PERSONA_WORLD.format(model=model)), "t")
    state = await launch.wait_result(await launch.start_run(client, settings, spec))
    assert state.status is RunStatus.PASSED, state
    actions = [e.detail for e in state.world.events if e.kind == "action"]
    assert len(actions) == 1, [(e.kind, e.trigger, e.detail) for e in state.world.events]
    assert actions[0]["instruction"].startswith("Support asked you")
    messages = state.steps["inbox"].outputs["result"]["messages"]
    from_dana = [m for m in messages if m["from"] == "dana@example.com" and m["sent_at"] == "2026-02-16T09:30:00Z"]
    if model == "fake":  # the model played Dana and wrote with her tools
        assert actions[0]["tool_calls"] == 1 and "fallback" not in actions[0]
        assert [m["subject"] for m in from_dana] == ["Re: your order"]
    else:  # no model answered: the templated reply is what she does
        assert "404" in actions[0]["fallback"] and actions[0]["tool"] == "send_email"
        assert len(from_dana) == 1


async def test_the_runs_seed_reaches_model_driven_agents(run_task):
    state = await run_task(
        task(
            {"id": "a", "type": "deploy_agent", "config": {"record": {"name": "seeded", "type": "llm"}}},
            {"id": "ask", "type": "prompt_agent", "depends_on": ["a"], "config": {"agent": "a", "prompt": "hi"}},
            seed=42,
        )
    )
    assert state.steps["ask"].outputs["answer"] == "my seed is 42"
    assert state.pins["seed"] == 42
