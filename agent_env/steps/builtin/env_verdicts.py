"""Verdicts over an environment's validators, as step types: `validation_gate_aggregator` (one verdict from the
validator steps upstream), `verify_universe_load_export_roundtrip` (a universe loaded and exported, twice) and
`combine_universe_verdicts` (the round trip's verdict gated by a judge's). The checks are
`agent_env.validators.gate` and `agent_env.validators.universe`.
"""

from __future__ import annotations

import json
from typing import Any, cast

from pydantic import Field, model_validator

from agent_env.gateway_client.wire import JsonObject
from agent_env.registry.store import Registry
from agent_env.registry.universes import pin_environment_data, push_universe
from agent_env.spec.artifacts import ArtifactPin, Lineage
from agent_env.spec.run import PlannedConfig
from agent_env.spec.templates import ref
from agent_env.steps import PlanContext, StepConfig, StepContext, StepResult, step_type
from agent_env.steps.builtin.env_validators import EnvTargetConfig, env_target, prepare_target, reported
from agent_env.steps.builtin.envs import prepare_load
from agent_env.stores import in_thread
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


class GateConfig(StepConfig):
    refused_fields = dict.fromkeys(
        ("env_id", "required_gates"),
        "the gates here are the validator steps named in `inputs` (`required`: those that must pass)",
    )

    inputs: list[str] = Field(min_length=1, description="the validator steps whose verdicts are combined")
    required: list[str] | None = Field(None, description="the gates that must pass (default: every input)")
    views: JsonObject = Field(default_factory=dict, description="filled in when the run is planned")

    @model_validator(mode="after")
    def _required_are_inputs(self) -> GateConfig:
        if unknown := sorted(set(self.required or []) - set(self.inputs)):
            raise ValueError(f"required gates must be inputs: {', '.join(unknown)} are not in `inputs`")
        return self


def prepare_gate(config: PlannedConfig, plan: PlanContext) -> PlannedConfig:
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
    step_refs=("inputs",),
    local=True,
    timeout="30s",
    retries=0,
)
async def validation_gate_aggregator(ctx: StepContext, config: GateConfig) -> StepResult:
    """Combine upstream validators' verdicts into one: a required gate that failed or never reported fails it."""
    verdicts = [verdict_of(step, config.views.get(step)) for step in config.inputs]
    required = config.required if config.required is not None else list(config.inputs)
    report = aggregate("validation_gate_aggregator", ctx.run_id, verdicts, required)
    return reported(
        report,
        failed_gates=[v.step for v in verdicts if v.passed is False and not v.skipped],
        missing_gates=[v.step for v in verdicts if v.passed is None],
        skipped_gates=[v.step for v in verdicts if v.skipped],
    )


# -- universes --


class RoundTripConfig(EnvTargetConfig):
    refused_fields = {
        **EnvTargetConfig.refused_fields,
        **dict.fromkeys(
            ("emit_file_artifact_universe", "persist_result"),
            "the verdict is the step's outputs; what it loaded and exported stays in the run's folder",
        ),
    }

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
        return self


def prepare_roundtrip(config: PlannedConfig, plan: PlanContext) -> PlannedConfig:
    config = prepare_target(config, plan)
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
    report, verdict, exported = await universe.round_trip_exported(target, card, cast(JsonObject, data))
    if config.universe is not None and exported:
        name, _, label = config.universe.partition("@")
        lineage = Lineage(run_id=ctx.run_id, step=ctx.step_id, parents=[ArtifactPin(id=name, version=label)])
        registry = Registry(ctx.stores.documents, ctx.stores.objects)
        pin = await in_thread(push_universe, registry, f"{name}.export", exported, lineage)
        verdict["exported_universe_artifact_id"] = str(pin)
    return reported(report, verdict=verdict, **({"universe": config.universe} if config.universe else {}))


class CombineConfig(StepConfig):
    framework_names = {"judge_verifier_id": ("judge", "verifier_step")}
    refused_fields = dict.fromkeys(
        ("env_id", "universe_artifact_id", "universe_artifact_version"),
        "the env and universe are the round trip's: name its step in `roundtrip`",
    )

    roundtrip: str = Field(description="the verify_universe_load_export_roundtrip step")
    judge: str | None = Field(
        None, description="a judging step (rubric_judge, verify_mcp_env_assessment) that gates it"
    )
    views: JsonObject = Field(default_factory=dict, description="filled in when the run is planned")


def prepare_combine(config: PlannedConfig, plan: PlanContext) -> PlannedConfig:
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
    step_refs=("roundtrip", "judge"),
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
    return reported(report, verdict=verdict)
