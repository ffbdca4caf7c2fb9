"""Verdicts over an environment's validators, as step types: `validation_gate_aggregator` (one verdict from the
validator steps upstream), `verify_universe_load_export_roundtrip` (a universe loaded and exported, twice) and
`combine_universe_verdicts` (the round trip's verdict gated by a judge's). The checks are
`agent_env.validators.gate` and `agent_env.validators.universe`.

With the framework's fields: the gate takes its gates by name (`required_gates`, the verification a validator
records: each is the validator steps of that type before it, of the env `env_id` names); the round trip keeps the
universe and both exports as a file universe for a judge (`emit_file_artifact_universe`); and the env's verdict on a
registry universe is kept across runs (`keys.compatibility`) by the round trip (`persist_result`) or, after it, by
the combining step given the env and the universe.
"""

from __future__ import annotations

import json
from typing import Any, cast

from pydantic import Field, model_validator

from agent_env.errors import BadInput
from agent_env.gateway_client.wire import JsonObject
from agent_env.registry.store import Registry
from agent_env.registry.universes import pin_environment_data, push_new_version, push_universe
from agent_env.spec.artifacts import FILE_UNIVERSE, ArtifactPin, Lineage
from agent_env.spec.run import PlannedConfig
from agent_env.spec.task import upstream
from agent_env.spec.templates import ref
from agent_env.steps import PlanContext, StepConfig, StepContext, StepResult, step_type
from agent_env.steps.builtin.env_validators import EnvTargetConfig, env_target, prepare_target, reported
from agent_env.steps.builtin.envs import prepare_load
from agent_env.stores import in_thread, keys
from agent_env.validators import env_card, universe
from agent_env.validators.gate import GateVerdict, aggregate
from agent_env.validators.report import Finding, ValidationReport


def verdict_of(step: str, view: Any) -> GateVerdict:
    """What a step's `${steps.ID}` view says of it as a gate (a validator's outputs carry its report)."""
    view = view if isinstance(view, dict) else {}
    outputs: JsonObject = view["outputs"] if isinstance(view.get("outputs"), dict) else {}
    report: JsonObject = outputs["report"] if isinstance(outputs.get("report"), dict) else {}
    failures = [
        c["name"]
        for c in report.get("checks") or []
        if isinstance(c, dict) and not c.get("passed") and c.get("required", True)
    ]
    return GateVerdict(
        step=step,
        status=view.get("status"),
        passed=view.get("passed"),
        skipped=bool(outputs.get("skipped")),
        failures=failures,
    )


# The framework names a gate by the verification a validator records; ours are the validator steps of that type.
GATE_STEP_TYPES = {"mcp_tool_correctness": "verify_mcp_env_assessment", "environment_card": "verify_env_card"}
DEFAULT_GATES = ("mcp_tool_schema", "mcp_tool_correctness")  # the framework's, when a gate names no gates


def gate_step_type(gate: str) -> str:
    return GATE_STEP_TYPES.get(gate, f"verify_{gate}")


class GateConfig(StepConfig):
    framework_names = {"env_id": ("env", "env_step")}

    inputs: list[str] = Field(default_factory=list, description="the validator steps whose verdicts are combined")
    required: list[str] | None = Field(None, description="the gates that must pass (default: every input)")
    required_gates: list[str] | None = Field(
        None,
        description="the framework's gates by name (mcp_tool_schema, mcp_tool_correctness, a2a_role, ...): each is "
        "the validator steps of that type before this one, and must pass (default with only `env`: the framework's)",
    )
    env: str | None = Field(None, description="with gates by name: only the validators of this deploy_env step")
    missing: list[str] = Field(default_factory=list, description="filled in when planned: gates no step gives")
    views: JsonObject = Field(default_factory=dict, description="filled in when the run is planned")

    @model_validator(mode="after")
    def _required_are_inputs(self) -> GateConfig:
        if not self.inputs and self.required_gates is None and self.env is None:
            raise ValueError("give `inputs` (the validator steps) or `required_gates` (the gates by name)")
        if unknown := sorted(set(self.required or []) - set(self.inputs)):
            raise ValueError(f"required gates must be inputs: {', '.join(unknown)} are not in `inputs`")
        return self


