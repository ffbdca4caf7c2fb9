"""Asking a judge to grade criteria: the judge model ([models.judge], through our model endpoints) or a deployed
judge agent (over A2A), asked again until its answer is usable. `rubrics_verifier` and
`verify_mcp_env_assessment` grade through it.

The judge gets one JSON request, `{"criteria": [{"id", "description", ...}], "material": {...}}`, and answers
`{"criteria": [{"id", "verdict": "pass" | "fail", "reason"}]}`; with `output_format = "rubric_partial"` it
answers a `score` from 0 to 1 for each criterion instead of a verdict.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal

from agent_env.agents.models import ChatModel, ModelError, check_endpoint, resolve_key
from agent_env.agents.usage import Usage, summed
from agent_env.config import ModelSettings
from agent_env.gateway_client.wire import JsonObject
from agent_env.spec.run import PlannedConfig
from agent_env.spec.templates import ref
from agent_env.steps import PlanContext, StepContext, StepFailed
from agent_env.steps.builtin.grading import json_in
from agent_env.stores import in_thread, open_secrets

JUDGE_USER = "agentenv-judge"  # sent as the request's `user`: who is asking
OutputFormat = Literal["rubric_binary", "rubric_partial"]
PARTIAL_PASS = 0.5  # a rubric_partial criterion passes at this score unless it says its own `pass_threshold`

_SYSTEM = """You are a strict, fair grader. You get criteria and material (what an agent was asked, said and did,
and the state it left). Decide each criterion from the material alone. A criterion marked "negative": true names
something the agent should NOT have done: it is met when that is absent. Answer with one JSON object and nothing
else:
{"criteria": [%s]}
Every criterion id must appear exactly once."""
JUDGE_SYSTEM = (
    _SYSTEM % '{"id": "<criterion id>", "verdict": "pass" | "fail", "reason": "<one sentence citing the material>"}'
)
PARTIAL_SYSTEM = _SYSTEM % (
    '{"id": "<criterion id>", "score": <0.0 (not met) .. 1.0 (fully met)>, "reason": "<one sentence citing the material>"}'
)


@dataclass
class Judging:
    """Who judges and how often to ask: a deployed judge agent's outputs, else the judge model's endpoint."""

    model: ModelSettings | None = None
    judge_deployed: JsonObject = field(default_factory=dict)
    attempts: int = 3
    output_format: OutputFormat = "rubric_binary"
    deadline_s: float = 600.0

    @property
    def system(self) -> str:
        return PARTIAL_SYSTEM if self.output_format == "rubric_partial" else JUDGE_SYSTEM


def prepare_judge_model(config: PlannedConfig, plan: PlanContext, override: JsonObject) -> None:
    """Pin the judge model's endpoint ([models.judge] with `override`) into `model`, its key checked now."""
    endpoint = plan.settings.model("judge", {k: v for k, v in override.items() if v is not None})
    check_endpoint(endpoint, "judge", open_secrets(plan.settings))
    config["model"] = endpoint.model_dump(mode="json")


def prepare_judge(config: PlannedConfig, plan: PlanContext) -> PlannedConfig:
    """`judge` (a deploy_agent step) or `judge_model`: who judges, resolved when the run is planned."""
    if config.get("judge"):
        config["judge_deployed"] = ref(f"steps.{config['judge']}.outputs")
    else:
        prepare_judge_model(config, plan, config.get("judge_model") or {})
    return config


async def judge(
    ctx: StepContext, judging: Judging, request: dict[str, Any], used: Usage
) -> tuple[list[JsonObject], int]:
    """Ask until the answer is usable (every criterion, a verdict or score each), at most `attempts` times:
    the rows `{id, verdict, score, reason}` in the request's order, and how many asks it took."""
    ids = [c["id"] for c in request["criteria"]]
    if not ids:
        return [], 0
    messages = [
        {"role": "system", "content": judging.system},
        {"role": "user", "content": json.dumps(request, ensure_ascii=False)},
    ]
    problem, text = "", ""
    for attempt in range(1, judging.attempts + 1):
        text = await _ask(ctx, judging, messages, used)
        verdicts, problem = parse_verdicts(text, ids, judging.output_format)
        if verdicts is not None:
            return verdicts, attempt
        messages += [
            {"role": "assistant", "content": text},
            {
                "role": "user",
                "content": f"That answer could not be used: {problem}. Answer again with "
                "only the JSON object, one entry per criterion id.",
            },
        ]
    raise StepFailed(
        f"the judge's answer could not be used after {judging.attempts} attempt(s): {problem}; "
        f"its last answer began: {text[:200]!r}"
    )


