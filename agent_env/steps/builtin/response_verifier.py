"""`agent_prompt_response_verifier`, the framework's: deterministic checks of an agent's answer to a prompt, no
judge. The prompt is named by `prompt_id` (a prompt_agent step's `prompt_id`, or its id); the answer checked is
the agent's last message there, whole (from the transcript, not the step's clipped output).

Criteria are the framework's rows: `response_contains` (every one of `needles` is in the answer) and
`response_regex_present` (`pattern` is found in it; `flags` are names of Python's re flags: IGNORECASE, MULTILINE,
DOTALL, default DOTALL). Patterns run on RE2 like every pattern of a spec (agent_env.spec.patterns). A row of
another type, or without its needles or pattern, is refused when the task is checked. A prompt that failed or
timed out is not checked: the step scores 0 with one `prompt_error` row, as in the framework. The rows are
aggregated as `score_aggregator` says (all_pass by default); the outputs hold them under `verifier_id`.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from agent_env.errors import BadInput
from agent_env.gateway_client.wire import JsonObject
from agent_env.spec.named_steps import prompt_step
from agent_env.spec.patterns import compile_pattern, search
from agent_env.spec.run import Criterion, PlannedConfig, Score
from agent_env.spec.templates import ref
from agent_env.steps import PlanContext, StepConfig, StepContext, StepFailed, StepResult, step_type
from agent_env.steps.builtin.sandbox_verifier import DETAIL_CHARS, aggregate, row_score
from agent_env.stores import keys

# Python's re flag names the framework takes, as RE2's inline flags.
FLAGS = {"IGNORECASE": "i", "I": "i", "MULTILINE": "m", "M": "m", "DOTALL": "s", "S": "s"}


class ResponseCriterion(BaseModel):
    """A framework rubric row for an answer; keys besides these are kept on its result row."""

    model_config = ConfigDict(extra="allow")

    type: Literal["response_contains", "response_regex_present"]
    needles: list[str] | None = Field(None, description="response_contains: strings the answer must all contain")
    pattern: str | None = Field(None, description="response_regex_present: a regular expression found in it")
    flags: list[str] | None = Field(None, description="IGNORECASE, MULTILINE, DOTALL (default: DOTALL)")
    weight: float = 1.0

    @model_validator(mode="after")
    def _complete(self) -> ResponseCriterion:
        if self.type == "response_contains" and not self.needles:
            raise ValueError("a response_contains criterion needs non-empty `needles`")
        if self.type == "response_regex_present":
            if not self.pattern:
                raise ValueError("a response_regex_present criterion needs a non-empty `pattern`")
            compile_pattern(self.regex(), "pattern")
        return self

    def regex(self) -> str:
        """The pattern with its flags inline (RE2 takes them so)."""
        names = ["DOTALL"] if self.flags is None else self.flags
        if unknown := [n for n in names if n not in FLAGS]:
            raise ValueError(
                f"flags {unknown} are not supported; use {', '.join(sorted(set(FLAGS) - {'I', 'M', 'S'}))}"
            )
        inline = "".join(sorted({FLAGS[n] for n in names}))
        return f"(?{inline}){self.pattern}" if inline else str(self.pattern)

    def check(self, answer: str) -> tuple[bool, str]:
        if self.type == "response_contains":
            missing = [n for n in self.needles or [] if n not in answer]
            return (False, f"missing: {missing}") if missing else (True, "all needles present")
        found = search(self.regex(), answer)
        return found, "pattern matched" if found else f"no match for pattern {self.pattern!r}"


class ResponseVerifierConfig(StepConfig):
    prompt_id: str = Field(min_length=1, description="the prompt: a prompt_agent step's prompt_id, or its id")
    criteria: list[ResponseCriterion] = Field(default_factory=list)
    score_aggregator: Literal["all_pass", "any_pass", "weighted_average"] = "all_pass"
    verifier_id: str | None = Field(None, description="the name its results go by (default: the step id)")
    pass_threshold: float = Field(1.0, ge=0, le=1, description="the score at or above which the step passes")
    prompt_step: str | None = Field(None, description="filled in when the run is planned")
    prompt_status: str | None = Field(None, description="filled in when the run is planned")


def prepare_prompt(config: PlannedConfig, plan: PlanContext) -> PlannedConfig:
    """The prompt_agent step `prompt_id` names, and a reference to how it ended."""
    if plan.task is None or plan.step_id is None:
        raise BadInput("prompt_id is found within a task", "plan the step as part of a task")
    step = prompt_step(plan.task, plan.step_id, config["prompt_id"])
    config["prompt_step"], config["prompt_status"] = step, ref(f"steps.{step}.status")
    return config


async def last_answer(ctx: StepContext, step: str) -> tuple[str | None, str]:
    """The agent's last answer in a prompt_agent step's transcript, whole; None and why when the prompt failed."""
    key = keys.transcript(ctx.run_id, step)
    if not await ctx.stores.aio.objects.exists(key):
        raise StepFailed(f"step {step!r} left no transcript (is it a prompt_agent step that ran?)")
    doc: Any = json.loads(await ctx.stores.aio.objects.get(key))
    if doc.get("timed_out"):
        return None, f"the prompt timed out: {doc['timed_out']}"
    answers = [m["text"] for m in doc.get("messages", []) if m.get("side") == "agent"]
    return (answers[-1] if answers else ""), ""


@step_type(
    "agent_prompt_response_verifier",
    config=ResponseVerifierConfig,
    local=True,
    timeout="1m",
    retries=1,
    prepare=prepare_prompt,
)
async def agent_prompt_response_verifier(ctx: StepContext, config: ResponseVerifierConfig) -> StepResult:
    """Check an agent's answer to a prompt (contains, regex present; no judge) and score it."""
    verifier = config.verifier_id or ctx.step_id
    answer, why = (None, f"the prompt (step {config.prompt_step!r}) {config.prompt_status}")
    if config.prompt_status == "succeeded" and config.prompt_step:
        answer, why = await last_answer(ctx, config.prompt_step)
    rows: list[JsonObject]
    if answer is None:
        rows = [{"id": "prompt_error", "score": 0.0, "result": False, "justification": f"Skipped: {why}"}]
    else:
        rows = []
        for index, criterion in enumerate(config.criteria):
            passed, detail = criterion.check(answer)
            rows.append(
                {
                    **criterion.model_dump(exclude_none=True),
                    "criterion_index": index,
                    "score": 1.0 if passed else 0.0,
                    "result": passed,
                    "justification": detail[:DETAIL_CHARS],
                }
            )
    value = round(aggregate(rows, config.score_aggregator), 6)
    criteria = [
        Criterion(
            name=str(r.get("id") or r.get("criterion") or f"{r['type']} #{r['criterion_index']}"),
            passed=r["result"],
            weight=float(r.get("weight", 1.0)),
            detail=r["justification"],
            score=row_score(r),
        )
        for r in rows
    ]
    return StepResult(
        outputs={"verifier_id": verifier, "results": rows, "score": value},
        score=Score(value=value, threshold=config.pass_threshold, criteria=criteria),
    )
