"""The world's rules as declared in a task: its clock, the people in it, and its triggers.

    [clock]
    start = "2026-03-02T09:00:00-05:00"   # RFC 3339 with an offset
    mode = "event_driven"                # frozen | paced | event_driven
    rate = 1.0                           # paced: virtual seconds per real second (up to 86,400)

    [personas.dana]
    agent = "dana"                       # her agent in the environment (her replies are sent as it)
    email = "dana@example.com"           # what reaches her: email to this address ...
    chat = "dana"                        # ... or a direct message to this chat handle

    [[triggers]]
    id = "morning_rush"
    when = { type = "time", at = "+30m", every = "1d", count = 3 }
    actions = [{ type = "call_tool", env = "desk", agent = "omar", tool = "create_ticket", arguments = { ... } }]

Times are RFC 3339 instants or `+DURATION` from the clock's start. Action arguments may use
`${match.arguments.X}`, `${match.result.X}`, `${clock.now}` and the usual `${steps...}` references.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from agent_env.spec.duration import Duration, parse_duration
from agent_env.spec.predicates import Operators, TextTest
from agent_env.spec.state_reads import MAX_STATE_READS, StateRead, unbound_reference

MAX_RATE = 86_400.0
MAX_INSTRUCT = timedelta(minutes=4)  # what an instructed agent may take (its activity has 5m)
TRIGGER_ID = r"^[A-Za-z_][A-Za-z0-9_\-]{0,63}$"
PATH = re.compile(r"^(arguments|result|agent|role|tool)(\.[A-Za-z0-9_\-]+)*$")


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ClockSpec(_Spec):
    start: datetime = Field(description="the world's start time, RFC 3339 with an offset")
    mode: Literal["frozen", "paced", "event_driven"] = "event_driven"
    rate: float = Field(1.0, gt=0, le=MAX_RATE, description="paced mode: virtual seconds per real second")
    while_agent_thinks: Literal["run", "pause"] = Field(
        "run", description="while an agent takes its turn: the clock keeps its pace, or stops"
    )
    zone: str | None = Field(None, description="IANA zone get_time reports local time in, e.g. America/New_York")

    @field_validator("start")
    @classmethod
    def _aware(cls, value: datetime) -> datetime:
        if value.tzinfo is None:
            raise ValueError("the clock's start needs an offset, e.g. 2026-03-02T09:00:00-05:00 or ...Z")
        return value


def parse_time(value: str | datetime, start: datetime | None) -> datetime:
    """An instant: RFC 3339 with an offset, or `+DURATION` after the clock's start."""
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise ValueError(f"time {value.isoformat()} needs an offset (e.g. Z or -05:00)")
        return value
    text = value.strip()
    if text.startswith("+"):
        if start is None:
            raise ValueError(f"{value!r} is relative to the clock's start, but the task has no [clock]")
        delta = parse_duration(text[1:])
        if not isinstance(delta, timedelta):  # an ISO 8601 duration ('P1D') is left for pydantic elsewhere
            raise ValueError(f"{value!r}: write the offset from the clock's start as +1d9h30m (s, m, h, d)")
        return start + delta
    try:
        parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(
            f"{value!r} is not a time: use RFC 3339 (2026-03-02T09:30:00-05:00) or +DURATION "
            "(+1d9h30m) from the clock's start"
        ) from None
    if parsed.tzinfo is None:
        raise ValueError(f"time {value!r} needs an offset (e.g. Z or -05:00)")
    return parsed


TimeValue = str | datetime


# -- predicates over a call --


class Predicate(_Spec, Operators):
    """A test on part of a matched call: `path` is arguments.X, result.X (dots walk in), agent, role or tool."""

    path: str

    @field_validator("path")
    @classmethod
    def _path(cls, value: str) -> str:
        if not PATH.match(value):
            raise ValueError(
                f"path {value!r} must start with arguments, result, agent, role or tool "
                "(e.g. arguments.to or result.charges.0.id)"
            )
        return value

    @model_validator(mode="after")
    def _one_operator(self) -> Predicate:
        self.require_one_operator(f"predicate on {self.path!r}", f"predicate on {self.path!r}: matches")
        return self


class CallMatch(_Spec):
    """Which completed tool calls match: the tool, who made it, and predicates on arguments and result."""

    env: str = Field(description="the deploy_env step whose environment is watched")
    tool: str | list[str]
    roles: list[str] | None = None
    agents: list[str] | None = None
    where: list[Predicate] = Field(default_factory=list)
    outcome: Literal["success", "error", "any"] = "success"

    @property
    def tools(self) -> list[str]:
        return [self.tool] if isinstance(self.tool, str) else list(self.tool)


# -- conditions --


