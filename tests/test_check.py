"""The `check` step's operators and its score."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from agent_env.steps.builtin.check import Check, CheckConfig


@pytest.mark.parametrize(
    "op,value,expected,passed",
    [
        ("equals", 2, 2, True),
        ("equals", "2", 2, False),
        ("not_equals", 1, 2, True),
        ("contains", "Hello, Ada", "Ada", True),
        ("contains", ["a", "b"], "c", False),
        ("contains", {"k": 1}, "k", True),
        ("matches", "order #123", r"#\d+", True),
        ("matches", "none", r"\d", False),
        ("one_of", "b", ["a", "b"], True),
        ("gt", 3, 2, True),
        ("gte", 2, 2, True),
        ("lt", 3, 2, False),
        ("lte", 2, 2, True),
        ("truthy", [], False, True),
        ("truthy", "x", True, True),
    ],
)
def test_operators(op, value, expected, passed):
    assert Check.model_validate({"name": "c", "value": value, op: expected}).evaluate().passed is passed


def test_failure_detail_says_expected_and_got():
    row = Check(name="count", value=3, equals=2).evaluate()
    assert not row.passed and row.detail == "expected equals 2, got 3"


def test_incomparable_values_fail_the_row_not_the_step():
    row = Check.model_validate({"name": "c", "value": "abc", "gt": 1}).evaluate()
    assert not row.passed and "cannot compare" in row.detail


def test_exactly_one_operator():
    with pytest.raises(ValidationError, match="exactly one operator, got 2"):
        Check.model_validate({"name": "c", "value": 1, "equals": 1, "gt": 0})
    with pytest.raises(ValidationError, match="not a valid regular expression"):
        Check.model_validate({"name": "c", "value": 1, "matches": "("})


def test_weighted_score_and_threshold():
    from agent_env.spec.run import Score

    config = CheckConfig.model_validate(
        {
            "pass_threshold": 0.7,
            "checks": [
                {"name": "a", "value": 1, "equals": 1, "weight": 3},
                {"name": "b", "value": 1, "equals": 2, "weight": 1},
            ],
        }
    )
    score = Score.from_criteria([c.evaluate() for c in config.checks], config.pass_threshold)
    assert score.value == 0.75 and score.passed
    assert [c.passed for c in score.criteria] == [True, False]
