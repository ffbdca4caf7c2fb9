"""Verifiers: `check_response`, `rubric_judge`, `aggregate_scores`; and `collect_artifacts`.

Each verifier records a Score (0..1, a threshold, a row per criterion). A run's score is the mean of its
steps' scores, unless the task has `aggregate_scores` steps: then the last of them is the run's score.
"""

from __future__ import annotations

import json
import re
from typing import Any, Literal, cast

from pydantic import Field, model_validator

from agent_env import packing
from agent_env.agents.models import ChatModel, ModelError, check_endpoint, resolve_key
from agent_env.agents.usage import Usage, summed
from agent_env.config import ModelSettings
from agent_env.errors import BadInput
from agent_env.gateway_client import GatewayClient
from agent_env.gateway_client.wire import JsonObject
from agent_env.spec.agent import ModelOverride
from agent_env.spec.paths import walk
from agent_env.spec.run import Criterion, PlannedConfig, Score
from agent_env.spec.templates import ref
from agent_env.steps import PlanContext, StepConfig, StepContext, StepFailed, StepResult, step_type
from agent_env.steps.builtin.check import Check
from agent_env.steps.builtin.env_export import export_data
from agent_env.steps.builtin.envs import instance_id, store_artifact
from agent_env.stores import in_thread, keys, open_secrets

JUDGE_USER = "agentenv-judge"  # sent as the request's `user`: who is asking
CRITERION_ID = r"^[A-Za-z0-9_.\-]{1,80}$"

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


# -- rubric_judge --


class RubricCriterion(StepConfig):
    id: str = Field(pattern=CRITERION_ID)
    text: str = Field(min_length=1, description="what must hold, said so a careful grader can decide it")
    weight: float = Field(1.0, gt=0)


class EachCall(StepConfig):
    """One criterion per tool call an agent made: grade every decision, not just the end state.
    `{tool}`, `{agent}`, `{arguments.NAME}` and `{result...}` in `text` are filled from the call."""

    env: str = Field(description="the deploy_env step whose trajectory holds the calls")
    tools: list[str] = Field(min_length=1, description="the tools whose calls are graded")
    agent: str | None = Field(None, description="only this agent's calls (its name in the environment)")
    text: str = Field(min_length=1)
    weight: float = Field(1.0, gt=0)
    at_least: int = Field(1, ge=0, description="fewer calls than this fails a criterion of its own")


class StateProbe(StepConfig):
    """A read-only tool call whose result the judge sees, e.g. the invoices after the agent's work."""

    env: str
    tool: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    role: str | None = None
    label: str | None = Field(None, description="its key in the judge's material (default: the tool)")


class RubricJudgeConfig(StepConfig):
    criteria: list[RubricCriterion] = Field(default_factory=list)
    each_call: EachCall | None = None
    transcripts: list[str] = Field(
        default_factory=list, description="prompt_agent steps whose conversation and tool calls the judge reads"
    )
    state: list[StateProbe] = Field(default_factory=list)
    reference: Any = Field(None, description="a reference answer or answer key the judge may use (inline)")
    reference_file: str | None = Field(None, description="the same, from a JSON or text file of the bundle")
    instructions: str = Field("", description="what the judge should know beyond the criteria (a policy...)")
    judge: str | None = Field(
        None, description="a deploy_agent step whose agent judges (default: the judge model, [models.judge])"
    )
    judge_model: ModelOverride | None = Field(None, description="another endpoint or model for this judge")
    attempts: int = Field(3, ge=1, le=10, description="asks before an unusable answer fails the step")
    pass_threshold: float = Field(1.0, ge=0, le=1)
    model: ModelSettings | None = Field(None, description="filled in when the run is planned")
    reference_artifact: str | None = Field(None, description="filled in when the run is planned")
    judge_deployed: dict[str, Any] = Field(default_factory=dict, description="filled in when the run is planned")

    @model_validator(mode="after")
    def _something_to_grade(self) -> RubricJudgeConfig:
        if not self.criteria and self.each_call is None:
            raise ValueError("give `criteria`, `each_call`, or both")
        ids = [c.id for c in self.criteria]
        if dupes := sorted({i for i in ids if ids.count(i) > 1}):
            raise ValueError(f"criterion ids must be unique: {', '.join(dupes)}")
        if self.reference is not None and self.reference_file is not None:
            raise ValueError("give `reference` or `reference_file`, not both")
        if self.judge is not None and self.judge_model is not None:
            raise ValueError("a judge agent (`judge`) brings its own model; `judge_model` is for the judge model")
        return self


