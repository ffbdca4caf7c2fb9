"""`rubrics_verifier`, the framework's: a judge grades an agent's prompt, response and trajectory against rubric
criteria; the rows are aggregated into the step's score.

The framework's fields: `criteria` (rows `{id, description, weight}`; a negative weight marks an anti-pattern,
sent to the judge as `"negative": true` and scored as a penalty by weighted_average; other keys of a row go to the
judge as written), `prompt_id` (the prompt_agent step whose prompt, answer and, with `use_trajectory`, messages and
tool calls the judge reads), `score_aggregator` (all_pass, the default; any_pass; weighted_average),
`verifier_id`, `output_format` (rubric_binary: a verdict per criterion; rubric_partial: a score from 0 to 1),
`grading_policy_prompt`, `agent_name` (a deployed agent judges) or `use_agent_judge: false` with `default_model`
and `default_model_api_base` (the judge model: [models.judge] through our model endpoints), and
`judge_timeout_seconds`. The framework's fields this judge does not do are refused when the task is checked. Unlike
the framework, no judge agent is deployed for the step: without `agent_name` the judge model grades (the
framework's `use_agent_judge` defaults to an agent it deploys; `use_agent_judge: true` without `agent_name` is
refused here, naming the fix).

Ours besides: `each_call` (a criterion per tool call an agent made), `transcripts` (more prompts), `state`
(read-only tool calls whose results the judge sees), `reference` / `reference_file`, `judge_model` (another
endpoint), `attempts`, `pass_threshold`.
"""

from __future__ import annotations

import json
import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from agent_env import packing
from agent_env.agents.usage import Usage
from agent_env.config import ModelSettings
from agent_env.errors import BadInput
from agent_env.gateway_client import GatewayClient
from agent_env.gateway_client.wire import JsonObject
from agent_env.spec.agent import ModelOverride
from agent_env.spec.named_steps import agent_step
from agent_env.spec.paths import walk
from agent_env.spec.run import Criterion, PlannedConfig, Score
from agent_env.spec.templates import ref
from agent_env.steps import PlanContext, StepConfig, StepContext, StepFailed, StepResult, step_type
from agent_env.steps.builtin import judging
from agent_env.steps.builtin.envs import instance_id, store_artifact
from agent_env.steps.builtin.response_verifier import prepare_prompt
from agent_env.steps.builtin.sandbox_verifier import aggregate, row_score
from agent_env.stores import keys

CRITERION_ID = r"^[A-Za-z0-9_.\-]{1,80}$"
ScoreAggregator = Literal["all_pass", "any_pass", "weighted_average"]
# The framework's fields this judge does not do, and what to do instead.
UNSUPPORTED = {
    "trajectory_filter": "the judge reads the prompt's messages and tool calls as recorded: remove it",
    "max_thinking_tokens": "set the judge model's limits in [models.judge]: remove it",
    "effort": "set the judge model in [models.judge] or `default_model`: remove it",
    "judge_a2a_agent_id": "deploy the judge agent with a deploy_agent step and name it in `agent_name`",
    "judge_sandbox_type": "deploy the judge agent with a deploy_agent step (its `provider`) and name it in `agent_name`",
    "context_facts_for_judge": "give the values in `grading_policy_prompt` (${steps...} references work there)",
    "grade_up_to_turn": "the judge grades the whole prompt: remove it",
    "run_context_for_judge": "name the prompts the judge reads in `transcripts`",
    "judge_batch_size": "one judge call grades every criterion: remove it",
    "judge_batch_concurrency": "one judge call grades every criterion: remove it",
}
OUTPUT_FORMATS = ("rubric_binary", "rubric_partial")


class RubricCriterion(BaseModel):
    """A rubric row, as the framework writes it; keys besides these reach the judge as written."""

    model_config = ConfigDict(extra="allow")

    id: str = Field(pattern=CRITERION_ID)
    description: str = Field(min_length=1, description="what must hold, said so a careful grader can decide it")
    weight: float = Field(1.0, description="its share of weighted_average; negative: an anti-pattern, a penalty")
    pass_threshold: float | None = Field(None, ge=0, le=1, description="rubric_partial: the score it passes at")

    @model_validator(mode="after")
    def _check(self) -> RubricCriterion:
        if self.weight == 0:
            raise ValueError(f"criterion {self.id!r}: weight 0 counts for nothing; give it a weight or remove it")
        if (self.model_extra or {}).get("outcomes") is not None:
            raise ValueError(f"criterion {self.id!r}: `outcomes` is not supported; score from 0 to 1 (rubric_partial)")
        return self

    def for_judge(self) -> JsonObject:
        row = self.model_dump(exclude_none=True)
        return {**row, "negative": True} if self.weight < 0 else row


