"""`check_response` (assertions on an agent's answer); `json_in`, the JSON an answer holds.

Each verifier records a Score (0..1, a threshold, a row per criterion). A run's score is the mean of its
steps' scores, unless the task has `aggregate_verifiers` steps: then the last of them is the run's score. The
framework's verifiers are modules of their own: `rubrics` (rubrics_verifier), `response_verifier`
(agent_prompt_response_verifier), `aggregate_verifiers`, `sandbox_verifier`, `env_outcome`.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import Field

from agent_env.spec.paths import walk
from agent_env.spec.run import Criterion, Score
from agent_env.steps import StepConfig, StepContext, StepResult, step_type
from agent_env.steps.builtin.check import Check

# -- check_response --


class ResponseCheck(Check):
    """An assertion on an answer: on its text, or (with `path`) on a value in the JSON it contains."""

    path: str | None = Field(
        None,
        description="read the answer as JSON and test the value here "
        "(dots walk into objects and lists; '' for the whole JSON)",
    )


class CheckResponseConfig(StepConfig):
    response: Any = Field(description="the answer, e.g. ${steps.ask.outputs.answer}")
    checks: list[ResponseCheck] = Field(min_length=1)
    pass_threshold: float = Field(1.0, ge=0, le=1)


def _fenced(text: str) -> list[str]:
    """The ```json blocks of a text, by splitting: linear (the lazy regex it replaces was quadratic on a
    fence followed by much whitespace — seconds on an agent's 20 KB answer)."""
    parts = text.split("```")
    blocks = parts[1:-1:2]  # between an opening fence and its closing one
    return [(block[4:] if block.startswith("json") else block).lstrip() for block in blocks]


def json_in(text: Any) -> Any:
    """The JSON an answer holds: all of it, or a fenced ```json block, or its first {...} / [...]."""
    if not isinstance(text, str):
        return text
    candidates = [text, *_fenced(text)]
    for opener, closer in ("{}", "[]"):
        start, end = text.find(opener), text.rfind(closer)
        if 0 <= start < end:
            candidates.append(text[start : end + 1])
    for candidate in candidates:
        try:
            return json.loads(candidate)
        except ValueError:
            continue
    raise ValueError("the answer holds no JSON")


@step_type("check_response", config=CheckResponseConfig, local=True, timeout="30s", retries=0)
async def check_response(ctx: StepContext, config: CheckResponseConfig) -> StepResult:
    """Assertions on an agent's answer (contains, matches, equals, JSON paths...); records the score."""
    criteria = []
    for check in config.checks:
        value = config.response
        if check.path is not None:
            try:
                value = walk(json_in(value), check.path)
            except ValueError as e:
                criteria.append(Criterion(name=check.name, passed=False, weight=check.weight, detail=str(e)))
                continue
            except KeyError as e:
                criteria.append(
                    Criterion(
                        name=check.name,
                        passed=False,
                        weight=check.weight,
                        detail=f"the answer's JSON has nothing at {check.path!r} ({e.args[0]!r})",
                    )
                )
                continue
        criteria.append(check.evaluate_on(value))
    return StepResult(
        outputs={"passed": sum(c.passed for c in criteria), "total": len(criteria)},
        score=Score.from_criteria(criteria, config.pass_threshold),
    )