def prepare_judge(config: PlannedConfig, plan: PlanContext) -> PlannedConfig:

    if config.get("judge"):
        config["judge_deployed"] = ref(f"steps.{config['judge']}.outputs")
    else:
        override = config.get("judge_model") or {}
        endpoint = plan.settings.model("judge", {k: v for k, v in override.items() if v is not None})
        check_endpoint(endpoint, "judge", open_secrets(plan.settings))
        config["model"] = endpoint.model_dump(mode="json")
    if config.get("reference_file"):
        if plan.bundle is None:
            raise BadInput(
                f"rubric_judge reference_file {config['reference_file']!r}: a task outside a bundle has no files",
                "give the reference inline (`reference`)",
            )
        try:  # no link followed, not even one that stays inside (see agent_env.packing)
            data = packing.read(plan.bundle, config["reference_file"])
        except packing.NotInside:
            raise BadInput(
                f"rubric_judge reference_file {config['reference_file']!r} is not a file inside the "
                f"bundle {plan.bundle}",
                "name a file inside the bundle's folder",
            ) from None
        except BadInput as e:
            raise BadInput(f"rubric_judge reference_file {config['reference_file']!r}: {e.problem}", e.fix) from None
        config["reference_artifact"] = store_artifact(plan, data)
    return config


JUDGE_SYSTEM = """You are a strict, fair grader. You get criteria and material (what an agent said and did, and
the state it left). Decide each criterion from the material alone: "pass" only if the material shows it holds.
Answer with one JSON object and nothing else:
{"criteria": [{"id": "<criterion id>", "verdict": "pass" | "fail", "reason": "<one sentence citing the material>"}]}
Every criterion id must appear exactly once."""

PLACEHOLDER = re.compile(r"\{([A-Za-z_][\w.]*)\}")


@step_type(
    "rubric_judge",
    config=RubricJudgeConfig,
    timeout="20m",
    prepare=prepare_judge,
    retries=2,
    step_refs=("judge", "transcripts"),
)
async def rubric_judge(ctx: StepContext, config: RubricJudgeConfig) -> StepResult:
    """A model or judge agent grades transcripts, tool calls and end state against weighted criteria."""
    criteria = list(config.criteria)
    material: dict[str, Any] = {}
    if config.instructions:
        material["instructions"] = config.instructions
    if config.transcripts:
        material["transcripts"] = {}
        for step in config.transcripts:
            key = keys.transcript(ctx.run_id, step)
            if not await ctx.stores.aio.objects.exists(key):
                raise StepFailed(f"step {step!r} left no transcript (is it a prompt_agent step that ran?)")
            doc = json.loads(await ctx.stores.aio.objects.get(key))
            material["transcripts"][step] = {
                "messages": [{"speaker": m["speaker"], "text": m["text"]} for m in doc["messages"]],
                "tool_calls": [_call_summary(c) for c in doc["tool_calls"]],
            }
    gateway = await ctx.gateway() if (config.state or config.each_call) else None
    for probe in config.state:
        outcome = await gateway.call_as(instance_id(ctx, probe.env), probe.tool, probe.arguments, role=probe.role)  # type: ignore[union-attr]  # (probes: a gateway)
        material.setdefault("state", {})[probe.label or probe.tool] = outcome.get(
            "result", {"error": outcome.get("error")}
        )
    shortfall = None
    if config.each_call is not None and gateway is not None:  # (a gateway was got for it above)
        per_call, shortfall = await _each_call_criteria(ctx, gateway, config.each_call)
        criteria += per_call
    if config.reference is not None:
        material["reference"] = config.reference
    elif config.reference_artifact:
        raw = (await ctx.stores.aio.objects.get(config.reference_artifact)).decode()
        try:
            material["reference"] = json.loads(raw)
        except ValueError:
            material["reference"] = raw
    request = {"criteria": [{"id": c.id, "text": c.text} for c in criteria], "material": material}
    used: Usage = {}  # the judge's model calls, per model
    verdicts, asked = await _judge(ctx, config, request, used)
    by_id = {v["id"]: v for v in verdicts}
    rows = [
        Criterion(
            name=c.id, passed=by_id[c.id]["verdict"] == "pass", weight=c.weight, detail=by_id[c.id].get("reason", "")
        )
        for c in criteria
    ]
    rows += [shortfall] if shortfall else []
    return StepResult(
        outputs={
            "verdicts": [{**by_id[c.id], "text": c.text} for c in criteria],
            "asked": asked,
            **({"usage": used} if used else {}),
        },
        score=Score.from_criteria(rows, config.pass_threshold),
    )


