"""`check`: assertions over earlier steps' results, recorded as a score."""

from __future__ import annotations

from typing import Any

from pydantic import Field, model_validator

from agent_env.spec.predicates import Operators, test
from agent_env.spec.run import Criterion, Score
from agent_env.steps import StepConfig, StepContext, StepResult, step_type


class Check(StepConfig, Operators):
    """One assertion: `value` (usually a ${steps...} reference) and exactly one operator."""

    name: str = Field(description="what is being checked, shown in the score rows")
    value: Any = Field(None, description="the value under test")
    weight: float = Field(1.0, gt=0)

    @model_validator(mode="after")
    def _one_operator(self) -> Check:
        self.require_one_operator(f"check '{self.name}'", f"check '{self.name}': 'matches'")
        return self

    def evaluate(self) -> Criterion:
        return self.evaluate_on(self.value)

    def evaluate_on(self, value: Any) -> Criterion:
        """This check's test on `value` (for checks whose value is read elsewhere: a state, an answer)."""
        op, expected = self.operator
        passed, why = test(op, value, expected)
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