def gate_steps(config: PlannedConfig, plan: PlanContext) -> PlannedConfig:
    """The framework's gates by name as the validator steps before this one (of its env, with `env`)."""
    gates = config.get("required_gates")
    if gates is None and (config.get("inputs") or config.get("env") is None):
        return config
    task = plan.task
    if task is None:
        raise BadInput("validation_gate_aggregator: gates by name are found within a task", "plan it in a task")
    before = upstream(str(plan.step_id), {s.id: s.depends_on for s in task.steps})
    inputs, required, missing = list(config.get("inputs") or []), config.get("required"), []
    for gate in gates if gates is not None else DEFAULT_GATES:
        found = [
            s.id
            for s in task.steps
            if s.type == gate_step_type(gate)
            and s.id in before
            and (config.get("env") is None or s.config.get("env") == config["env"])
        ]
        if not found:
            missing.append(gate)
        inputs += [f for f in found if f not in inputs]
        required = None if required is None else [*required, *(f for f in found if f not in required)]
    config["inputs"], config["required"], config["missing"] = inputs, required, missing
    return config


def prepare_gate(config: PlannedConfig, plan: PlanContext) -> PlannedConfig:
    config = gate_steps(config, plan)
    config["views"] = {
        step: {
            "outputs": ref(f"steps.{step}.outputs"),
            "status": ref(f"steps.{step}.status"),
            "passed": ref(f"steps.{step}.passed"),
        }
        for step in config["inputs"]
    }
    return config


@step_type(
    "validation_gate_aggregator",
    config=GateConfig,
    prepare=prepare_gate,
    step_refs=("inputs", "env"),
    local=True,
    timeout="30s",
    retries=0,
)
async def validation_gate_aggregator(ctx: StepContext, config: GateConfig) -> StepResult:
    """Combine upstream validators' verdicts into one: a required gate that failed or never reported fails it."""
    verdicts = [verdict_of(step, config.views.get(step)) for step in config.inputs]
    verdicts += [  # a gate no step gives fails closed, as the framework's does
        GateVerdict(step=gate, status=f"was never run: no {gate_step_type(gate)} step comes before", passed=None)
        for gate in config.missing
    ]
    required = [*(config.required if config.required is not None else config.inputs), *config.missing]
    report = aggregate("validation_gate_aggregator", ctx.run_id, verdicts, required)
    return reported(
        report,
        failed_gates=[v.step for v in verdicts if v.passed is False and not v.skipped],
        missing_gates=[v.step for v in verdicts if v.passed is None],
        skipped_gates=[v.step for v in verdicts if v.skipped],
    )


# -- universes --


class RoundTripConfig(EnvTargetConfig):
    emit_file_artifact_universe: bool = Field(
        False,
        description="also keep the universe and both exports (original/, export_1/, export_2/ APP.json) as a file "
        "universe of the registry, for a judge to compare",
    )
    persist_result: bool = Field(
        False,
        description="keep the verdict as the env's compatibility with the registry universe, across runs "
        "(a combine_universe_verdicts step after it writes the gated one)",
    )
    env_name: str | None = Field(None, description="filled in when the run is planned: the env deployed")
    data: JsonObject | None = Field(None, description="the universe inline: {app: {table: [rows]}}")
    file: str | None = Field(None, description="the universe as a JSON file of the bundle")
    universe_artifact_id: str | None = Field(
        None,
        description="or a universe (or environment artifact) of the registry; export 1 is pushed back as NAME.export",
    )
    universe_artifact_version: int | str | None = Field(None, description="its version (default: the latest)")
    artifact: str | None = Field(None, description="filled in when the run is planned")
    universe: str | None = Field(None, description="filled in when the run is planned: NAME@VERSION")

    @model_validator(mode="after")
    def _one_source(self) -> RoundTripConfig:
        given = [self.data is not None, self.file is not None, self.universe_artifact_id is not None]
        if sum(given) != 1 and not (self.artifact and sum(given) == 0):
            raise ValueError(
                "give exactly one of `data` (the universe inline), `file` (a JSON file of the bundle) or "
                "`universe_artifact_id` (a universe of the registry)"
            )
        if self.persist_result and (self.env is None or self.universe_artifact_id is None):
            raise ValueError(
                "`persist_result` keeps a deployed env's verdict on a registry universe: give `env_id` "
                "and `universe_artifact_id`"
            )
        return self