def _call_summary(entry: dict[str, Any]) -> dict[str, Any]:
    keep = ("agent", "role", "tool", "arguments", "result", "error", "refused", "virtual_time")
    return {k: entry[k] for k in keep if k in entry and (k != "refused" or entry[k])}


async def _each_call_criteria(
    ctx: StepContext, gateway: GatewayClient, each: EachCall
) -> tuple[list[RubricCriterion], Criterion | None]:
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

        out.append(RubricCriterion(id=f"call-{n}", text=PLACEHOLDER.sub(fill, each.text), weight=each.weight))
    shortfall = None
    if len(calls) < each.at_least:  # decided here: a judge cannot grade calls that were not made
        shortfall = Criterion(
            name="enough-calls",
            passed=False,
            weight=each.weight,
            detail=f"{len(calls)} call(s) to {', '.join(each.tools)}; at least {each.at_least} expected",
        )
    return out, shortfall


async def _judge(
    ctx: StepContext, config: RubricJudgeConfig, request: dict[str, Any], used: Usage
) -> tuple[list[JsonObject], int]:
    """Ask until the answer is usable (every criterion, a pass/fail verdict each), at most `attempts` times."""
    ids = [c["id"] for c in request["criteria"]]
    if not ids:
        return [], 0
    messages = [
        {"role": "system", "content": JUDGE_SYSTEM},
        {"role": "user", "content": json.dumps(request, ensure_ascii=False)},
    ]
    problem, text = "", ""
    for attempt in range(1, config.attempts + 1):
        text = await _ask_judge(ctx, config, messages, used)
        verdicts, problem = _parse_verdicts(text, ids)
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
        f"the judge's answer could not be used after {config.attempts} attempt(s): {problem}; "
        f"its last answer began: {text[:200]!r}"
    )


async def _ask_judge(ctx: StepContext, config: RubricJudgeConfig, messages: list[dict[str, str]], used: Usage) -> str:
    if config.judge_deployed:
        from agent_env.agents.client import AgentReplyInvalid, AgentTimedOut, AgentUnreachable, agent_client

        judge = config.judge_deployed
        turn = sum(1 for m in messages if m["role"] == "assistant")
        prompt = messages[-1]["content"]
        conversation = [
            {"from": "agent" if m["role"] == "assistant" else "user", "text": m["content"]} for m in messages[1:-1]
        ]
        try:
            answer = await agent_client(ctx.settings, judge["url"], hosted=judge["hosted"]).ask(
                prompt,
                {
                    "system_prompt": JUDGE_SYSTEM,
                    "run_id": ctx.run_id,
                    "agent": judge["name"],
                    "conversation": conversation,
                    "turn": turn,
                    "deadline_s": 600,
                },
                context_id=f"{ctx.run_id}/{ctx.step_id}/judge",
                message_id=f"{ctx.run_id}/{ctx.step_id}/judge/{turn}",
                deadline_s=600,
            )
        except AgentUnreachable as e:
            raise StepFailed(str(e), retryable=True) from None
        except (AgentReplyInvalid, AgentTimedOut) as e:
            raise StepFailed(f"the judge agent: {e}") from None
        if answer.failed:
            raise StepFailed(f"the judge agent could not answer: {answer.text[:300]}")
        used.update(summed([used, answer.data.get("usage")]))
        return answer.text

    endpoint = cast(ModelSettings, config.model)  # filled in when the run is planned
    model = ChatModel(endpoint, await in_thread(lambda: resolve_key(endpoint, open_secrets(ctx.settings))))
    try:
        reply = await model.complete(messages, response_json=True, user=JUDGE_USER)
    except ModelError as e:
        raise StepFailed(f"the judge model: {e}", retryable=True) from None
    finally:
        await model.aclose()
    used.update(summed([used, model.usage]))
    return reply.content or ""


def _parse_verdicts(text: str, ids: list[str]) -> tuple[list[JsonObject] | None, str]:
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
        verdict = str(row.get("verdict", "")).strip().lower()
        if verdict not in ("pass", "fail"):
            return None, f'criterion {row.get("id")!r} has verdict {row.get("verdict")!r}, not "pass" or "fail"'
        found[row["id"]] = {"id": row["id"], "verdict": verdict, "reason": str(row.get("reason", ""))[:2000]}
    if missing := [i for i in ids if i not in found]:
        return None, f"no verdict for {', '.join(missing)}"
    return [found[i] for i in ids], ""


