"""`aggregate_verifiers`, the framework's: one score from other verifiers. The last one of a task is the run's score.

Two ways to name what it combines:
- `verifier_ids` (the framework's): the verifiers' result rows are pooled (rows marked skipped left out) and
  aggregated once, as if one rubric had been split between them. A verifier is named by its `verifier_id`, else
  its step id; one that keeps no rows (`check`, `check_response`...) counts as one row, its step's score. An
  unknown name is refused when the run is planned.
- `inputs` (ours): the steps' scores, each with a weight.
`score_aggregator`: weighted_average (the default; a row's negative weight is a penalty), all_pass or any_pass.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from agent_env.errors import BadInput
from agent_env.gateway_client.wire import JsonObject
from agent_env.spec.named_steps import verifier_step
from agent_env.spec.run import Criterion, PlannedConfig, Score
from agent_env.spec.templates import ref
from agent_env.steps import PlanContext, StepConfig, StepContext, StepResult, step_type
from agent_env.steps.builtin.sandbox_verifier import DETAIL_CHARS, aggregate, row_score


class AggregateInput(StepConfig):
    step: str
    weight: float = Field(1.0, gt=0)


class AggregateVerifiersConfig(StepConfig):
    verifier_ids: list[str] = Field(default_factory=list, description="verifiers whose result rows are pooled")
    inputs: list[str | AggregateInput] = Field(default_factory=list, description="steps whose scores are combined")
    score_aggregator: Literal["all_pass", "any_pass", "weighted_average"] = Field(
        "weighted_average", description="weighted mean of the rows (scores); 1 if all (any) passed, else 0"
    )
    verifier_id: str | None = Field(None, description="the name its result goes by (default: the step id)")
    pass_threshold: float = Field(1.0, ge=0, le=1, description="the score at or above which the step passes")
    scores: list[JsonObject] = Field(default_factory=list, description="filled in when the run is planned")

    @model_validator(mode="after")
    def _one_way(self) -> AggregateVerifiersConfig:
        if bool(self.verifier_ids) == bool(self.inputs):
            raise ValueError("give `verifier_ids` (pool their result rows) or `inputs` (combine step scores): one")
        return self

    def steps(self) -> list[AggregateInput]:
        return [i if isinstance(i, AggregateInput) else AggregateInput(step=i) for i in self.inputs]


def _refs(step: str) -> JsonObject:
    return {
        "value": ref(f"steps.{step}.score"),
        "passed": ref(f"steps.{step}.passed"),
        "status": ref(f"steps.{step}.status"),
    }


def prepare_aggregate(config: PlannedConfig, plan: PlanContext) -> PlannedConfig:
    checked = AggregateVerifiersConfig.model_validate(config)
    if checked.inputs:
        config["scores"] = [{"step": i.step, "weight": i.weight, **_refs(i.step)} for i in checked.steps()]
        return config
    if plan.task is None or plan.step_id is None:
        raise BadInput("verifier_ids are found within a task", "plan the step as part of a task")
    config["scores"] = []
    for verifier in checked.verifier_ids:
        step = verifier_step(plan.task, plan.step_id, verifier)
        config["scores"].append(
            {"verifier": verifier, "step": step, "rows": ref(f"steps.{step}.outputs"), **_refs(step)}
        )
    return config


def _rows(entry: JsonObject) -> list[JsonObject]:
    """A verifier's result rows (without the skipped ones), or one row: its step's score."""
    outputs = entry.get("rows")
    rows = outputs.get("results") if isinstance(outputs, dict) else None
    if isinstance(rows, list) and all(isinstance(r, dict) for r in rows):
        return [r for r in rows if not r.get("skipped")]
    if entry["value"] is None:
        return [
            {
                "id": entry["step"],
                "score": 0.0,
                "result": False,
                "justification": f"no score (the step {entry['status']})",
            }
        ]
    value = float(entry["value"])
    return [
        {"id": entry["step"], "score": value, "result": bool(entry["passed"]), "justification": f"score {value:.3f}"}
    ]


def _name(verifier: str, row: JsonObject, index: int) -> str:
    label = row.get("id") or row.get("criterion") or f"{row.get('type', 'row')} #{index}"
    return f"{verifier}/{label}" if label != verifier else verifier


@step_type(
    "aggregate_verifiers",
    config=AggregateVerifiersConfig,
    local=True,
    timeout="30s",
    retries=0,
    prepare=prepare_aggregate,
    step_refs=("inputs",),
)
async def aggregate_verifiers(ctx: StepContext, config: AggregateVerifiersConfig) -> StepResult:
    """Pool verifiers' result rows (or combine steps' scores) into one score, clamped to 0..1: the run's score."""
    rows: list[JsonObject] = []
    names: list[str] = []
    for entry in config.scores:
        if "verifier" in entry:
            pooled = _rows(entry)
            rows += pooled
            names += [_name(entry["verifier"], r, i) for i, r in enumerate(pooled)]
            continue
        weight = entry["weight"]
        if entry["value"] is None:
            rows.append(
                {
                    "score": 0.0,
                    "result": False,
                    "weight": weight,
                    "justification": f"no score (the step {entry['status']})",
                }
            )
        else:
            value = float(entry["value"])
            rows.append(
                {
                    "score": value,
                    "result": bool(entry["passed"]),
                    "weight": weight,
                    "justification": f"score {value:.3f}",
                }
            )
        names.append(entry["step"])
    value = round(aggregate(rows, config.score_aggregator), 6)
    criteria = [
        Criterion(
            name=n,
            passed=bool(r["result"]),
            weight=float(r.get("weight", 1.0)),
            detail=str(r.get("justification", ""))[:DETAIL_CHARS],
            score=row_score(r),
        )
        for n, r in zip(names, rows, strict=True)
    ]
    return StepResult(
        outputs={
            "verifier_id": config.verifier_id or ctx.step_id,
            "score": value,
            "score_aggregator": config.score_aggregator,
            **({"source_verifier_ids": config.verifier_ids} if config.verifier_ids else {}),
        },
        score=Score(value=value, threshold=config.pass_threshold, criteria=criteria),
    )
