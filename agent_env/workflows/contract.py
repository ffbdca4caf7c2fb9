"""The activities the task-run workflow schedules, declared once: each one's name, what it takes, what it returns.

The workflow calls them by these names with these models; agent_env.activities declares its functions with
the same names and types (tests/test_workflow_parts.py holds the two sides together). Imported by the workflow:
pydantic, spec models and Temporal's retry policy only.

What travels is on the wire of runs in flight and of recorded histories, so it keeps its JSON shape:
- activities that took one dict take a model of the same fields (AgentAsk, PromptFinish);
- activities that took several positional arguments keep them (world_action, prompt_marks, pace,
  release_sandboxes): one model instead would break an activity an older worker scheduled;
- trigger hits come back as plain dicts (`Hit`): the workflow validates them itself, so a bad one fails the
  run with a message instead of failing the workflow task on decoding.

Steps and world actions run under activity types that say what they are (`agentenv.step.deploy_env`,
`agentenv.world.call_tool`; the named-activities patch): the Temporal UI's timeline shows a local activity by
its type alone. Each named family takes and returns what its old single activity did (`run_step`,
`world_action`, still served for runs that took the old path); a worker serves the families with one dynamic
activity, so plugin step types need no registration of their own.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, Field
from temporalio.api.common.v1 import Payload
from temporalio.common import RawValue, RetryPolicy

from agent_env.spec.run import RunState, StepCall, StepOutcome
from agent_env.spec.world_state import WorldPush

R = TypeVar("R")

QUICK_RETRY = RetryPolicy(maximum_attempts=10, maximum_interval=timedelta(seconds=10))  # the world's, prompts' own

Hit = dict[str, Any]  # a TriggerHit as JSON, checked by the workflow (TriggerHit.model_validate)
Who = dict[str, Any]  # a deploy_agent step's outputs: the agent (name, url, hosted, role, env, mcp_url, trainer)


class AgentAsk(BaseModel):
    """One turn of a hosted or A2A agent in a prompt the workflow holds (a trainer plays the other side)."""

    who: Who
    side: str
    transcript: list[dict[str, Any]]  # its tail, since the agent-ask-tail patch
    run_id: str
    step_id: str
    system_prompt: str | None = None
    deadline: float  # seconds
    seed: int | None = None
    turn: int | None = None  # the side's turn number (None: counted from the transcript, recorded before the tail)


class AgentAnswer(BaseModel):
    entry: dict[str, Any] | None = None  # the transcript entry (a long text kept apart in the object store)
    timed_out: str | None = None  # why there is no entry


class PromptFinish(BaseModel):
    """A prompt the workflow held is over: keep its transcript and tool calls, make the step's outputs."""

    run_id: str
    step_id: str
    transcript: list[dict[str, Any]]
    marks: dict[str, int]
    agent: Who
    partner: Who = Field(default_factory=dict)
    timed_out: str | None = None
    seconds: float


class Paced(BaseModel):
    real: str  # the real time at the end of the wait (ISO 8601), for the workflow's clock
    hits: list[Hit] = Field(default_factory=list)


@dataclass(frozen=True)
class Activity(Generic[R]):
    """An activity on the wire: its name, the types of its positional arguments, the type of its result."""

    name: str
    takes: tuple[Any, ...]
    returns: type[R]


RUN_STEP = Activity("agentenv.run_step", (StepCall,), StepOutcome)
# (the final state, [run id] to release what it holds on the gateway first, or none)
RECORD_RUN = Activity("agentenv.record_run", (RunState, list[str] | None), type(None))
# (instance, the resolved action, idempotency key, cause, virtual time) -> its outcome as logged, plus `hits`
WORLD_ACTION = Activity("agentenv.world_action", (str, dict[str, Any], str, str, str | None), dict[str, Any])
PUSH_WORLD = Activity("agentenv.push_world", (list[tuple[str, WorldPush]],), list[Hit])
PACE = Activity("agentenv.pace", (float, list[tuple[str, WorldPush]]), Paced)  # (seconds, pushes)
PROMPT_MARKS = Activity("agentenv.prompt_marks", (Who, Who), dict[str, int])  # (agent, partner) -> trajectory ends
AGENT_ASK = Activity("agentenv.agent_ask", (AgentAsk,), AgentAnswer)
PROMPT_FINISH = Activity("agentenv.prompt_finish", (PromptFinish,), dict[str, Any])  # -> the step's outputs
# (run id, instances to retire, whether it started sandboxes) -> counts of what was released
RELEASE_SANDBOXES = Activity("agentenv.release_sandboxes", (str, list[str], bool), dict[str, Any])

ACTIVITIES: tuple[Activity[Any], ...] = (
    RUN_STEP,
    RECORD_RUN,
    WORLD_ACTION,
    PUSH_WORLD,
    PACE,
    PROMPT_MARKS,
    AGENT_ASK,
    PROMPT_FINISH,
    RELEASE_SANDBOXES,
)


# -- named activities: one type per step type and per world verb --

PATCH_NAMED_ACTIVITIES = "named-activities"  # (workflow.patched) steps and world actions run under named types
STEP_PREFIX = "agentenv.step."
WORLD_PREFIX = "agentenv.world."
NAMED: dict[str, Activity[Any]] = {STEP_PREFIX: RUN_STEP, WORLD_PREFIX: WORLD_ACTION}
MAX_NAME_PART = 64  # characters of the step type or verb in an activity type
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")


def _part(name: str) -> str:
    """A step type or verb as part of an activity type: plugin step types are user-named, so anything but
    letters, digits, `_`, `.` and `-` becomes `_`, and it is cut to MAX_NAME_PART."""
    return _UNSAFE.sub("_", name)[:MAX_NAME_PART] or "_"


def step_activity(step_type: str) -> str:
    """The activity type a step of this type runs under: `agentenv.step.deploy_env`."""
    return STEP_PREFIX + _part(step_type)


def world_activity(verb: str) -> str:
    """The activity type a trigger's action of this verb runs under: `agentenv.world.call_tool`."""
    return WORLD_PREFIX + _part(verb)


def named(activity_type: str) -> Activity[Any] | None:
    """The family of a named activity type (what it takes and returns), or None."""
    for prefix, family in NAMED.items():
        if activity_type.startswith(prefix) and len(activity_type) > len(prefix):
            return family
    return None


def decode_named(
    activity_type: str, raw: Sequence[RawValue], from_payload: Callable[[Payload, Any], Any]
) -> list[Any] | None:
    """A named activity's arguments as its family takes them (a dynamic activity gets them raw), or None when
    the type is not a named one or the count differs. Raises what the converter raises on a bad payload."""
    family = named(activity_type)
    if family is None or len(raw) != len(family.takes):
        return None
    return [from_payload(value.payload, hint) for value, hint in zip(raw, family.takes, strict=True)]
