"""`check_response` (assertions on an agent's answer) and `collect_artifacts`; `json_in`, the JSON an answer holds.

Each verifier records a Score (0..1, a threshold, a row per criterion). A run's score is the mean of its
steps' scores, unless the task has `aggregate_verifiers` steps: then the last of them is the run's score. The
framework's verifiers are modules of their own: `rubrics` (rubrics_verifier), `response_verifier`
(agent_prompt_response_verifier), `aggregate_verifiers`, `sandbox_verifier`, `env_outcome`.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import Field

from agent_env.gateway_client.wire import JsonObject
from agent_env.spec.paths import walk
from agent_env.spec.run import Criterion, Score
from agent_env.steps import StepConfig, StepContext, StepResult, step_type
from agent_env.steps.builtin.check import Check
from agent_env.steps.builtin.env_export import export_data
from agent_env.steps.builtin.envs import instance_id
from agent_env.stores import keys

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


# -- collect_artifacts --


class CollectConfig(StepConfig):
    # The framework's collect_artifacts copies files out of a sandbox; ours keeps what the run made
    refused_fields = dict.fromkeys(
        (
            "agent_name",
            "artifact_paths",
            "artifacts_key",
            "base_path",
            "container_name",
            "env_id",
            "exclude_basenames",
            "manifest_step_id",
            "sandbox_name",
            "universe_id_suffix",
        ),
        "collect_artifacts here keeps the run's trajectories, data and transcripts (`envs`, `data`); "
        "copy files out of a sandbox with collect_files",
    )

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
