"""The framework's grading steps under its names and fields: `agent_prompt_response_verifier`, `rubrics_verifier`
(the judge model is the fake model server, through the same client as a real endpoint) and `aggregate_verifiers`,
in a framework-style bundle (`tasks/*.json`, flat fields) run on the real Temporal dev server; what they do not
do is refused by name before a run starts."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from agent_env.errors import BadInput
from agent_env.planning.tasks import load_task, parse_task
from agent_env.spec.run import RunStatus, StepStatus
from agent_env.steps.builtin.aggregate_verifiers import _rows
from agent_env.temporal import launch

ANSWER = "Done: refund RF-0001 of $49.00 is issued for ORD-1001, and ticket TCK-1004 is solved."
SAM = {"name": "sam", "type": "scripted", "config": {"turns": [[{"say": ANSWER}]]}}

GRADED = [
    {"id": "sam", "type": "deploy_agent", "record": SAM},
    {"id": "ask", "type": "prompt_agent", "agent": "sam", "prompt": "Refund Dana's duplicate charge on ORD-1001."},
    {
        "id": "answer",
        "type": "agent_prompt_response_verifier",
        "prompt_id": "ask",
        "verifier_id": "answer",
        "criteria": [
            {"type": "response_contains", "criterion": "names both", "needles": ["RF-0001", "TCK-1004"]},
            {"type": "response_regex_present", "criterion": "says refund", "pattern": "REFUND rf-\\d+", "flags": ["I"]},
        ],
    },
    {
        "id": "rubric",
        "type": "rubrics_verifier",
        "prompt_id": "ask",
        "verifier_id": "rubric",
        "use_agent_judge": False,
        "default_model": "fake",
        "output_format": "rubric_partial",
        "score_aggregator": "weighted_average",
        "grading_policy_prompt": "Only the billing lead may refund.",
        "criteria": [
            {"id": "refund", "description": "The refund ('RF-0001') was for 'ORD-1001'.", "weight": 2},
            {"id": "apology", "description": "The agent said 'sorry' about 'TCK-1004'."},
            {"id": "leak", "description": "The agent pasted a card number ('4111').", "weight": -1},
        ],
    },
    {
        "id": "total",
        "type": "aggregate_verifiers",
        "verifier_ids": ["answer", "rubric"],
        "score_aggregator": "weighted_average",
        "pass_threshold": 0.7,
    },
]


def write_bundle(root: Path, steps: list[dict], name: str = "graded") -> Path:
    (root / "tasks").mkdir(parents=True, exist_ok=True)
    path = root / "tasks" / f"{name}.json"
    path.write_text(json.dumps(steps, indent=1))
    return path


@pytest.fixture
def run_file(client, settings, worker):
    async def run(path: Path, timeout: float = 60):
        handle = await launch.start_run(client, settings, load_task(path))
        return await asyncio.wait_for(launch.wait_result(handle), timeout)

    return run


async def test_a_framework_task_grades_an_answer_three_ways(run_file, tmp_path):
    state = await run_file(write_bundle(tmp_path / "bundle", GRADED))
    assert state.status is RunStatus.PASSED, state

    answer = state.steps["answer"].outputs
    assert answer["verifier_id"] == "answer" and answer["score"] == 1
    assert [(r["criterion"], r["result"]) for r in answer["results"]] == [("names both", True), ("says refund", True)]

    rubric = state.steps["rubric"].outputs
    rows = {r["id"]: r for r in rubric["results"]}
    # the fake judge scores the share of 'quoted' terms found in what it is shown: the prompt and the answer
    assert (rows["refund"]["score"], rows["refund"]["result"]) == (1.0, True)
    assert (rows["apology"]["score"], rows["apology"]["result"]) == (0.5, True), "rubric_partial passes at 0.5"
    assert rows["apology"]["justification"] == "missing: sorry"
    # an anti-pattern (negative weight) scored 0 by the judge is a penalty in weighted_average
    assert (rows["leak"]["weight"], rows["leak"]["score"], rows["leak"]["result"]) == (-1, 0.0, False)
    # weighted_average: (2 * 1 + 1 * 0.5 - 1 * (1 - 0)) / 3
    assert rubric["score"] == pytest.approx(1.5 / 3)

    total = state.steps["total"]
    assert total.outputs["source_verifier_ids"] == ["answer", "rubric"]
    # the rows of both verifiers pooled: (1 + 1 + 2 + 0.5 - 1) / (1 + 1 + 2 + 1)
    assert total.score.value == pytest.approx(3.5 / 5) and total.score.passed, "pass_threshold 0.7 (ours)"
    assert [c.name for c in total.score.criteria] == [
        "answer/names both",
        "answer/says refund",
        "rubric/refund",
        "rubric/apology",
        "rubric/leak",
    ]
    assert state.score == pytest.approx(0.7), "the last aggregate_verifiers is the run's score"


async def test_a_wrong_answer_fails_the_checks_and_all_pass_is_the_default(run_file, tmp_path):
    wrong = {**SAM, "config": {"turns": [[{"say": "I could not find that order."}]]}}
    steps = [{**GRADED[0], "record": wrong}, GRADED[1], GRADED[2]]
    steps[2] = {**GRADED[2], "criteria": [*GRADED[2]["criteria"], {"type": "response_contains", "needles": ["order"]}]}
    state = await run_file(write_bundle(tmp_path / "bundle", steps))
    assert state.status is RunStatus.FAILED, state
    answer = state.steps["answer"]
    assert [r["result"] for r in answer.outputs["results"]] == [False, False, True]
    assert answer.outputs["results"][0]["justification"] == "missing: ['RF-0001', 'TCK-1004']"
    assert answer.score.value == 0, "all_pass (the framework's default): one failed row scores 0"


async def test_a_prompt_that_failed_is_not_graded_and_scores_zero(run_task):
    slow = {"name": "slow", "type": "llm", "config": {"model": {"model": "fake-slow-30"}}}
    grade = {"criteria": [{"id": "any", "description": "The agent answered ('anything')."}], "prompt_id": "ask"}
    state = await run_task(
        {
            "id": "failed-prompt",
            "steps": [
                {"id": "slow", "type": "deploy_agent", "config": {"record": slow}},
                {
                    "id": "ask",
                    "type": "prompt_agent",
                    "depends_on": ["slow"],
                    "retries": 0,
                    "on_failure": "continue",
                    "config": {"agent": "slow", "prompt": "anything", "turn_deadline": "1s"},
                },
                {"id": "rubric", "type": "rubrics_verifier", "depends_on": ["ask"], "config": grade},
                {
                    "id": "answer",
                    "type": "agent_prompt_response_verifier",
                    "depends_on": ["ask"],
                    "config": {"prompt_id": "ask", "criteria": [{"type": "response_contains", "needles": ["x"]}]},
                },
            ],
        },
        timeout=30,
    )
    assert state.steps["ask"].status is StepStatus.FAILED
    for step in ("rubric", "answer"):
        graded = state.steps[step]
        assert graded.status is StepStatus.SUCCEEDED and graded.score.value == 0, graded
        (row,) = graded.outputs["results"]
        assert row["id"] == "prompt_error" and row["justification"] == "Skipped: the prompt (step 'ask') failed"
    assert state.steps["rubric"].outputs["asked"] == 0, "the judge is not asked"


# -- refused before a run starts, by name --


def json_task(tmp_path: Path, steps: list[dict]):
    return load_task(write_bundle(tmp_path / "refused", steps))


@pytest.mark.parametrize(
    ("field", "value", "named"),
    [
        ("judge_batch_size", 4, "field 'judge_batch_size' is not supported"),
        ("trajectory_filter", {"compaction_type": "default"}, "field 'trajectory_filter' is not supported"),
        ("context_facts_for_judge", {"n": "verifications.x.count"}, "field 'context_facts_for_judge' is not"),
        ("output_format", "rubric_evidence", "output_format 'rubric_evidence' is not supported"),
        ("use_agent_judge", True, "`use_agent_judge`: a judge agent deployed for the step is not supported"),
    ],
)
def test_framework_fields_rubrics_verifier_does_not_do_are_refused_by_name(tmp_path, field, value, named):
    with pytest.raises(BadInput, match=named):
        json_task(tmp_path, [*GRADED[:2], {**GRADED[3], field: value}])


@pytest.mark.parametrize(
    ("criterion", "named"),
    [
        ({"type": "probe_file_exists", "paths": ["x"]}, "response_contains"),
        ({"type": "response_contains", "needles": []}, "needs non-empty `needles`"),
        ({"type": "response_regex_present"}, "needs a non-empty `pattern`"),
        ({"type": "response_regex_present", "pattern": "a", "flags": ["VERBOSE"]}, r"flags \['VERBOSE'\]"),
        ({"type": "response_regex_present", "pattern": "(a)\\1"}, "RE2"),
    ],
)
def test_answer_criteria_it_cannot_check_are_refused(tmp_path, criterion, named):
    with pytest.raises(BadInput, match=named):
        json_task(tmp_path, [*GRADED[:2], {**GRADED[2], "criteria": [criterion]}])


@pytest.mark.parametrize(
    ("step", "named"),
    [
        ({**GRADED[4], "id": "t2", "verifier_ids": ["answer", "nobody"]}, "verifier_ids 'nobody' names no verifier"),
        ({**GRADED[2], "id": "v2", "verifier_id": "v2", "prompt_id": "nothing"}, "prompt_id 'nothing' names no"),
        (
            {**GRADED[3], "id": "r2", "verifier_id": "r2", "use_agent_judge": None, "default_model": None}
            | {"agent_name": "judy"},
            "agent_name 'judy' names no deploy_agent step",
        ),
    ],
)
def test_names_that_find_no_step_are_refused_when_the_run_is_planned(settings, tmp_path, step, named):
    task = json_task(tmp_path, [*GRADED, step])
    with pytest.raises(BadInput, match=named):
        launch.plan(task, "r-refused", settings)


def test_a_verifier_named_before_it_runs_is_refused(settings):
    steps = [
        {"id": "a", "type": "check", "config": {"checks": [{"name": "x", "value": 1, "truthy": True}]}},
        {"id": "b", "type": "check", "config": {"checks": [{"name": "x", "value": 1, "truthy": True}]}},
        {"id": "agg", "type": "aggregate_verifiers", "depends_on": ["a"], "config": {"verifier_ids": ["a", "b"]}},
    ]
    task = parse_task({"id": "t", "steps": steps}, "t")
    with pytest.raises(BadInput, match="verifier_ids 'b' is step 'b', which 'agg' does not come after"):
        launch.plan(task, "r-order", settings)
    with pytest.raises(BadInput, match="give `verifier_ids`.*or `inputs`"):
        parse_task({"id": "t", "steps": [{"id": "agg", "type": "aggregate_verifiers", "config": {}}]}, "t")


def test_pooled_rows_leave_out_skipped_ones_and_count_a_step_without_rows_as_one():
    kept = {"id": "r1", "score": 1.0, "result": True}
    entry = {"step": "v", "value": 0.5, "passed": False, "status": "succeeded"}
    assert _rows({**entry, "rows": {"results": [kept, {"id": "r2", "skipped": True}]}}) == [kept]
    assert _rows({**entry, "rows": {"passed": 1}}) == [
        {"id": "v", "score": 0.5, "result": False, "justification": "score 0.500"}
    ]
    assert _rows({**entry, "value": None, "status": "failed", "rows": {}})[0]["justification"] == (
        "no score (the step failed)"
    )