class RandomInterval(_Spec):
    min: Duration
    max: Duration

    @model_validator(mode="after")
    def _order(self) -> RandomInterval:
        if self.max < self.min:
            raise ValueError("max must not be shorter than min")
        return self


class ExpInterval(_Spec):
    """A random wait drawn from an exponential distribution (the AgentEnv Framework's `{dist: exp, mean, seed}`):
    each draw is a pure function of `seed` (the run's seed when none is given), the trigger and the draw's
    number, so a replay, and every run with that seed, waits the same."""

    dist: Literal["exp"]
    mean: Duration
    seed: int | None = Field(None, description="what the draws follow (default: the run's seed)")

    @field_validator("mean")
    @classmethod
    def _positive(cls, mean: timedelta) -> timedelta:
        if mean <= timedelta(0):
            raise ValueError("mean must be a positive duration")
        return mean


class TimeWhen(_Spec):
    type: Literal["time"]
    at: TimeValue | None = Field(
        None, description="RFC 3339, or +DURATION from the clock's start (with neither: one `every` from the start)"
    )
    after: str | None = Field(None, description="fire this long after another trigger fires (with `delay`)")
    delay: Duration = Field(timedelta(0), description="with `after`: how long after")
    every: Duration | RandomInterval | ExpInterval | None = Field(
        None, description="repeat: a fixed, seeded random or exponential interval"
    )
    count: int | None = Field(None, ge=1, description="fire at most this many times")
    until: TimeValue | None = Field(None, description="no firing after this time")
    unless: CallMatch | None = Field(None, description="cancelled if such a call happens first")

    @model_validator(mode="after")
    def _anchor(self) -> TimeWhen:
        if self.at is not None and self.after is not None:
            raise ValueError("a time trigger takes `at` or `after`, not both")
        if self.at is None and self.after is None and self.every is None:
            raise ValueError("a time trigger needs `at`, `after` or `every`")
        if self.every is None and (self.count is not None or self.until is not None):
            raise ValueError("`count` and `until` need `every`")
        if self.every is not None and self.count is None and self.until is None:
            raise ValueError("a repeating time trigger needs `count` or `until`, so the run can end")
        return self


class ToolCallWhen(CallMatch):
    type: Literal["tool_call"]
    barrier: Duration | None = Field(
        None, description="hold the provoking call's answer (at most this long) until the actions are done"
    )


class StateWhen(_Spec, Operators):
    """True when a read-only tool's result (at `path`) passes the test; fires when it becomes true. With reads
    `before` it, their bound values fill `${name}` in later arguments (its own too)."""

    type: Literal["state"]
    env: str
    tool: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    role: str | None = Field(None, description="read as this role (default: the environment's first)")
    path: str = ""
    before: list[StateRead] = Field(
        default_factory=list, max_length=MAX_STATE_READS, description="reads made first, in order, binding values"
    )

    @model_validator(mode="after")
    def _one_operator(self) -> StateWhen:
        self.require_one_operator(f"state condition on {self.tool}", f"state condition on {self.tool}: matches")
        if self.before and (problem := unbound_reference(self.before, self.tool, self.arguments)):
            raise ValueError(problem)
        return self


class Says(_Spec, TextTest):
    """What a persona is told: it becomes predicates on the message (so, unlike `TextTest.hit`, case counts)."""

    field = "says"


class PersonaWhen(_Spec):
    """Fires when an agent says something matching to a simulated person (email or direct message)."""

    type: Literal["persona"]
    env: str
    persona: str
    says: Says = Field(default_factory=lambda: Says(matches="."))
    from_agents: list[str] | None = Field(None, description="only what these agents say")


Condition = Annotated[TimeWhen | ToolCallWhen | StateWhen | PersonaWhen, Field(discriminator="type")]


# -- actions --


class _Action(_Spec):
    delay: Duration | ExpInterval = Field(
        timedelta(0), description="run this long (virtual time) after the firing: fixed or exponential"
    )


class CallToolAction(_Action):
    type: Literal["call_tool"]
    env: str
    tool: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    role: str | None = None
    agent: str | None = None


class SetToolsAction(_Action):
    """Change a role's rules mid-run: `enable` tools (names or patterns), `disable` others, keep the rest. Unlike
    the step `modify_env_tool_access` without `action`, which replaces the role's rules (`tools`, `deny`): see
    agent_env.spec.verbs."""

    type: Literal["set_tools"]
    env: str
    role: str
    enable: list[str] = Field(default_factory=list)
    disable: list[str] = Field(default_factory=list)