class EachCall(StepConfig):
    """One criterion per tool call an agent made: grade every decision, not just the end state.
    `{tool}`, `{agent}`, `{arguments.NAME}` and `{result...}` in `description` are filled from the call."""

    env: str = Field(description="the deploy_env step whose trajectory holds the calls")
    tools: list[str] = Field(min_length=1, description="the tools whose calls are graded")
    agent: str | None = Field(None, description="only this agent's calls (its name in the environment)")
    description: str = Field(min_length=1)
    weight: float = Field(1.0, gt=0)
    at_least: int = Field(1, ge=0, description="fewer calls than this fails a criterion of its own")


class StateProbe(StepConfig):
    """A read-only tool call whose result the judge sees, e.g. the invoices after the agent's work."""

    env: str
    tool: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    role: str | None = None
    label: str | None = Field(None, description="its key in the judge's material (default: the tool)")


class RubricsVerifierConfig(StepConfig):
    criteria: list[RubricCriterion] = Field(default_factory=list)
    prompt_id: str | None = Field(None, description="the prompt graded: a prompt_agent step's prompt_id, or its id")
    score_aggregator: ScoreAggregator = "all_pass"
    verifier_id: str | None = Field(None, description="the name its results go by (default: the step id)")
    output_format: str = Field("rubric_binary", description="rubric_binary (pass/fail) or rubric_partial (0..1)")
    grading_policy_prompt: str = Field("", description="what the judge should know beyond the criteria (a policy)")
    agent_name: str | None = Field(None, description="a deployed agent that judges (a deploy_agent step's agent)")
    use_agent_judge: bool | None = Field(None, description="false: the judge model; true needs `agent_name`")
    use_trajectory: bool = Field(True, description="the judge reads the prompt's messages and tool calls too")
    default_model: str | None = Field(None, description="the judge model's name (default: [models.judge]'s)")
    default_model_api_base: str | None = Field(None, pattern=r"^https?://", description="the judge model's URL")
    judge_timeout_seconds: int | None = Field(None, gt=0, le=3600, description="per judge answer")
    each_call: EachCall | None = None
    transcripts: list[str] = Field(
        default_factory=list, description="more prompt_agent steps whose conversation and tool calls the judge reads"
    )
    state: list[StateProbe] = Field(default_factory=list)
    reference: Any = Field(None, description="a reference answer or answer key the judge may use (inline)")
    reference_file: str | None = Field(None, description="the same, from a JSON or text file of the bundle")
    judge_model: ModelOverride | None = Field(None, description="another endpoint for the judge model")
    attempts: int = Field(3, ge=1, le=10, description="asks before an unusable answer fails the step")
    pass_threshold: float = Field(1.0, ge=0, le=1, description="the score at or above which the step passes")
    model: ModelSettings | None = Field(None, description="filled in when the run is planned")
    reference_artifact: str | None = Field(None, description="filled in when the run is planned")
    judge_deployed: dict[str, Any] = Field(default_factory=dict, description="filled in when the run is planned")
    prompt_step: str | None = Field(None, description="filled in when the run is planned")
    prompt_status: str | None = Field(None, description="filled in when the run is planned")
    trajectory_filter: Any = Field(None, description="not supported")
    max_thinking_tokens: Any = Field(None, description="not supported")
    effort: Any = Field(None, description="not supported")
    judge_a2a_agent_id: Any = Field(None, description="not supported")
    judge_sandbox_type: Any = Field(None, description="not supported")
    context_facts_for_judge: Any = Field(None, description="not supported")
    grade_up_to_turn: Any = Field(None, description="not supported")
    run_context_for_judge: Any = Field(None, description="not supported")
    judge_batch_size: Any = Field(None, description="not supported")
    judge_batch_concurrency: Any = Field(None, description="not supported")

    @field_validator("output_format")
    @classmethod
    def _format(cls, value: str) -> str:
        if value not in OUTPUT_FORMATS:
            raise ValueError(f"output_format {value!r} is not supported; use {' or '.join(OUTPUT_FORMATS)}")
        return value

    @model_validator(mode="after")
    def _check(self) -> RubricsVerifierConfig:
        for name, fix in UNSUPPORTED.items():
            if getattr(self, name) is not None:
                raise ValueError(f"field {name!r} is not supported: {fix}")
        if not self.criteria and self.each_call is None:
            raise ValueError("give `criteria`, `each_call`, or both")
        ids = [c.id for c in self.criteria]
        if dupes := sorted({i for i in ids if ids.count(i) > 1}):
            raise ValueError(f"criterion ids must be unique: {', '.join(dupes)}")
        if self.reference is not None and self.reference_file is not None:
            raise ValueError("give `reference` or `reference_file`, not both")
        if self.use_agent_judge and self.agent_name is None:
            raise ValueError(
                "`use_agent_judge`: a judge agent deployed for the step is not supported; deploy one with a "
                "deploy_agent step and name it in `agent_name`, or set use_agent_judge to false (the judge model)"
            )
        if self.agent_name is not None:
            if self.use_agent_judge is False:
                raise ValueError("`agent_name` names a judge agent, and use_agent_judge is false: drop one of them")
            given = [f for f in ("judge_model", "default_model", "default_model_api_base") if getattr(self, f)]
            if given:
                raise ValueError(
                    f"a judge agent (`agent_name`) brings its own model; `{given[0]}` is for the judge model"
                )
        if self.judge_model and (
            (self.default_model and self.judge_model.model)
            or (self.default_model_api_base and self.judge_model.base_url)
        ):
            raise ValueError("give the judge model's name and URL once: in `default_model`/`default_model_api_base`")
        return self