# -- aggregate_scores --


class AggregateInput(StepConfig):
    step: str
    weight: float = Field(1.0, gt=0)


class AggregateConfig(StepConfig):
    inputs: list[str | AggregateInput] = Field(min_length=1, description="the steps whose scores are combined")
    mode: Literal["weighted", "all_pass", "any_pass"] = Field(
        "weighted", description="weighted mean of the scores; 1 if all (any) passed, else 0"
    )
    pass_threshold: float = Field(1.0, ge=0, le=1)
    scores: list[dict[str, Any]] = Field(default_factory=list, description="filled in when the run is planned")

    def steps(self) -> list[AggregateInput]:
        return [i if isinstance(i, AggregateInput) else AggregateInput(step=i) for i in self.inputs]


def prepare_aggregate(config: PlannedConfig, plan: PlanContext) -> PlannedConfig:
    inputs = AggregateConfig.model_validate(config).steps()
    config["scores"] = [
        {
            "step": i.step,
            "weight": i.weight,
            "value": ref(f"steps.{i.step}.score"),
            "passed": ref(f"steps.{i.step}.passed"),
            "status": ref(f"steps.{i.step}.status"),
        }
        for i in inputs
    ]
    return config


@step_type(
    "aggregate_scores",
    config=AggregateConfig,
    local=True,
    timeout="30s",
    retries=0,
    prepare=prepare_aggregate,
    step_refs=("inputs",),
)
async def aggregate_scores(ctx: StepContext, config: AggregateConfig) -> StepResult:
    """Combine verifiers' scores (weighted, all-pass, any-pass) into one, clamped to 0..1: the run's score."""
    rows = []
    for s in config.scores:
        if s["value"] is None:
            rows.append(
                Criterion(name=s["step"], passed=False, weight=s["weight"], detail=f"no score (the step {s['status']})")
            )
            continue
        rows.append(
            Criterion(
                name=s["step"], passed=bool(s["passed"]), weight=s["weight"], detail=f"score {float(s['value']):.3f}"
            )
        )
    values = {s["step"]: float(s["value"] or 0.0) for s in config.scores}
    if config.mode == "all_pass":
        value = 1.0 if all(r.passed for r in rows) else 0.0
    elif config.mode == "any_pass":
        value = 1.0 if any(r.passed for r in rows) else 0.0
    else:
        total = sum(r.weight for r in rows)
        value = sum(r.weight * values[r.name] for r in rows) / total
    value = min(1.0, max(0.0, round(value, 6)))
    return StepResult(
        outputs={"score": value, "mode": config.mode},
        score=Score(value=value, threshold=config.pass_threshold, criteria=rows),
    )


# -- collect_artifacts --


class CollectConfig(StepConfig):
    envs: list[str] = Field(default_factory=list, description="deploy_env steps whose trajectory and data to keep")
    data: bool = Field(
        True, description="export each environment's data (data/get; apps that declare data-objects/v1 upload theirs)"
    )


@step_type("collect_artifacts", config=CollectConfig, timeout="10m", step_refs=("envs",))
async def collect_artifacts(ctx: StepContext, config: CollectConfig) -> JsonObject:
    """Keep what a run produced in its artifact folder: trajectories, exported data, transcripts; with a manifest."""
    objects = ctx.stores.aio.objects
    kept: list[str] = []
    gateway = await ctx.gateway() if config.envs else None
    for env in config.envs:
        instance = instance_id(ctx, env)
        entries = await gateway.trajectory(instance)  # type: ignore[union-attr]  # (envs: a gateway)
        key = keys.artifact(ctx.run_id, env, "trajectory.jsonl")
        await objects.put(key, "".join(json.dumps(e, ensure_ascii=False) + "\n" for e in entries).encode())
        kept.append(key)
        if config.data:  # (through data-objects/v1 where an app declares it: env_export)
            kept += await export_data(ctx, gateway, env, instance)  # type: ignore[arg-type]  # (envs: a gateway)
    kept += await objects.list(keys.transcripts(ctx.run_id))
    manifest = keys.artifact(ctx.run_id, "manifest.json")
    await objects.put(manifest, json.dumps({"run_id": ctx.run_id, "artifacts": kept}, indent=1).encode())
    return {"artifacts": kept, "manifest": manifest}