class InstructAction(_Action):
    """Tell a world agent what to do. With `by` (a deploy_agent step, e.g. a persona), that agent gets the
    instruction over A2A and carries it out with its tools, as `agent`; `reply` (a templated tool call made
    as that agent) is what happens without `by`, and the deterministic fallback when the agent cannot act."""

    type: Literal["instruct"]
    env: str
    agent: str
    instruction: str
    by: str | None = Field(None, description="the deploy_agent step whose agent carries the instruction out")
    timeout: Duration | None = Field(
        None, description="with `by`: how long the agent has to carry it out (at most 4m; default 4m)"
    )
    reply: CallToolAction | None = None

    @field_validator("timeout")
    @classmethod
    def _within(cls, value: timedelta | None) -> timedelta | None:
        if value is not None and not timedelta(0) < value <= MAX_INSTRUCT:
            raise ValueError("an instructed agent's `timeout` is above 0 and at most 4m (240 s)")
        return value


class SetClockAction(_Action):
    type: Literal["set_clock"]
    time: TimeValue | None = None
    rate: float | None = Field(None, gt=0, le=MAX_RATE)
    mode: Literal["frozen", "paced", "event_driven"] | None = None


class TriggersAction(_Action):
    """Register or cancel triggers, as the world steps of the same name do (`ids` is the old name of `triggers`)."""

    type: Literal["register_triggers", "cancel_triggers"]
    triggers: list[str] = Field(min_length=1, description="trigger ids")

    @model_validator(mode="before")
    @classmethod
    def _ids_is_triggers(cls, data: Any) -> Any:
        if isinstance(data, dict) and "ids" in data and "triggers" not in data:
            data = {("triggers" if key == "ids" else key): value for key, value in data.items()}
        return data


class EndRunAction(_Action):
    type: Literal["end_run"]
    reason: str = "the world ended"


Action = Annotated[
    CallToolAction | SetToolsAction | InstructAction | SetClockAction | TriggersAction | EndRunAction,
    Field(discriminator="type"),
]


class TriggerSpec(_Spec):
    id: str = Field(pattern=TRIGGER_ID)
    description: str = ""
    when: Condition
    actions: list[Action] = Field(min_length=1)
    repeat: bool = Field(
        False, description="tool-call, state and persona triggers: fire on every match (default: once)"
    )
    max_fires: int | None = Field(None, ge=1, description="a cap on firings, whatever the condition")


class PersonaSpec(_Spec):
    agent: str = Field(description="the persona's agent in the environment; replies are made as it")
    email: str | None = None
    chat: str | None = None
    brief: str = Field("", description="who this person is (for LLM-played personas)")


def trigger_cycle(triggers: list[TriggerSpec]) -> list[str] | None:
    """A cycle of `after` references, as a closed path, or None."""
    from agent_env.spec.task import find_cycle

    deps = {t.id: [t.when.after] if isinstance(t.when, TimeWhen) and t.when.after else [] for t in triggers}
    return find_cycle(deps)


DeployedEnv = tuple[set[str] | None, set[str], set[str]]  # tools (None: known once it runs), roles, agents


def world_problems(task: Any, envs: dict[str, DeployedEnv]) -> list[tuple[tuple[Any, ...], str]]:
    """Cross-checks of clock, personas and triggers against the task's environments (`envs`: by deploy
    step id, as `agent_env.planning` finds them): (location, message)."""
    problems: list[tuple[tuple[Any, ...], str]] = []
    start = task.clock.start if task.clock else None
    ids = [t.id for t in task.triggers]
    seen: set[str] = set()
    for i, t in enumerate(task.triggers):
        where = ("triggers", i)
        if t.id in seen:
            problems.append((where + ("id",), f"duplicate trigger id {t.id!r}"))
        seen.add(t.id)
        when = t.when
        if isinstance(when, TimeWhen):
            for field in ("at", "until"):
                value = getattr(when, field)
                if value is not None:
                    try:
                        parse_time(value, start)
                    except ValueError as e:
                        problems.append((where + ("when", field), str(e)))
            if when.at is None and when.after is None and start is None:
                problems.append(
                    (where + ("when", "every"), "starts from the clock's start, but the task has no [clock]")
                )
            if when.after is not None and when.after not in ids:
                problems.append(
                    (
                        where + ("when", "after"),
                        f"{when.after!r} is not a trigger of this task (triggers: {', '.join(ids)})",
                    )
                )
            if when.unless is not None:
                problems += _match_problems(when.unless, envs, where + ("when", "unless"))
        elif isinstance(when, ToolCallWhen):
            problems += _match_problems(when, envs, where + ("when",))
        elif isinstance(when, StateWhen):
            problems += _env_tool_problems(
                when.env, [r.tool for r in when.before] + [when.tool], envs, where + ("when",)
            )
            if when.role is not None and when.env in envs and when.role not in envs[when.env][1]:
                problems.append((where + ("when", "role"), f"no role {when.role!r} in environment {when.env!r}"))
        elif isinstance(when, PersonaWhen):
            if when.persona not in task.personas:
                known = ", ".join(task.personas) or "none declared"
                problems.append(
                    (
                        where + ("when", "persona"),
                        f"no persona {when.persona!r} (personas: {known}); declare it under [personas]",
                    )
                )
            problems += _env_tool_problems(when.env, [], envs, where + ("when",))
        for j, action in enumerate(t.actions):
            problems += _action_problems(action, envs, ids, start, where + ("actions", j))
    for i, s in enumerate(task.steps):
        if s.type in ("sync_env_clock", "wait_clock") and task.clock is None:
            problems.append((("steps", i, "type"), f"{s.type} needs the task's clock: add a [clock] with a start"))
        if s.type in ("register_env_triggers", "cancel_triggers"):
            for tid in s.config.get("triggers") or []:
                if tid != "*" and tid not in ids:
                    problems.append(
                        (
                            ("steps", i, "config", "triggers"),
                            f"{tid!r} is not a trigger of this task (triggers: {', '.join(ids) or 'none'})",
                        )
                    )
    cycle = trigger_cycle(task.triggers)
    if cycle:
        problems.append(
            (
                ("triggers",),
                f"cycle of `after` references {' → '.join(cycle)} — one of them must anchor at a time (`at`)",
            )
        )
    for name, persona in task.personas.items():
        if not (persona.email or persona.chat):
            problems.append((("personas", name), "a persona needs an `email` or a `chat` handle to be reached at"))
    return problems