def prepare_rubrics(config: PlannedConfig, plan: PlanContext) -> PlannedConfig:
    """Find the graded prompt and the judge agent by their names, pin the judge model and the reference file."""
    where = f"rubrics_verifier {plan.step_id!r}"
    if plan.task is None or plan.step_id is None:
        raise BadInput(f"{where}: prompt_id and agent_name are found within a task", "plan the step as part of a task")
    if config.get("prompt_id"):
        prepare_prompt(config, plan)
    if config.get("agent_name"):
        config["judge_deployed"] = ref(f"steps.{agent_step(plan.task, plan.step_id, config['agent_name'])}.outputs")
    else:
        override = {
            **(config.get("judge_model") or {}),
            "model": config.get("default_model") or (config.get("judge_model") or {}).get("model"),
            "base_url": config.get("default_model_api_base") or (config.get("judge_model") or {}).get("base_url"),
        }
        judging.prepare_judge_model(config, plan, override)
        if config.get("judge_timeout_seconds"):
            config["model"]["timeout"] = float(config["judge_timeout_seconds"])
    if config.get("reference_file"):
        name = config["reference_file"]
        if plan.bundle is None:
            raise BadInput(
                f"{where}: reference_file {name!r}: a task outside a bundle has no files", "give `reference`"
            )
        try:  # no link followed, not even one that stays inside (see agent_env.packing)
            data = packing.read(plan.bundle, name)
        except packing.NotInside:
            raise BadInput(
                f"{where}: reference_file {name!r} is not a file inside the bundle {plan.bundle}",
                "name a file inside the bundle's folder",
            ) from None
        except BadInput as e:
            raise BadInput(f"{where}: reference_file {name!r}: {e.problem}", e.fix) from None
        config["reference_artifact"] = store_artifact(plan, data)
    return config


@step_type(
    "rubrics_verifier",
    config=RubricsVerifierConfig,
    timeout="20m",
    prepare=prepare_rubrics,
    retries=2,
    step_refs=("transcripts",),
)
async def rubrics_verifier(ctx: StepContext, config: RubricsVerifierConfig) -> StepResult:
    """A judge (the judge model or a judge agent) grades a prompt's answer, trajectory and end state against a rubric."""
    verifier = config.verifier_id or ctx.step_id
    if config.prompt_step and config.prompt_status != "succeeded":
        return _prompt_failed(verifier, config)
    criteria = list(config.criteria)
    material = await _material(ctx, config)
    shortfall = None
    if config.each_call is not None:
        per_call, shortfall = await _each_call_criteria(ctx, await ctx.gateway(), config.each_call)
        criteria += per_call
    request = {"criteria": [c.for_judge() for c in criteria], "material": material}
    used: Usage = {}  # the judge's model calls, per model
    judge = judging.Judging(
        model=config.model,
        judge_deployed=config.judge_deployed,
        attempts=config.attempts,
        output_format="rubric_partial" if config.output_format == "rubric_partial" else "rubric_binary",
        deadline_s=float(config.judge_timeout_seconds or 600),
    )
    verdicts, asked = await judging.judge(ctx, judge, request, used)
    by_id = {v["id"]: v for v in verdicts}
    rows = [_row(c, i, by_id[c.id], judge.output_format) for i, c in enumerate(criteria)]
    if shortfall:
        rows.append(shortfall)
    return _scored(verifier, rows, config, asked=asked, **({"usage": used} if used else {}))


def _row(criterion: RubricCriterion, index: int, verdict: JsonObject, output_format: str) -> JsonObject:
    threshold = criterion.pass_threshold if criterion.pass_threshold is not None else judging.PARTIAL_PASS
    passed = verdict["score"] >= threshold if output_format == "rubric_partial" else verdict["verdict"] == "pass"
    return {
        **criterion.model_dump(exclude_none=True),
        "criterion_index": index,
        "score": verdict["score"],
        "result": passed,
        "justification": verdict["reason"],
    }