def deployed_env_name(plan: PlanContext, env_step: object) -> str | None:
    """The env a deploy_env step of the task deploys (its env_id)."""
    deploy = next((s for s in (plan.task.steps if plan.task else []) if s.id == env_step), None)
    name = deploy.config.get("env_id") if deploy is not None else None
    return name if isinstance(name, str) else None


def prepare_roundtrip(config: PlannedConfig, plan: PlanContext) -> PlannedConfig:
    config = prepare_target(config, plan)
    if config.get("persist_result"):
        config["env_name"] = deployed_env_name(plan, config.get("env"))
    if name := config.get("universe_artifact_id"):
        version = config.get("universe_artifact_version")
        config["artifact"], found = pin_environment_data(plan.stores.documents, plan.stores.objects, name, version)
        config["universe"] = str(found.pin)
        return config
    return prepare_load(config, plan)


@step_type(
    "verify_universe_load_export_roundtrip",
    config=RoundTripConfig,
    prepare=prepare_roundtrip,
    step_refs=("env",),
    timeout="10m",
    retries=1,
)
async def verify_universe_load_export_roundtrip(ctx: StepContext, config: RoundTripConfig) -> StepResult:
    """Load a universe, export, reload the export, export again: per app, nothing lost and nothing changed. A
    registry universe's export 1 is pushed back as universe NAME.export (its environment artifacts NAME.export.APP)."""
    data = config.data
    if data is None:
        data = json.loads(await ctx.stores.aio.objects.get(cast(str, config.artifact)))
    target = await env_target(ctx, config)
    card, served = await env_card.fetch_card(target)
    if card is None:
        report = ValidationReport(validator=universe.VALIDATOR, target=target.base, checks=[served])
        return reported(report, verdict={"compatible": False, "environments": {}})
    report, verdict, exported, second = await universe.round_trip_exported(target, card, cast(JsonObject, data))
    registry = Registry(ctx.stores.documents, ctx.stores.objects)
    parents = []
    if config.universe is not None and exported:
        name, _, label = config.universe.partition("@")
        parents = [ArtifactPin(id=name, version=label)]
        lineage = Lineage(run_id=ctx.run_id, step=ctx.step_id, parents=parents)
        pin = await in_thread(push_universe, registry, f"{name}.export", exported, lineage)
        verdict["exported_universe_artifact_id"] = str(pin)
    if config.emit_file_artifact_universe:
        files = {
            f"{which}/{app}.json": json.dumps(by_app[app], ensure_ascii=False, default=str).encode()
            for which, by_app in (("original", cast(JsonObject, data)), ("export_1", exported), ("export_2", second))
            for app in sorted(by_app)
        }
        name = f"{config.universe.partition('@')[0]}.roundtrip" if config.universe else f"{ctx.run_id}.{ctx.step_id}"
        record = {
            "type": FILE_UNIVERSE,
            "lineage": Lineage(run_id=ctx.run_id, step=ctx.step_id, parents=parents).model_dump(exclude_none=True),
        }
        pushed = await in_thread(push_new_version, registry, name, record, files)
        verdict["file_artifact_universe_id"] = f"{pushed.name}@{pushed.label}"
    if config.persist_result and config.universe is not None and config.env_name is not None:
        await persist(ctx, config.env_name, config.universe, verdict)
    return reported(report, verdict=verdict, **({"universe": config.universe} if config.universe else {}))


