"""A person reviews a run's output: the framework's `review` step, answered through the people's inbox.

The step opens a review on the gateway (`agents.reviews`) that shows the outputs under review, then waits for a
person's decision, given as human agents' turns are answered: `agent-env agents pending` lists it, `agent-env
agents answer ID TEXT [--score S] [--abort]` decides it (or `POST /admin/human/{id}`). Continue: the step passes,
with the reviewer's comment in its outputs and their score, if they gave one, as its score. Abort: the step fails,
so the steps after it do not run. No decision by the deadline (`timeout_seconds` after it opened): the step fails,
as in the framework.

What is under review: the outputs of the steps named in `show`; by default, of the `prompt_agent` steps it comes
after (the agents' answers), else of the steps it depends on.

The wait is durable and keeps nothing in the run's history: the gateway stores the review and its deadline, the
step's activity heartbeats while it long-polls the gateway, a worker that dies is noticed by the heartbeat timeout,
and the step retried elsewhere opens the same review again (its deadline and any decision kept) and waits on.
"""

from __future__ import annotations

from pydantic import Field

from agent_env.agents.reviews import MAX_COMMENT_CHARS, MAX_LABEL_CHARS, MAX_REVIEW_S
from agent_env.gateway_client import GatewayRefused
from agent_env.gateway_client.wire import JsonObject
from agent_env.spec.run import Criterion, PlannedConfig, Score
from agent_env.spec.task import upstream
from agent_env.spec.templates import ref
from agent_env.spec.world_state import clip
from agent_env.step_types import catalog
from agent_env.steps import PlanContext, StepConfig, StepContext, StepFailed, StepResult, step_type

DEFAULT_TIMEOUT_S = 3 * 3600  # the framework's
DEFAULT_POLL_S = 5
MAX_POLL_S = 30  # one long poll of the gateway (its requests time out at 60 s)
MAX_SHOWN_BYTES = 16_000  # of each step's outputs, in the review


class ReviewConfig(StepConfig):
    label: str | None = Field(None, max_length=MAX_LABEL_CHARS, description="what the reviewer is asked, in a line")
    timeout_seconds: int = Field(
        DEFAULT_TIMEOUT_S, ge=1, le=MAX_REVIEW_S, description="the deadline, from the review's opening"
    )
    poll_interval_seconds: int = Field(
        DEFAULT_POLL_S,
        ge=0,
        description="the longest one wait on the gateway lasts (at most 30; 0: the default); a decision is "
        "seen as soon as it is made",
    )
    show: list[str] | None = Field(
        None,
        description="steps whose outputs the reviewer sees; default: the prompt_agent steps before it, else the "
        "steps it depends on",
    )
    pass_threshold: float = Field(
        0.5, ge=0, le=1, description="a reviewer's score below it fails the run (a decision without a score does not)"
    )
    upstream: dict[str, JsonObject] = Field(default_factory=dict, description="filled in when the run is planned")


def prepare_review(config: PlannedConfig, plan: PlanContext) -> PlannedConfig:
    """The outputs under review, as references the workflow resolves when the review starts."""
    shown = config.get("show")
    if shown is None and plan.task is not None and plan.step_id is not None:
        deps = {s.id: s.depends_on for s in plan.task.steps}
        before = upstream(plan.step_id, deps)
        prompts = [s.id for s in plan.task.steps if s.id in before and catalog.get(s.type).conversation]
        shown = prompts or deps[plan.step_id]
    config["upstream"] = {step: ref(f"steps.{step}.outputs") for step in shown or []}
    return config


@step_type("review", config=ReviewConfig, timeout="8d", retries=20, prepare=prepare_review, step_refs=("show",))
async def review(ctx: StepContext, config: ReviewConfig) -> StepResult:
    """A person reviews the run's output through the people's inbox, by a deadline: continue (with a score), or abort."""
    gateway = await ctx.gateway()
    turn = f"{ctx.run_id}.{ctx.step_id}/review"
    wait = min(config.poll_interval_seconds or DEFAULT_POLL_S, MAX_POLL_S)
    try:
        doc = await gateway.open_review(
            {
                "id": turn,
                "run_id": ctx.run_id,
                "step": ctx.step_id,
                "label": config.label,
                "upstream": {step: clip(out, MAX_SHOWN_BYTES) for step, out in config.upstream.items()},
                "timeout_s": config.timeout_seconds,
            }
        )
        while doc["state"] == "waiting":  # (the activity heartbeats meanwhile: a dead worker is noticed)
            doc = await gateway.human_turn(turn, wait)
    except GatewayRefused as e:
        raise StepFailed(f"review {ctx.step_id!r}: the gateway refused it: {e}") from None
    if doc["state"] == "expired":
        raise StepFailed(
            f"review {ctx.step_id!r} got no decision by its deadline ({doc['deadline']}, {config.timeout_seconds}s "
            f"after it opened) — answer it in time with `agent-env agents answer {turn} TEXT`, or give it a "
            "longer timeout_seconds"
        )
    comment = (doc.get("answer") or "")[:MAX_COMMENT_CHARS]
    by = doc.get("decided_by")
    if doc.get("verdict") == "abort":
        raise StepFailed(f"review {ctx.step_id!r} aborted by {by or 'the reviewer'}: {comment}")
    outputs = {
        "review": turn,
        "decision": "continue",
        "score": doc.get("score"),
        "comment": comment,
        "decided_by": by,
        "decided_at": doc.get("answered_at"),
        "shown": sorted(config.upstream),
    }
    if doc.get("score") is None:
        return StepResult(outputs=outputs)
    value = float(doc["score"])
    passed = value >= config.pass_threshold
    criterion = Criterion(name=ctx.step_id, passed=passed, detail=comment)
    return StepResult(outputs=outputs, score=Score(value=value, threshold=config.pass_threshold, criteria=[criterion]))
