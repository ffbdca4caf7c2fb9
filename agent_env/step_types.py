"""What a step type is, and which are installed: the step SDK and the catalog of step types by name.

A step type is an async function decorated with `@step_type`, with a pydantic model for its config:

    class GreetConfig(StepConfig):
        name: str

    @step_type("greet", config=GreetConfig)
    async def greet(ctx: StepContext, config: GreetConfig) -> dict:
        "Say hello."
        return {"greeting": f"Hello, {config.name}"}      # the step's outputs

Plugin authors import these names from `agent_env.steps` (which re-exports them above the built-in step types)
and register theirs under the entry-point group `agent_env.task_steps` (name = step type, value =
`module:attribute` of the decorated function). Step modules import heavy libraries inside the function, not
at module level: task validation loads step types to check their config.

This room sits below planning, which checks and plans steps against the catalog. What a step sees when it runs
(`StepContext`: the stores, the gateway) is `agent_env.steps.context`, above the gateway, with the built-in
step types (`agent_env.steps.builtin`).
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import BaseModel, ConfigDict, model_validator

from agent_env.spec.duration import parse_duration
from agent_env.spec.named_steps import FrameworkName, refusal
from agent_env.spec.run import PlannedConfig, Score, StepTraits
from agent_env.spec.verbs import WorldStepVerb
from agent_env.stores import Stores, open_stores

if TYPE_CHECKING:
    from agent_env.config import Settings
    from agent_env.gateway_client.wire import JsonObject
    from agent_env.spec.task import TaskSpec
    from agent_env.steps.context import StepContext

ENTRY_POINT_GROUP = "agent_env.task_steps"  # (the framework's name; `agent-env plugin` lists it)

BUILTINS = {
    "check": "agent_env.steps.builtin.check:check",
    "sleep": "agent_env.steps.builtin.sleep:sleep",
    "deploy_env": "agent_env.steps.builtin.deploy_env:deploy_env",
    "load_data": "agent_env.steps.builtin.envs:load_data",
    "reset_env": "agent_env.steps.builtin.envs:reset_env",
    "snapshot_env": "agent_env.steps.builtin.env_snapshots:snapshot_env",
    "restore_env": "agent_env.steps.builtin.env_snapshots:restore_env",
    "modify_env_tool_access": "agent_env.steps.builtin.envs:modify_env_tool_access",
    "call_tool": "agent_env.steps.builtin.envs:call_tool",
    "check_state": "agent_env.steps.builtin.envs:check_state",
    "teardown_env": "agent_env.steps.builtin.envs:teardown_env",
    "sync_env_clock": "agent_env.steps.builtin.world_steps:sync_env_clock",
    "register_env_triggers": "agent_env.steps.builtin.world_steps:register_env_triggers",
    "cancel_triggers": "agent_env.steps.builtin.world_steps:cancel_triggers",
    "wait_clock": "agent_env.steps.builtin.world_steps:wait_clock",
    "deploy_agent": "agent_env.steps.builtin.agent_deploy:deploy_agent",
    "prompt_agent": "agent_env.steps.builtin.agents:prompt_agent",
    "check_response": "agent_env.steps.builtin.grading:check_response",
    "rubrics_verifier": "agent_env.steps.builtin.rubrics:rubrics_verifier",
    "agent_prompt_response_verifier": "agent_env.steps.builtin.response_verifier:agent_prompt_response_verifier",
    "aggregate_verifiers": "agent_env.steps.builtin.aggregate_verifiers:aggregate_verifiers",
    "collect_artifacts": "agent_env.steps.builtin.collect_artifacts:collect_artifacts",
    "check_image": "agent_env.steps.builtin.image_check:check_image",
    "sandbox_exec": "agent_env.steps.builtin.sandbox_steps:sandbox_exec",
    "put_files": "agent_env.steps.builtin.sandbox_steps:put_files",
    "collect_files": "agent_env.steps.builtin.sandbox_steps:collect_files",
    # A2A agent extension validators (issue 31; the checks are agent_env.validators.a2a_extension*)
    "verify_a2a_peer_agents": "agent_env.steps.builtin.a2a_extension_validators:verify_a2a_peer_agents",
    "verify_a2a_install": "agent_env.steps.builtin.a2a_extension_validators:verify_a2a_install",
    "verify_a2a_skill_config": "agent_env.steps.builtin.a2a_extension_validators:verify_a2a_skill_config",
    "verify_a2a_snapshot": "agent_env.steps.builtin.a2a_extension_validators:verify_a2a_snapshot",
    "verify_a2a_trajectory": "agent_env.steps.builtin.a2a_extension_validators:verify_a2a_trajectory",
    # an agent's own state, moved through object-store grants (protocol v1's snapshot/v1)
    "snapshot_agent_state": "agent_env.steps.builtin.agent_state:snapshot_agent_state",
    # The A2A agent validators (issue 31; `agent-env a2a-agent validate` runs them)
    "verify_a2a_agent_card": "agent_env.steps.builtin.a2a_validators:verify_a2a_agent_card",
    "verify_a2a_core_protocol": "agent_env.steps.builtin.a2a_validators:verify_a2a_core_protocol",
    "verify_a2a_agent_config_identity": "agent_env.steps.builtin.a2a_validators:verify_a2a_agent_config_identity",
    "verify_a2a_agent_mcp": "agent_env.steps.builtin.a2a_validators:verify_a2a_agent_mcp",
    "verify_a2a_modalities": "agent_env.steps.builtin.a2a_validators:verify_a2a_modalities",
    "verify_a2a_role": "agent_env.steps.builtin.a2a_validators:verify_a2a_role",
    "verify_a2a_system_prompt": "agent_env.steps.builtin.a2a_validators:verify_a2a_system_prompt",
    # the open protocol's agent extensions: rules an agent that plays a user decides its turns by, peers it delegates to
    "register_agent_triggers": "agent_env.steps.builtin.register_agent_triggers:register_agent_triggers",
    "peer_agents": "agent_env.steps.builtin.peer_agents:peer_agents",
    # validators of an environment (protocol v1) and of a universe's round trip, and their verdicts
    "verify_env_card": "agent_env.steps.builtin.env_validators:verify_env_card",
    "verify_env_core_protocol": "agent_env.steps.builtin.env_validators:verify_env_core_protocol",
    "verify_mcp_tool_schema": "agent_env.steps.builtin.env_validators:verify_mcp_tool_schema",
    "verify_spec_conformance": "agent_env.steps.builtin.env_validators:verify_spec_conformance",
    "verify_mcp_env_assessment": "agent_env.steps.builtin.env_validators:verify_mcp_env_assessment",
    "validation_gate_aggregator": "agent_env.steps.builtin.env_verdicts:validation_gate_aggregator",
    "verify_universe_load_export_roundtrip": "agent_env.steps.builtin.env_verdicts:verify_universe_load_export_roundtrip",
    "combine_universe_verdicts": "agent_env.steps.builtin.env_verdicts:combine_universe_verdicts",
    # The framework's bare sandboxes (issue 32): deploy one, load artifacts into it, check it with probes
    "deploy_sandbox": "agent_env.steps.builtin.bare_sandboxes:deploy_sandbox",
    "load_artifact": "agent_env.steps.builtin.bare_sandboxes:load_artifact",
    "verify_sandbox": "agent_env.steps.builtin.sandbox_verifier:verify_sandbox",
    # The framework's step types with no counterpart of ours before (issue 32), under its names and fields
    "env_outcome_verifier": "agent_env.steps.builtin.env_outcome:env_outcome_verifier",
    "teardown_sandboxes": "agent_env.steps.builtin.teardown_sandboxes:teardown_sandboxes",
    "run_code": "agent_env.steps.builtin.run_code:run_code",
    "add_skills": "agent_env.steps.builtin.add_skills:add_skills",
    "run_docker_container": "agent_env.steps.builtin.task_containers:run_docker_container",
    "run_container_unit_tests_verifier": "agent_env.steps.builtin.task_containers:run_container_unit_tests_verifier",
    # people in the run (issue 32): an agent a person plays, a person's review; both through the people's inbox
    "deploy_human_agent": "agent_env.steps.builtin.human_agent:deploy_human_agent",
    "review": "agent_env.steps.builtin.review:review",
    "apply_server_config": "agent_env.steps.builtin.server_config:apply_server_config",
    # agents installed into a running sandbox, and a CLI of an env's tools (issue 32)
    "build_mcp_cli": "agent_env.steps.builtin.mcp_cli:build_mcp_cli",
    "install_agent": "agent_env.steps.builtin.install_agent:install_agent",
}

# The built-in step types by family, in the order a reader meets them (`agent-env steps list` groups by these, and
# docs/reference/steps.md is generated in them); a plugin's type is in the family PLUGINS.
FAMILIES: dict[str, tuple[str, ...]] = {
    "environments": (
        "deploy_env",
        "load_data",
        "reset_env",
        "call_tool",
        "modify_env_tool_access",
        "apply_server_config",
        "snapshot_env",
        "restore_env",
        "build_mcp_cli",
        "teardown_env",
    ),
    "world: clock and triggers": ("sync_env_clock", "register_env_triggers", "cancel_triggers", "wait_clock"),
    "agents": (
        "deploy_agent",
        "prompt_agent",
        "install_agent",
        "add_skills",
        "peer_agents",
        "register_agent_triggers",
        "snapshot_agent_state",
    ),
    "people": ("deploy_human_agent", "review"),
    "sandboxes and artifacts": (
        "deploy_sandbox",
        "load_artifact",
        "put_files",
        "sandbox_exec",
        "run_code",
        "run_docker_container",
        "collect_files",
        "collect_artifacts",
        "teardown_sandboxes",
    ),
    "grading": (
        "check",
        "check_state",
        "check_response",
        "agent_prompt_response_verifier",
        "rubrics_verifier",
        "check_image",
        "env_outcome_verifier",
        "run_container_unit_tests_verifier",
        "verify_sandbox",
        "aggregate_verifiers",
    ),
    "environment validators": (
        "verify_env_card",
        "verify_env_core_protocol",
        "verify_mcp_tool_schema",
        "verify_spec_conformance",
        "verify_mcp_env_assessment",
        "validation_gate_aggregator",
        "verify_universe_load_export_roundtrip",
        "combine_universe_verdicts",
    ),
    "agent validators": (
        "verify_a2a_agent_card",
        "verify_a2a_core_protocol",
        "verify_a2a_agent_config_identity",
        "verify_a2a_agent_mcp",
        "verify_a2a_modalities",
        "verify_a2a_role",
        "verify_a2a_system_prompt",
        "verify_a2a_peer_agents",
        "verify_a2a_install",
        "verify_a2a_skill_config",
        "verify_a2a_snapshot",
        "verify_a2a_trajectory",
    ),
    "flow": ("sleep",),
}
PLUGINS = "plugins"


def family_of(name: str) -> str:
    """The family a step type is listed under: its built-in family, else PLUGINS."""
    return next((family for family, names in FAMILIES.items() if name in names), PLUGINS)


class StepConfig(BaseModel):
    """Base for step configs: unknown fields are errors, so typos are caught at validation.

    A step type under the framework's name says what becomes of each of the framework's fields it does not take
    as is: `framework_names` maps one onto a field of ours (planning rewrites it, see FrameworkName), and
    `refused_fields` refuses one by name with why (planning reports it; never an unknown field)."""

    model_config = ConfigDict(extra="forbid")

    framework_names: ClassVar[Mapping[str, tuple[str, FrameworkName]]] = {}
    refused_fields: ClassVar[Mapping[str, str]] = {}

    @model_validator(mode="before")
    @classmethod
    def _framework_refused(cls, data: object) -> object:
        """Planning reports these by field; this holds wherever else a config is read."""
        if isinstance(data, dict):
            for field, why in cls.refused_fields.items():
                if field in data:
                    raise ValueError(refusal(field, why))
        return data


class StepResult(BaseModel):
    outputs: dict[str, Any] = {}
    score: Score | None = None
    hits: list[dict[str, Any]] = []  # trigger hits the step's own calls caused (the run applies them)


StepFunction = Callable[["StepContext", Any], Awaitable["StepResult | JsonObject | None"]]


@dataclass
class PlanContext:
    """What `prepare` hooks see when a run is planned (client side, before it starts)."""

    run_id: str
    settings: Settings
    bundle: Path | None  # the bundle folder the task came from, if any
    task: TaskSpec | None = None  # the whole task: a step may name another by what that one deploys (sandbox_name)
    step_id: str | None = None  # the step being prepared

    @cached_property
    def stores(self) -> Stores:
        return open_stores(self.settings)


PrepareFunction = Callable[[PlannedConfig, PlanContext], PlannedConfig]


class EmptyConfig(StepConfig):
    pass


@dataclass(frozen=True)
class StepType:
    name: str
    run: StepFunction
    config: type[BaseModel]
    description: str
    local: bool  # trivial and quick: run as a Temporal local activity (no extra round trip)
    timeout: timedelta  # per attempt
    retries: int
    heartbeat_timeout: timedelta | None  # how soon a dead worker is noticed; None for local steps
    prepare: PrepareFunction | None = None  # declared config -> executed config, at plan time
    step_refs: tuple[str, ...] = ()  # config fields that name an upstream step
    in_workflow: bool = False  # applied by the workflow itself (world steps): `run` is never called
    quick: Callable[[PlannedConfig], bool] | None = None  # given the planned config: quick enough to run local
    # Traits: what the workflow needs to know of steps of this type (carried in their plans, see StepTraits).
    verb: WorldStepVerb | None = None  # in_workflow: the world's verb it applies
    deploys_env: bool = False
    deploys_agent: bool = False
    conversation: bool = False
    sandboxes: Callable[[PlannedConfig], bool] | None = None  # given the planned config: it starts sandboxes

    def runs_local(self, config: PlannedConfig) -> bool:
        return self.local or (self.quick is not None and self.quick(config))

    def traits(self, config: PlannedConfig) -> StepTraits:
        """The traits of a step of this type with this planned config."""
        return StepTraits(
            in_workflow=self.in_workflow,
            verb=self.verb,
            deploys_env=self.deploys_env,
            deploys_agent=self.deploys_agent,
            conversation=self.conversation,
            sandboxes=self.sandboxes is not None and self.sandboxes(config),
        )

    async def __call__(self, ctx: StepContext, config: BaseModel) -> StepResult:
        result = self.run(ctx, config)
        if inspect.isawaitable(result):
            result = await result  # type: ignore[assignment]  # (the awaited result, a StepResult | dict | None)
        if result is None:
            return StepResult()
        if isinstance(result, StepResult):
            return result
        if isinstance(result, dict):
            return StepResult(outputs=result)
        raise TypeError(f"step type '{self.name}' returned {type(result).__name__}; return a dict or StepResult")


def step_type(
    name: str,
    *,
    config: type[BaseModel] = EmptyConfig,
    local: bool = False,
    timeout: str | float = "5m",
    retries: int = 2,
    heartbeat_timeout: str | float | None = "10s",
    prepare: PrepareFunction | None = None,
    step_refs: tuple[str, ...] = (),
    in_workflow: bool = False,
    quick: Callable[[PlannedConfig], bool] | None = None,
    verb: WorldStepVerb | None = None,
    deploys_env: bool = False,
    deploys_agent: bool = False,
    conversation: bool = False,
    sandboxes: Callable[[PlannedConfig], bool] | None = None,
) -> Callable[[StepFunction], StepType]:
    """Declare a step type. Sync functions run in a thread so they cannot block the worker.

    prepare: runs when a run is planned, turning the declared config into what the step executes
    (e.g. inlining an environment record from the bundle), so the run pins what it used.
    step_refs: config fields whose value is the id of an upstream step (checked with the task graph).
    quick: decides from the planned config that this step is quick (a local activity, one hop less).
    Traits tell the workflow what it must know of the step (the workflow never compares type names):
    in_workflow + verb: a world step the workflow applies itself (agent_env.spec.verbs); deploys_env: its
    `instance` output is an environment instance the world watches; deploys_agent: it deploys an agent;
    conversation: a prompt a trainer may play a side of; sandboxes: decides from the planned config that
    the step starts sandboxes (removed when the run ends).
    """

    def wrap(fn: Callable[..., Any]) -> StepType:
        run = fn
        if not inspect.iscoroutinefunction(fn):

            async def run(ctx: StepContext, cfg: Any) -> Any:  # noqa: F811
                return await asyncio.to_thread(fn, ctx, cfg)

        return StepType(
            name=name,
            run=run,
            config=config,
            description=inspect.cleandoc(fn.__doc__ or "").split("\n\n")[0].replace("\n", " "),
            local=local,
            timeout=parse_duration(timeout),
            retries=retries,
            heartbeat_timeout=None if local or heartbeat_timeout is None else parse_duration(heartbeat_timeout),
            prepare=prepare,
            step_refs=step_refs,
            in_workflow=in_workflow,
            quick=quick,
            verb=verb,
            deploys_env=deploys_env,
            deploys_agent=deploys_agent,
            conversation=conversation,
            sandboxes=sandboxes,
        )

    return wrap


class StepCatalog:
    """The step types by name: the built-ins plus the `agent_env.task_steps` plugins, loaded on first use."""

    def __init__(self, builtins: dict[str, str]) -> None:
        self._targets = dict(builtins)
        self._loaded: dict[str, StepType] = {}
        self._plugins_scanned = False

    def _scan_plugins(self) -> None:
        if self._plugins_scanned:
            return
        self._plugins_scanned = True
        from importlib.metadata import entry_points

        for ep in entry_points(group=ENTRY_POINT_GROUP):
            self._targets.setdefault(ep.name, ep.value)

    def names(self) -> list[str]:
        self._scan_plugins()
        return sorted(self._targets)

    def register(self, st: StepType) -> None:
        """Register a step type from code (tests, notebooks)."""
        self._targets[st.name] = f"<registered {st.name}>"
        self._loaded[st.name] = st

    def get(self, name: str) -> StepType:
        if name in self._loaded:
            return self._loaded[name]
        self._scan_plugins()
        target = self._targets[name]  # KeyError: unknown step type
        module_name, _, attr = target.partition(":")
        try:
            obj = getattr(importlib.import_module(module_name), attr)
        except Exception as e:
            raise ImportError(f"step type '{name}' could not be loaded from {target}: {e}") from e
        if not isinstance(obj, StepType):
            raise ImportError(f"step type '{name}' at {target} is not declared with @step_type")
        self._loaded[name] = obj
        return obj


catalog = StepCatalog(BUILTINS)