async def persist(ctx: StepContext, env: str, universe_pin: str, verdict: JsonObject) -> None:
    """The env's verdict on the universe, where a later run (or `agent-env`) reads it: the latest one written."""
    kept = {"env": env, "universe": universe_pin, "run_id": ctx.run_id, "step": ctx.step_id, **verdict}
    await ctx.stores.aio.objects.put(keys.compatibility(env, universe_pin), json.dumps(kept, indent=1).encode())
    verdict["persisted"] = keys.compatibility(env, universe_pin)


class CombineConfig(StepConfig):
    framework_names = {"judge_verifier_id": ("judge", "verifier_step"), "env_id": ("env", "env_step")}

    env: str | None = Field(None, description="with universe_artifact_id: keep the verdict as this env's")
    universe_artifact_id: str | None = Field(
        None, description="keep the combined verdict as the env's compatibility with this registry universe"
    )
    universe_artifact_version: int | str | None = Field(None, description="its version (default: the latest)")
    universe: str | None = Field(None, description="filled in when the run is planned: NAME@VERSION")
    env_name: str | None = Field(None, description="filled in when the run is planned: the env deployed")
    roundtrip: str = Field(description="the verify_universe_load_export_roundtrip step")
    judge: str | None = Field(
        None, description="a judging step (rubric_judge, verify_mcp_env_assessment) that gates it"
    )
    views: JsonObject = Field(default_factory=dict, description="filled in when the run is planned")

    @model_validator(mode="after")
    def _kept_where(self) -> CombineConfig:
        if (self.env is None) != (self.universe_artifact_id is None):
            raise ValueError(
                "the verdict is kept as an env's on a universe: give both `env_id` and "
                "`universe_artifact_id`, or neither"
            )
        return self


def prepare_combine(config: PlannedConfig, plan: PlanContext) -> PlannedConfig:
    if name := config.get("universe_artifact_id"):
        version = config.get("universe_artifact_version")
        _, found = pin_environment_data(plan.stores.documents, plan.stores.objects, name, version)
        config["universe"], config["env_name"] = str(found.pin), deployed_env_name(plan, config.get("env"))
    steps = [config["roundtrip"], *([config["judge"]] if config.get("judge") else [])]
    config["views"] = {
        step: {
            "outputs": ref(f"steps.{step}.outputs"),
            "status": ref(f"steps.{step}.status"),
            "passed": ref(f"steps.{step}.passed"),
        }
        for step in steps
    }
    return config


@step_type(
    "combine_universe_verdicts",
    config=CombineConfig,
    prepare=prepare_combine,
    step_refs=("roundtrip", "judge", "env"),
    local=True,
    timeout="30s",
    retries=0,
)
async def combine_universe_verdicts(ctx: StepContext, config: CombineConfig) -> StepResult:
    """The universe's compatibility: the round trip's verdict, gated by the judge's when there is one."""
    trip = config.views.get(config.roundtrip) or {}
    outputs: JsonObject = trip["outputs"] if isinstance(trip.get("outputs"), dict) else {}
    verdict: JsonObject = dict(outputs.get("verdict") or {"compatible": False, "environments": {}})
    report = ValidationReport(validator="combine_universe_verdicts", target=ctx.run_id)
    report.checks.append(
        Finding.ok("universe.roundtrip")
        if verdict.get("compatible")
        else Finding.failed(
            "universe.roundtrip",
            f"the round trip ({config.roundtrip}) found the universe incompatible"
            + ("" if outputs else f" or did not run (it {trip.get('status')})"),
            "see that step's report",
        )
    )
    if config.judge is not None:
        judged = verdict_of(config.judge, config.views.get(config.judge))
        report.checks.append(
            Finding.ok("universe.judge")
            if judged.passed
            else Finding.failed(
                "universe.judge",
                f"the judge ({config.judge}) "
                + ("failed it" if judged.passed is False else f"left no verdict (it {judged.status})"),
                "see the judge's verdicts",
            )
        )
    else:
        verdict["agent_judge_skipped"] = True
    verdict["compatible"] = report.passed
    if config.universe is not None and config.env_name is not None:  # the single writer after the round trip
        await persist(ctx, config.env_name, config.universe, verdict)
    return reported(report, verdict=verdict)