def _scored(verifier: str, rows: list[JsonObject], config: RubricsVerifierConfig, **outputs: Any) -> StepResult:
    value = round(aggregate(rows, config.score_aggregator), 6)
    criteria = [
        Criterion(
            name=str(r["id"]),
            passed=r["result"],
            weight=float(r.get("weight", 1.0)),
            detail=str(r["justification"]),
            score=row_score(r),
        )
        for r in rows
    ]
    return StepResult(
        outputs={"verifier_id": verifier, "results": rows, "score": value, **outputs},
        score=Score(value=value, threshold=config.pass_threshold, criteria=criteria),
    )


def _prompt_failed(verifier: str, config: RubricsVerifierConfig) -> StepResult:
    """The framework's rule: a prompt that ended in an error is not judged; it scores 0, saying why."""
    why = f"Skipped: the prompt (step {config.prompt_step!r}) {config.prompt_status}"
    row = {"id": "prompt_error", "score": 0.0, "result": False, "justification": why}
    return _scored(verifier, [row], config, asked=0)


async def _transcript(ctx: StepContext, step: str) -> JsonObject:
    key = keys.transcript(ctx.run_id, step)
    if not await ctx.stores.aio.objects.exists(key):
        raise StepFailed(f"step {step!r} left no transcript (is it a prompt_agent step that ran?)")
    doc: JsonObject = json.loads(await ctx.stores.aio.objects.get(key))
    return doc


def _conversation(doc: JsonObject) -> JsonObject:
    return {
        "messages": [{"speaker": m["speaker"], "text": m["text"]} for m in doc["messages"]],
        "tool_calls": [_call_summary(c) for c in doc["tool_calls"]],
    }


async def _material(ctx: StepContext, config: RubricsVerifierConfig) -> JsonObject:
    """What the judge reads: the graded prompt, more transcripts, probed state, a reference, the policy."""
    material: JsonObject = {}
    if config.grading_policy_prompt:
        material["grading_policy"] = config.grading_policy_prompt
    if config.prompt_step:
        doc = await _transcript(ctx, config.prompt_step)
        answers = [m["text"] for m in doc["messages"] if m.get("side") == "agent"]
        material["agent_prompt"] = doc["messages"][0]["text"] if doc["messages"] else ""
        material["agent_response"] = answers[-1] if answers else ""
        if config.use_trajectory:
            material["agent_trajectory"] = _conversation(doc)
    for step in config.transcripts:
        material.setdefault("transcripts", {})[step] = _conversation(await _transcript(ctx, step))
    gateway = await ctx.gateway() if config.state else None
    for probe in config.state:
        outcome = await gateway.call_as(instance_id(ctx, probe.env), probe.tool, probe.arguments, role=probe.role)  # type: ignore[union-attr]  # (probes: a gateway)
        material.setdefault("state", {})[probe.label or probe.tool] = outcome.get(
            "result", {"error": outcome.get("error")}
        )
    if config.reference is not None:
        material["reference"] = config.reference
    elif config.reference_artifact:
        raw = (await ctx.stores.aio.objects.get(config.reference_artifact)).decode()
        try:
            material["reference"] = json.loads(raw)
        except ValueError:
            material["reference"] = raw
    return material


def _call_summary(entry: JsonObject) -> JsonObject:
    keep = ("agent", "role", "tool", "arguments", "result", "error", "refused", "virtual_time")
    return {k: entry[k] for k in keep if k in entry and (k != "refused" or entry[k])}


PLACEHOLDER = re.compile(r"\{([A-Za-z_][\w.]*)\}")


async def _each_call_criteria(
    ctx: StepContext, gateway: GatewayClient, each: EachCall
) -> tuple[list[RubricCriterion], JsonObject | None]:
    entries = await gateway.trajectory(instance_id(ctx, each.env))
    calls = [
        e
        for e in entries
        if e.get("tool") in each.tools
        and (each.agent is None or e.get("agent") == each.agent)
        and e.get("via") != "run"
    ]
    out = []
    for n, call in enumerate(calls, 1):

        def fill(m: re.Match[str], call: JsonObject = call) -> str:
            try:
                value = walk(call, m.group(1))
            except KeyError:
                return m.group(0)
            return value if isinstance(value, str) else json.dumps(value)

        text = PLACEHOLDER.sub(fill, each.description)
        out.append(RubricCriterion(id=f"call-{n}", description=text, weight=each.weight))
    shortfall = None
    if len(calls) < each.at_least:  # decided here: a judge cannot grade calls that were not made
        why = f"{len(calls)} call(s) to {', '.join(each.tools)}; at least {each.at_least} expected"
        shortfall = {"id": "enough-calls", "weight": each.weight, "score": 0.0, "result": False, "justification": why}
    return out, shortfall