def _env_tool_problems(
    env: str, tools: list[str], envs: dict[str, Any], where: tuple[Any, ...]
) -> list[tuple[tuple[Any, ...], str]]:
    if env not in envs:
        return [
            (
                where + ("env",),
                f"{env!r} is not a deploy_env step of this task (environments: {', '.join(envs) or 'none'})",
            )
        ]
    known = envs[env][0]
    if known is None:
        return []  # a sandboxed app's tools: checked when it is deployed
    return [
        (where + ("tool",), f"environment {env!r} has no tool {tool!r} (tools: {', '.join(sorted(known))})")
        for tool in tools
        if tool not in known
    ]


def _match_problems(
    match: CallMatch, envs: dict[str, Any], where: tuple[Any, ...]
) -> list[tuple[tuple[Any, ...], str]]:
    problems = _env_tool_problems(match.env, match.tools, envs, where)
    if match.env in envs:
        for role in match.roles or []:
            if role not in envs[match.env][1]:
                problems.append((where + ("roles",), f"no role {role!r} in environment {match.env!r}"))
    return problems


def _action_problems(
    action: Any, envs: dict[str, Any], ids: list[str], start: datetime | None, where: tuple[Any, ...]
) -> list[tuple[tuple[Any, ...], str]]:
    problems: list[tuple[tuple[Any, ...], str]] = []
    if isinstance(action, CallToolAction):
        problems += _env_tool_problems(action.env, [action.tool], envs, where)
        if action.env in envs:
            if action.role is not None and action.role not in envs[action.env][1]:
                problems.append((where + ("role",), f"no role {action.role!r} in environment {action.env!r}"))
            if action.agent is not None and action.agent not in envs[action.env][2]:
                problems.append(
                    (
                        where + ("agent",),
                        f"no agent {action.agent!r} in environment {action.env!r} "
                        f"(agents: {', '.join(sorted(envs[action.env][2]))})",
                    )
                )
    elif isinstance(action, SetToolsAction):
        names = [t for t in action.enable + action.disable if not any(c in t for c in "*?[")]  # (patterns: any)
        problems += _env_tool_problems(action.env, names, envs, where)
        if action.env in envs and action.role not in envs[action.env][1]:
            problems.append((where + ("role",), f"no role {action.role!r} in environment {action.env!r}"))
    elif isinstance(action, InstructAction):
        problems += _env_tool_problems(action.env, [], envs, where)
        if action.env in envs and action.agent not in envs[action.env][2]:
            problems.append((where + ("agent",), f"no agent {action.agent!r} in environment {action.env!r}"))
        if action.reply is not None:
            problems += _action_problems(action.reply, envs, ids, start, where + ("reply",))
    elif isinstance(action, SetClockAction) and action.time is not None:
        try:
            parse_time(action.time, start)
        except ValueError as e:
            problems.append((where + ("time",), str(e)))
    elif isinstance(action, TriggersAction):
        problems += [
            (where + ("triggers",), f"{i!r} is not a trigger of this task") for i in action.triggers if i not in ids
        ]
    return problems
