"""What a run carries and records: the plan the workflow executes, step results, scores, run state.

Imported by the workflow (passed through the sandbox): no Temporal, no I/O, no registry here.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any, get_args

from pydantic import BaseModel, Field, model_validator

from agent_env.spec.task import FailurePolicy
from agent_env.spec.verbs import RENAMED_STEP_TYPES, WorldStepVerb
from agent_env.spec.world_state import WorldSpec, WorldState

AGGREGATE = "aggregate_verifiers"  # the step type whose score, when present, is the run's
ABANDONED = "abandoned by the trainer: "  # a cancelled run's error when its trainer gave it up (then the reason)


class StepStatus(StrEnum):
    """Where a step of a run is."""

    PENDING = "pending"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    SKIPPED = "skipped"
    CANCELLED = "cancelled"

    @property
    def finished(self) -> bool:
        return self not in (StepStatus.PENDING, StepStatus.RUNNING)


class RunStatus(StrEnum):
    """How a run stands, or how it ended."""

    RUNNING = "running"
    PASSED = "passed"  # every step done, every score at or above its threshold
    FAILED = "failed"  # the run completed, but a score is below its threshold
    ERROR = "error"  # a step failed under the `fail` policy: the run could not complete
    CANCELLED = "cancelled"

    @property
    def finished(self) -> bool:
        return self is not RunStatus.RUNNING


class Criterion(BaseModel):
    """One row of a score: a named check, whether it held, and its weight."""

    name: str
    passed: bool
    weight: float = 1.0
    detail: str = ""
    score: float | None = Field(
        None, description="the row's own score when it is graded in degrees (a judge's, a pooled step's)"
    )


class Score(BaseModel):
    """What a verifier step records: a value in 0..1 and the rows it came from."""

    value: float = Field(ge=0, le=1)
    threshold: float = Field(1.0, ge=0, le=1)
    criteria: list[Criterion] = Field(default_factory=list)

    @property
    def passed(self) -> bool:
        return self.value >= self.threshold

    @classmethod
    def from_criteria(cls, criteria: list[Criterion], threshold: float = 1.0) -> Score:
        total = sum(c.weight for c in criteria)
        value = sum(c.weight for c in criteria if c.passed) / total if total else 1.0
        return cls(value=round(value, 6), threshold=threshold, criteria=criteria)


class StepTraits(BaseModel):
    """What the workflow needs to know of a step's type, declared by the type (`@step_type`) and carried in
    its plan: the workflow never tells step types apart by name."""

    in_workflow: bool = False  # world steps (clock, triggers, waits) the workflow applies itself
    verb: WorldStepVerb | None = None  # ... and which of the world's verbs it applies
    deploys_env: bool = False  # its `instance` output is an environment instance of the run (the world watches it)
    deploys_agent: bool = False  # deploys an agent (hosted on the gateway, or in a sandbox): `instruct ... by` it
    conversation: bool = False  # a prompt whose sides a trainer may play (the run then holds the conversation)
    sandboxes: bool = False  # starts sandboxes (decided from its planned config): removed at the run's end


class StepPlan(StepTraits):
    """One step as the workflow executes it: the spec plus what its type decided (local, limits, traits)."""

    id: str
    type: str
    depends_on: list[str] = Field(default_factory=list)
    config: dict[str, Any] = Field(default_factory=dict)
    on_failure: FailurePolicy = FailurePolicy.FAIL
    timeout: timedelta
    retries: int
    local: bool = False
    heartbeat_timeout: timedelta | None = None

    @model_validator(mode="before")
    @classmethod
    def _plans_recorded_before_step_traits(cls, data: Any) -> Any:
        """Plans recorded before step traits (runs in flight, histories) carry none: their traits are those of
        the built-in type of their name (only built-ins had any then), so they replay the same decisions."""
        if isinstance(data, dict) and not NEW_TRAITS & data.keys():
            data = {**data, **builtin_traits(data.get("type"), data.get("config") or {})}
        if isinstance(data, dict) and data.get("verb") in RENAMED_STEP_TYPES:
            # recorded before the world steps took the framework's names: the same verb under its name now
            data = {**data, "verb": RENAMED_STEP_TYPES[data["verb"]]}
        return data


# -- plans recorded before step traits: what the workflow decided from the type's name then --

NEW_TRAITS = {"verb", "deploys_env", "deploys_agent", "conversation", "sandboxes"}

# A step's config as planned: the task file's table for the step, `${...}` references in it resolved when the step
# starts. Its shape is its step type's (a built-in's or a plugin's config model, which validates it then): the
# planning code reads only the few keys it knows of the types it knows.
PlannedConfig = dict[str, Any]


def apps_in_sandboxes(config: PlannedConfig) -> bool:
    """A planned deploy_env config (its record inlined) with an app in a sandbox, or served by a server of its own
    (a topology other than `gateway`: the run's end stops it)."""
    record = config.get("record") or {}
    return record.get("env_provider_type", "gateway") != "gateway" or any(
        isinstance(app, dict) and app.get("sandbox") for app in record.get("apps", [])
    )


def agent_in_sandbox(config: PlannedConfig) -> bool:
    """A planned deploy_agent config of an agent started in a sandbox: an a2a agent given one, any cli agent."""
    record = config.get("record") or {}
    return record.get("type") == "cli" or (
        record.get("type") == "a2a" and bool((record.get("config") or {}).get("sandbox"))
    )


def builtin_traits(step_type: Any, config: PlannedConfig) -> dict[str, Any]:
    """The traits the built-in step type of this name declares (agent_env.steps.builtin), from its config."""
    if step_type == "deploy_env":
        return {"deploys_env": True, "sandboxes": apps_in_sandboxes(config)}
    if step_type == "deploy_agent":
        return {"deploys_agent": True, "sandboxes": agent_in_sandbox(config)}
    if step_type in ("deploy_human_agent", "install_agent"):  # (install_agent: into a sandbox another step deployed)
        return {"deploys_agent": True}
    if step_type == "prompt_agent":
        return {"conversation": True}
    # (newer than step traits: no recorded plan has one of these, so the table stays whole)
    if step_type in ("deploy_sandbox", "env_outcome_verifier", "run_docker_container"):
        return {"sandboxes": True}
    if isinstance(step_type, str):
        step_type = RENAMED_STEP_TYPES.get(step_type, step_type)
    if step_type in get_args(WorldStepVerb):
        return {"verb": step_type}
    return {}


# The workflow behaviour runs planned now are started with. A run started before a change (a lower number; 0
# for inputs without the field) asks its history whether it was recorded with it (workflow.patched, a marker and
# a search attribute upsert each); a run started with it takes it and records no patch marker. 1: every change
# up to the fast path (agent_env.workflows.continuation); 2: steps and world actions under named activity types.
# Workers are upgraded before planners: an older worker would run a run planned with a newer behaviour the old way.
BEHAVIOUR = 2


class RunInput(BaseModel):
    """The workflow's input. Holds no secrets: specs carry `secret:NAME` references only."""

    run_id: str
    task_id: str
    task_version: str
    description: str = ""
    steps: list[StepPlan]
    search_attributes: bool = True  # false when the cluster would not register ours
    # Continue-as-new when history reaches this many events (or Temporal suggests it), carrying state.
    continue_as_new_at: int = Field(4000, ge=10)
    carried: RunState | None = None
    world: WorldSpec | None = None  # clock, personas and triggers, when the task has any
    pins: dict[str, Any] = Field(default_factory=dict)  # seed, versions of agent-env, task, envs, agents, models
    timeout: timedelta | None = None  # the whole run's limit, from its start (carried through continue-as-new)
    behaviour: int = 0  # BEHAVIOUR when planned (0: started before it, so patches decide)


class StepCall(BaseModel):
    """An activity's input: one attempt at one step, its config already resolved."""

    run_id: str
    task_id: str
    step_id: str
    type: str
    config: dict[str, Any]
    heartbeat_timeout: timedelta | None = None


class StepOutcome(BaseModel):
    outputs: dict[str, Any] = Field(default_factory=dict)
    score: Score | None = None
    attempt: int = 1
    duration_ms: float = 0.0
    hits: list[dict[str, Any]] = Field(default_factory=list)  # trigger hits of the step's own calls


class StepState(BaseModel):
    """A step as its run records it: status, attempts, times, outputs, score, error."""

    id: str
    type: str
    depends_on: list[str] = Field(default_factory=list)
    status: StepStatus = StepStatus.PENDING
    attempts: int = 0
    started_at: datetime | None = None
    finished_at: datetime | None = None
    duration_ms: float | None = None  # time spent in the step's own code, last attempt
    outputs: dict[str, Any] = Field(default_factory=dict)
    score: Score | None = None
    error: str | None = None


class TurnOffer(BaseModel):
    """A turn waiting for a trainer's model (an episode): what its agent is asked, and where it acts.
    Its role token is not here (runs carry no secrets): the trainer's client gets it from the gateway."""

    id: str
    step: str
    agent: str
    role: str | None = None
    env: str | None = None  # the environment instance
    mcp_url: str | None = None
    prompt: str
    system_prompt: str | None = None
    conversation: list[dict[str, Any]] = Field(default_factory=list)
    deadline_s: float


class TrainerProgress(BaseModel):
    """Where a prompt step played by a trainer is: it survives continue-as-new."""

    transcript: list[dict[str, Any]] = Field(default_factory=list)
    turn: int = 0
    marks: dict[str, int] = Field(default_factory=dict)  # trajectory positions when the step began
    offer: TurnOffer | None = None
    answers: dict[str, str] = Field(default_factory=dict)  # turn id -> the trainer's response


class RunState(BaseModel):
    """The live state of a run (the workflow's query) and, once it ends, its record."""

    run_id: str
    task_id: str
    task_version: str
    description: str = ""
    status: RunStatus = RunStatus.RUNNING
    started_at: datetime
    finished_at: datetime | None = None
    score: float | None = None
    error: str | None = None
    steps: dict[str, StepState]
    world: WorldState | None = None
    trainer: dict[str, TrainerProgress] = Field(default_factory=dict)  # prompt steps played by a trainer
    pins: dict[str, Any] = Field(default_factory=dict)  # the seed and the versions this run used
    clipped: list[str] = Field(
        default_factory=list,
        description="parts of the state clipped to keep it within history's bounds (large outputs, logs)",
    )

    @classmethod
    def start(cls, inp: RunInput, now: datetime) -> RunState:
        return cls(
            run_id=inp.run_id,
            task_id=inp.task_id,
            task_version=inp.task_version,
            description=inp.description,
            started_at=now,
            steps={s.id: StepState(id=s.id, type=s.type, depends_on=s.depends_on) for s in inp.steps},
            world=WorldState() if inp.world else None,
            pins=inp.pins,
        )

    def scores(self) -> dict[str, Score]:
        """The scores that decide the run: the last `aggregate_verifiers` step's, if the task has one (it
        combines the others as the task says), else every step's."""
        scores = {sid: s.score for sid, s in self.steps.items() if s.score is not None}
        final = [sid for sid, s in self.steps.items() if s.type == AGGREGATE and s.score is not None]
        return {final[-1]: scores[final[-1]]} if final else scores

    def conclude(self) -> None:
        """Decide status and overall score once no step is running (cancellation is set by the caller)."""
        scores = self.scores()
        self.score = round(sum(s.value for s in scores.values()) / len(scores), 6) if scores else None
        if self.status is RunStatus.CANCELLED:
            return
        if self.error:
            self.status = RunStatus.ERROR
        elif any(not s.passed for s in scores.values()):
            self.status = RunStatus.FAILED
        else:
            self.status = RunStatus.PASSED


RunInput.model_rebuild()  # it refers to RunState, defined after it