async def _ask(ctx: StepContext, judging: Judging, messages: list[dict[str, str]], used: Usage) -> str:
    if judging.judge_deployed:
        from agent_env.agents.client import AgentReplyInvalid, AgentTimedOut, AgentUnreachable, agent_client

        judge = judging.judge_deployed
        turn = sum(1 for m in messages if m["role"] == "assistant")
        prompt = messages[-1]["content"]
        conversation = [
            {"from": "agent" if m["role"] == "assistant" else "user", "text": m["content"]} for m in messages[1:-1]
        ]
        try:
            answer = await agent_client(ctx.settings, judge["url"], hosted=judge["hosted"]).ask(
                prompt,
                {
                    "system_prompt": judging.system,
                    "run_id": ctx.run_id,
                    "agent": judge["name"],
                    "conversation": conversation,
                    "turn": turn,
                    "deadline_s": judging.deadline_s,
                },
                context_id=f"{ctx.run_id}/{ctx.step_id}/judge",
                message_id=f"{ctx.run_id}/{ctx.step_id}/judge/{turn}",
                deadline_s=judging.deadline_s,
            )
        except AgentUnreachable as e:
            raise StepFailed(str(e), retryable=True) from None
        except (AgentReplyInvalid, AgentTimedOut) as e:
            raise StepFailed(f"the judge agent: {e}") from None
        if answer.failed:
            raise StepFailed(f"the judge agent could not answer: {answer.text[:300]}")
        used.update(summed([used, answer.data.get("usage")]))
        return answer.text

    endpoint = judging.model
    if endpoint is None:
        raise StepFailed("no judge: the step was not planned (its judge model is filled in when the run is planned)")
    model = ChatModel(endpoint, await in_thread(lambda: resolve_key(endpoint, open_secrets(ctx.settings))))
    try:
        reply = await model.complete(messages, response_json=True, user=JUDGE_USER)
    except ModelError as e:
        raise StepFailed(f"the judge model: {e}", retryable=True) from None
    finally:
        await model.aclose()
    used.update(summed([used, model.usage]))
    return reply.content or ""


def _score(row: JsonObject, output_format: OutputFormat) -> tuple[float | None, str]:
    if output_format == "rubric_partial":
        value = row.get("score")
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
            return None, f"criterion {row.get('id')!r} has score {value!r}, not a number from 0 to 1"
        return float(value), ""
    verdict = str(row.get("verdict", "")).strip().lower()
    if verdict not in ("pass", "fail"):
        return None, f'criterion {row.get("id")!r} has verdict {row.get("verdict")!r}, not "pass" or "fail"'
    return (1.0 if verdict == "pass" else 0.0), ""


def parse_verdicts(
    text: str, ids: list[str], output_format: OutputFormat = "rubric_binary"
) -> tuple[list[JsonObject] | None, str]:
    """The judge's rows `{id, verdict, score, reason}` for `ids`, in order; or None and what is wrong."""
    try:
        data = json_in(text)
    except ValueError:
        return None, "it is not JSON"
    rows = data.get("criteria") if isinstance(data, dict) else None
    if not isinstance(rows, list):
        return None, 'it has no "criteria" list'
    found: dict[str, JsonObject] = {}
    for row in rows:
        if not isinstance(row, dict) or row.get("id") not in ids:
            continue
        score, problem = _score(row, output_format)
        if score is None:
            return None, problem
        verdict = "pass" if score >= (PARTIAL_PASS if output_format == "rubric_partial" else 1.0) else "fail"
        found[row["id"]] = {
            "id": row["id"],
            "verdict": verdict,
            "score": score,
            "reason": str(row.get("reason", ""))[:2000],
        }
    if missing := [i for i in ids if i not in found]:
        return None, f"no verdict for {', '.join(missing)}"
    return [found[i] for i in ids], ""
