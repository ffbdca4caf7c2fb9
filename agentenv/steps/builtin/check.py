"""`check`: assertions over earlier steps' results, recorded as a score."""

from __future__ import annotations

from typing import Any

from pydantic import Field, model_validator

from agentenv.spec.patterns import check_pattern
from agentenv.spec.predicates import OPERATORS, operator_of, operators_given, test
from agentenv.spec.run import Criterion, Score
from agentenv.steps import StepConfig, StepContext, StepResult, step_type


class Check(StepConfig):
    """One assertion: `value` (usually a ${steps...} reference) and exactly one operator."""

    name: str = Field(description="what is being checked, shown in the score rows")
    value: Any = Field(None, description="the value under test")
    weight: float = Field(1.0, gt=0)
    equals: Any = None
    not_equals: Any = None
    contains: Any = Field(None, description="substring, list item or dict key")
    not_contains: Any = Field(None, description="the value does not contain this")
    matches: str | None = Field(None, description="a regular expression searched in the value's text")
    one_of: list[Any] | None = None
    gt: float | None = None
    gte: float | None = None
    lt: float | None = None
    lte: float | None = None
    truthy: bool | None = Field(None, description="true: the value is truthy; false: it is falsy")

    @model_validator(mode="after")
    def _one_operator(self) -> Check:
        given = operators_given(self)
        if len(given) != 1:
            raise ValueError(
                f"check '{self.name}' must use exactly one operator, got {len(given)}"
                f"{' (' + ', '.join(given) + ')' if given else ''} — choose one of: {', '.join(OPERATORS)}"
            )
        check_pattern(self.matches, f"check '{self.name}': 'matches'")
        return self

    def evaluate(self) -> Criterion:
        op, expected = operator_of(self)
        passed, why = test(op, self.value, expected)
        return Criterion(name=self.name, passed=passed, weight=self.weight, detail=why)


class CheckConfig(StepConfig):
    checks: list[Check] = Field(min_length=1)
    pass_threshold: float = Field(1.0, ge=0, le=1, description="the score at or above which the step passes")


@step_type("check", config=CheckConfig, local=True, timeout="30s", retries=0)
async def check(ctx: StepContext, config: CheckConfig) -> StepResult:
    """Evaluate assertions over earlier results and record the weighted fraction that hold as the score."""
    criteria = [c.evaluate() for c in config.checks]
    score = Score.from_criteria(criteria, config.pass_threshold)
    return StepResult(outputs={"passed": sum(c.passed for c in criteria), "total": len(criteria)}, score=score)
